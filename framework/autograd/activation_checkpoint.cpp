// Activation checkpointing (checkpoint.h) on saved-tensor hooks: the first run's pack hook
// keeps a slot number per saved tensor (and the tensor's shape, dtype and device, to check
// the second run against); the first unpack runs fn again under a hook that fills the
// slots. A slot is emptied when the SavedTensor holding it goes (its node has run its
// backward), so the second run's tensors live no longer than the first run's would have.
#include "autograd/activation_checkpoint.h"

#include <algorithm>
#include <any>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "autograd/autocast.h"
#include "autograd/autocast_cast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/recompute.h"
#include "autograd/saved_hooks.h"
#include "core/error.h"
#include "core/generator.h"

namespace kiln::utils {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct SavedMeta {
  Shape shape;
  DType dtype;
  Device device;
};

// An input of fn: detached (the second run makes its own leaves), whether it required grad
// (what the ops save depends on it) and its version (a change in place is refused). An
// input whose storage carries a recipe (a layer norm's output, autograd/recompute.h) is
// kept as a SavedTensor of it, the recipe and a weak reference, not its memory (outside
// any saved-tensor hooks).
struct Input {
  Tensor tensor;            // kept whole; undefined when kept by recipe
  SavedTensor by_recipe;
  bool requires_grad;
  uint64_t version;
};

// A recipe recompute_outputs left on an output of the first run (or on the bfloat16 copy
// of it that autocast cached): the recipe and that storage, weakly (the frame owns the
// recipe in recipes_; the storage is the forward's), and what the second run gave for it,
// kept until the recipe's rebuild takes it.
struct OutputRecipe {
  std::weak_ptr<const Recompute> recipe;
  std::weak_ptr<Storage> first;
  Tensor second;
};

struct Output {
  OutputRecipe full, low;
};

// A tensor the first run saved: what it was, the second run's tensor for it, and whether
// its handle still exists (a slot whose node has run is not filled again).
struct Slot {
  SavedMeta meta;
  Tensor value;
  bool live = true;
};

std::string describe(const SavedMeta& m) {
  return std::string(dtype_name(m.dtype)) + " tensor of shape " + shape_str(m.shape) + " on " + m.device.str();
}

// One call of checkpoint: what the second run needs, and its results by slot.
class Frame : public std::enable_shared_from_this<Frame> {
 public:
  Frame(Fn fn, const std::vector<Tensor>& inputs, CheckpointOptions options)
      : fn_(std::move(fn)),
        preserve_rng_(options.preserve_rng_state),
        rng_(default_generator().get_state()),
        autocast_(is_autocast_enabled()),
        autocast_dtype_(get_autocast_dtype()) {
    for (const Tensor& t : inputs) {
      if (!t.defined()) {
        inputs_.push_back(Input{t, SavedTensor(), false, 0});
      } else if (t.impl()->storage->recompute() && !detail::current_saved_hooks()) {
        // (Under an outer checkpoint's hooks the SavedTensor would be one of its slots, which
        // its second run, on a rebuilt input without the recipe, would not save again.)
        inputs_.push_back(Input{Tensor(), SavedTensor(t, "checkpoint"), t.requires_grad(), t.version()});
      } else {
        inputs_.push_back(Input{t.detach(), SavedTensor(), t.requires_grad(), t.version()});
      }
    }
  }

  // Leaves on the first run's outputs (and their bfloat16 copies autocast cached) recipes
  // that read the second run's (recompute_outputs); `inputs` as passed to checkpoint.
  void leave_output_recipes(const std::vector<Tensor>& out, const std::vector<Tensor>& inputs);

  // The first run saves t: a handle to a new slot.
  std::any pack(const Tensor& t);
  // Slot i's tensor, from the second run (made now if it has not run).
  Tensor unpack(size_t slot) {
    if (!slots_[slot].value.defined()) run_again();
    return slots_[slot].value;
  }
  // The handle of slot i is gone: nothing will read it. With the last one the output
  // recipes are let go: a consumer that kept one keeps it (and this frame) until it runs.
  void forget(size_t slot) {
    slots_[slot].value = Tensor();
    if (slots_[slot].live && --live_slots_ == 0) std::vector<std::shared_ptr<const Recompute>>().swap(recipes_);
    slots_[slot].live = false;
  }
  // Throws when the first run changed an input in place (the second would read another value);
  // `given` (the inputs as passed) stands for those kept by recipe.
  void check_inputs_unchanged(const char* when, const std::vector<Tensor>& given = {}) const;

 private:
  void run_again();
  // Output i of the second run, or its bfloat16 copy (running it again when not kept).
  Tensor second_output(size_t i, bool low);
  // Keeps what the second run gave for output i (t) where a consumer will ask for it.
  void keep_output(size_t i, const Tensor& t);
  // Whether a consumer holds this recipe and the first run's storage is gone: then its
  // backward will ask for the second run's tensor.
  bool asked(const OutputRecipe& o) const;
  void keep(size_t slot, const Tensor& t);

  Fn fn_;
  std::vector<Input> inputs_;
  bool preserve_rng_;
  GeneratorState rng_;
  bool autocast_;
  DType autocast_dtype_;
  std::vector<Slot> slots_;  // in the order the first run saved
  std::vector<Output> outputs_;  // recompute_outputs only
  // The output recipes, owned here while the first run's graph keeps a saved tensor (the
  // storages hold them weakly); each holds this frame.
  std::vector<std::shared_ptr<const Recompute>> recipes_;
  size_t live_slots_ = 0;
};

// What a SavedTensor of the first run keeps: its frame and slot.
struct Handle {
  std::shared_ptr<Frame> frame;
  size_t slot;
  Handle(std::shared_ptr<Frame> f, size_t s) : frame(std::move(f)), slot(s) {}
  ~Handle() { frame->forget(slot); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

std::any Frame::pack(const Tensor& t) {
  slots_.push_back({{t.shape(), t.dtype(), t.device()}, Tensor(), true});
  ++live_slots_;
  return std::make_shared<Handle>(shared_from_this(), slots_.size() - 1);
}

void Frame::check_inputs_unchanged(const char* when, const std::vector<Tensor>& given) const {
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Tensor& t = inputs_[i].by_recipe.defined() && i < given.size() ? given[i] : inputs_[i].tensor;
    // Undefined, or kept by recipe and not given: its SavedTensor checks the version.
    if (!t.defined()) continue;
    KILN_CHECK(t.version() == inputs_[i].version, "checkpoint", "input ", i, " (", dtype_name(t.dtype()),
               " tensor of shape ", shape_str(t.shape()), ") was modified by an inplace operation ", when,
               ": it is at version ", t.version(), "; expected version ", inputs_[i].version, " instead");
  }
}

void Frame::keep(size_t slot, const Tensor& t) {
  KILN_CHECK(slot < slots_.size(), "checkpoint", "the second run of the function saved more tensors for backward ",
             "than the first (", slots_.size(), "): it must do the same operations on both runs");
  const SavedMeta& want = slots_[slot].meta;
  KILN_CHECK(t.shape() == want.shape && t.dtype() == want.dtype && t.device() == want.device, "checkpoint",
             "the second run of the function saved a ", describe({t.shape(), t.dtype(), t.device()}),
             " for backward where the first saved a ", describe(want), " (saved tensor ", slot,
             "): it must do the same operations on both runs");
  if (slots_[slot].live) slots_[slot].value = t;
}

// Restores the default generator's state when the second run ends, however it ends.
class RngRestore {
 public:
  explicit RngRestore(const GeneratorState& replay) : saved_(default_generator().get_state()) {
    default_generator().set_state(replay);
  }
  ~RngRestore() { default_generator().set_state(saved_); }
  RngRestore(const RngRestore&) = delete;
  RngRestore& operator=(const RngRestore&) = delete;

 private:
  GeneratorState saved_;
};

void Frame::run_again() {
  check_inputs_unchanged("after the checkpoint saved it");
  std::vector<Tensor> inputs;
  for (const Input& in : inputs_) {
    Tensor t = in.by_recipe.defined() ? in.by_recipe.get() : in.tensor.defined() ? in.tensor.detach() : in.tensor;
    if (in.requires_grad) t.requires_grad_();
    inputs.push_back(t);
  }
  std::optional<RngRestore> rng;
  if (preserve_rng_) rng.emplace(rng_);
  AutocastGuard autocast(autocast_dtype_, autocast_);
  EnableGradGuard grad;  // backward runs without recording
  size_t count = 0;
  std::vector<Tensor> out;
  {
    SavedTensorsHooks fill([this, &count](const Tensor& t) -> std::any {
      keep(count++, t);
      return {};
    }, [](const std::any&) -> Tensor {
      KILN_FAIL("checkpoint", "the graph of the second run of a checkpointed function is not for backward");
    });
    out = fn_(inputs);  // the graph of this run goes with these
  }
  KILN_CHECK(count == slots_.size(), "checkpoint", "the second run of the function saved ", count,
             " tensors for backward and the first ", slots_.size(), ": it must do the same operations on both runs");
  // (Inside this run's autocast guard: the bfloat16 copies it cached are still there.)
  for (size_t i = 0; i < outputs_.size() && i < out.size(); ++i) keep_output(i, out[i]);
}

bool Frame::asked(const OutputRecipe& o) const {
  const std::shared_ptr<const Recompute> r = o.recipe.lock();
  // Held beyond this lock and recipes_ (which owns them while a slot lives): by a consumer.
  return r && o.first.expired() && r.use_count() > 1 + (live_slots_ > 0 ? 1 : 0);
}

void Frame::keep_output(size_t i, const Tensor& t) {
  Output& o = outputs_[i];
  if (asked(o.full)) o.full.second = t.detach();
  if (asked(o.low)) {
    // The copy the second run's last op cached (the same bits as rounding t), not a new one.
    const Tensor low = detail::autocast_cached_copy(t);
    o.low.second = low.defined() ? low : t.to(kBFloat16);
  }
}

Tensor Frame::second_output(size_t i, bool low) {
  Tensor& kept = low ? outputs_[i].low.second : outputs_[i].full.second;
  if (!kept.defined()) run_again();
  KILN_CHECK(kept.defined(), "checkpoint", "internal: the second run of the function did not give output ", i);
  // The recipe keeps it for its other readers (Recompute::rebuild): handed over, not shared.
  return std::exchange(kept, Tensor());
}

void Frame::leave_output_recipes(const std::vector<Tensor>& out, const std::vector<Tensor>& inputs) {
  if (live_slots_ == 0) return;  // fn saved nothing: no graph of its own to hang them on
  outputs_.resize(out.size());
  auto is_input = [&inputs](const Tensor& t) {
    return std::any_of(inputs.begin(), inputs.end(), [&t](const Tensor& in) {
      return in.defined() && in.impl()->storage == t.impl()->storage;
    });
  };
  for (size_t i = 0; i < out.size(); ++i) {
    const Tensor& t = out[i];
    // Not an input (or a view of one) returned, nor anything that carries a recipe already.
    if (!t.defined() || is_input(t) || t.impl()->storage->recompute()) continue;
    auto frame = shared_from_this();
    auto r = detail::leave_recompute_asked(t, [frame, i]() { return frame->second_output(i, false); });
    if (!r) continue;
    outputs_[i].full = {r, t.impl()->storage, Tensor()};
    recipes_.push_back(std::move(r));
    if (const Tensor low = detail::autocast_cached_copy(t); low.defined()) {
      r = detail::leave_recompute_asked(low, [frame, i]() { return frame->second_output(i, true); });
      if (!r) continue;
      outputs_[i].low = {r, low.impl()->storage, Tensor()};
      recipes_.push_back(std::move(r));
    }
  }
}

}  // namespace

std::vector<Tensor> checkpoint(const Fn& fn, const std::vector<Tensor>& inputs, CheckpointOptions options) {
  KILN_CHECK(fn != nullptr, "checkpoint", "the function is empty");
  if (!is_grad_enabled()) return fn(inputs);
  auto frame = std::make_shared<Frame>(fn, inputs, options);
  std::vector<Tensor> out;
  {
    SavedTensorsHooks hooks([frame](const Tensor& t) { return frame->pack(t); },
                            [](const std::any& kept) {
                              const auto& handle = std::any_cast<const std::shared_ptr<Handle>&>(kept);
                              return handle->frame->unpack(handle->slot);
                            });
    out = fn(inputs);
  }
  frame->check_inputs_unchanged("by the checkpointed function", inputs);
  if (options.recompute_outputs) frame->leave_output_recipes(out, inputs);
  return out;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, CheckpointOptions options) {
  KILN_CHECK(fn != nullptr, "checkpoint", "the function is empty");
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {input},
                    options)[0];
}

}  // namespace kiln::utils
