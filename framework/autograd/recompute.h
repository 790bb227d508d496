#pragma once
// Saved activations written again in backward instead of kept until it.
//
// A training step's memory peaks at the end of its forward pass, where everything backward
// reads is alive. Some of it is cheap to write again from what backward keeps anyway: a
// layer norm's output y (every Transformer sublayer's first linear saves y, and the norm
// saves its own input and statistics) is one elementwise pass over that input. Such an op
// leaves a recipe on its output's storage (Storage::set_recompute); a SavedTensor of that
// storage then keeps the recipe and a weak reference instead of the memory, which is freed
// when the forward code drops the tensor, and backward writes it again only if it is gone
// by then. The recipe repeats the forward's own kernel, so backward reads the same bits and
// gradients do not change: only the peak (and a pass per norm in backward) does. Under
// autocast a weight's bfloat16 copy is such a recipe too (round the weight again; a weight
// changed in place since is refused, as a saved tensor would be).
//
// By default it is on for GPU tensors, where memory bounds the batch and a pass over an
// activation is cheap, and off on the CPU, where memory is rarely what bounds a run and the
// passes cost more of the step (the seed Transformer step: 12% less peak for ~1.5% more
// time); set_recompute_saved(true or false) decides for every device.
//
//   kiln::set_recompute_saved(true);  // on the CPU too
#include <functional>
#include <memory>

#include "../core/tensor.h"

namespace kiln {

// Whether ops leave recipes for their saved outputs on `device`. Read when an op records
// its node: a graph recorded with it off keeps its tensors whatever comes later.
bool is_recompute_saved_enabled(Device device);
// On or off for every device, instead of the default above.
void set_recompute_saved(bool on);
// Back to the default.
void reset_recompute_saved();

// How to write a storage's bytes again: rebuild() returns a contiguous tensor holding, bit
// for bit, what the storage held when the recipe was left on it. The first rebuild is kept
// for the next reader (a Transformer's encoder output feeds six cross-attention
// projections) until drop(), which the op that left the recipe calls in its own backward:
// after its consumers', so no reader comes later.
class Recompute {
 public:
  explicit Recompute(std::function<Tensor()> rebuild) : rebuild_(std::move(rebuild)) {}
  Tensor rebuild() const {
    if (!kept_.defined()) kept_ = rebuild_();
    return kept_;
  }
  void drop() const { kept_ = Tensor(); }

 private:
  std::function<Tensor()> rebuild_;
  mutable Tensor kept_;
};

namespace detail {

// Whether an op recording now should leave recipes for outputs on `device`: the setting
// is on there and no SavedTensorsHooks guard rules this thread (the SavedTensors made under
// one keep what the hooks pack and never read a recipe, and a checkpoint's second run must
// save what its first saved, whatever the setting is by then).
bool recipes_wanted(Device device);

// Leaves a recipe on `out` (the whole of a fresh storage, contiguous from its start) and
// returns it for the op's node to own; null (nothing left) when recipes_wanted is false for
// out's device, out is empty or out is not its storage's whole.
std::shared_ptr<const Recompute> leave_recompute(const Tensor& out, std::function<Tensor()> rebuild);
// The same, asked for explicitly by the caller (utils::checkpoint's recompute_outputs):
// whatever set_recompute_saved says, but never under SavedTensorsHooks.
std::shared_ptr<const Recompute> leave_recompute_asked(const Tensor& out, std::function<Tensor()> rebuild);

}  // namespace detail
}  // namespace kiln
