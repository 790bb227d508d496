#pragma once
// Hooks on the tensors the graph saves for backward, as torch.autograd.graph.
// saved_tensors_hooks: while a guard lives on a thread, every tensor an op saves there is
// handed to `pack`, and the graph keeps what pack returns instead of the tensor; backward
// calls `unpack` with it when it needs the tensor. What pack keeps is the caller's choice: a
// copy in host memory, a file name, or nothing at all but a way to compute the tensor again
// (kiln::utils::checkpoint is built this way).
//
//   kiln::SavedTensorsHooks offload(
//       [](const kiln::Tensor& t) -> std::any { return t.to(kiln::kCPU); },
//       [device](const std::any& kept) { return std::any_cast<kiln::Tensor>(kept).to(device); });
//   loss = model.forward(x);  // its saved activations wait in host memory
//
// unpack must return a tensor of the saved one's shape and dtype ("[op] the unpack hook of
// SavedTensorsHooks returned …" otherwise). A saved tensor changed in place after pack is not
// caught (the hooks own what they keep), and the hooks run on the thread that saves or
// unpacks. Guards nest: the innermost one packs.
#include <any>
#include <functional>
#include <memory>

#include "../core/tensor.h"

namespace kiln {

using PackHook = std::function<std::any(const Tensor&)>;
using UnpackHook = std::function<Tensor(const std::any&)>;

class SavedTensorsHooks {
 public:
  // Throws "[SavedTensorsHooks] …" when either function is empty.
  SavedTensorsHooks(PackHook pack, UnpackHook unpack);
  ~SavedTensorsHooks();
  SavedTensorsHooks(const SavedTensorsHooks&) = delete;
  SavedTensorsHooks& operator=(const SavedTensorsHooks&) = delete;
};

namespace detail {

struct SavedHooksPair {
  PackHook pack;
  UnpackHook unpack;
};
// The innermost guard's hooks on this thread, or null.
std::shared_ptr<const SavedHooksPair> current_saved_hooks();

}  // namespace detail
}  // namespace kiln
