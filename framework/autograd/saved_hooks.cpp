// Saved-tensor hooks (saved_hooks.h): a per-thread stack of (pack, unpack) pairs.
#include "autograd/saved_hooks.h"

#include <utility>
#include <vector>

#include "core/error.h"

namespace kiln {
namespace {

// shared_ptr: a SavedTensor keeps its pair's unpack after the guard is gone.
thread_local std::vector<std::shared_ptr<const detail::SavedHooksPair>> t_hooks;

}  // namespace

SavedTensorsHooks::SavedTensorsHooks(PackHook pack, UnpackHook unpack) {
  KILN_CHECK(pack != nullptr && unpack != nullptr, "SavedTensorsHooks",
             "expected a pack and an unpack function, got an empty ", pack ? "unpack" : "pack", " function");
  t_hooks.push_back(
      std::make_shared<const detail::SavedHooksPair>(detail::SavedHooksPair{std::move(pack), std::move(unpack)}));
}

SavedTensorsHooks::~SavedTensorsHooks() { t_hooks.pop_back(); }

namespace detail {

std::shared_ptr<const SavedHooksPair> current_saved_hooks() { return t_hooks.empty() ? nullptr : t_hooks.back(); }

}  // namespace detail
}  // namespace kiln
