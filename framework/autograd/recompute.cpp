// Recipes for saved outputs (recompute.h).
#include "autograd/recompute.h"

#include <atomic>

#include "autograd/saved_hooks.h"

namespace kiln {
namespace {

enum Setting : int { kDefault = -1, kOff = 0, kOn = 1 };

std::atomic<int>& recompute_setting() {
  static std::atomic<int> setting{kDefault};
  return setting;
}

}  // namespace

bool is_recompute_saved_enabled(Device device) {
  const int setting = recompute_setting().load(std::memory_order_relaxed);
  return setting == kDefault ? !device.is_cpu() : setting == kOn;
}

void set_recompute_saved(bool on) { recompute_setting().store(on ? kOn : kOff, std::memory_order_relaxed); }

void reset_recompute_saved() { recompute_setting().store(kDefault, std::memory_order_relaxed); }

namespace detail {

bool recipes_wanted(Device device) { return is_recompute_saved_enabled(device) && !current_saved_hooks(); }

namespace {

// Puts the recipe on out's storage when out is the whole of it, contiguous from its start.
std::shared_ptr<const Recompute> put_recompute(const Tensor& out, std::function<Tensor()> rebuild) {
  if (!out.defined() || out.numel() == 0 || !out.is_contiguous() || out.offset() != 0 ||
      static_cast<size_t>(out.numel()) * out.element_size() != out.impl()->storage->nbytes())
    return nullptr;
  auto r = std::make_shared<const Recompute>(std::move(rebuild));
  out.impl()->storage->set_recompute(r);
  return r;
}

}  // namespace

std::shared_ptr<const Recompute> leave_recompute(const Tensor& out, std::function<Tensor()> rebuild) {
  if (!out.defined() || !recipes_wanted(out.device())) return nullptr;
  return put_recompute(out, std::move(rebuild));
}

std::shared_ptr<const Recompute> leave_recompute_asked(const Tensor& out, std::function<Tensor()> rebuild) {
  if (current_saved_hooks()) return nullptr;
  return put_recompute(out, std::move(rebuild));
}

}  // namespace detail
}  // namespace kiln
