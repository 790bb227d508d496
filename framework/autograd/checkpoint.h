#pragma once
// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs,
// use_reentrant=False): fn runs and records its graph as usual, but none of the tensors its
// ops save for backward is kept. When backward first needs one of them, fn runs again on
// the same inputs (grad on, the random generator's state and autocast as they were at the
// first run) and every saved tensor is taken from that second run. The outputs, the
// gradients and the random draws (dropout) are the first run's, bit for bit; what
// changes is the memory a training step holds at its peak (fn's activations only from
// its recompute to its backward) and the time of one more forward of fn.
//
//   Tensor y = kiln::utils::checkpoint([&](const Tensor& x) { return layer->forward(x); }, x);
//
// fn must do the same ops on its second run (no data-dependent branches, no state it
// changes); a second run that saves tensors of other shapes or another number of them
// throws "[checkpoint] …". Inputs changed in place between the forward and the backward
// are caught as for any saved tensor. Without grad mode fn simply runs. Built on
// SavedTensorsHooks (saved_hooks.h); checkpoints nest.
#include <functional>
#include <vector>

#include "../core/tensor.h"

namespace kiln::utils {

struct CheckpointOptions {
  // Restore the default generator's state for the second run, so that dropout draws the
  // same masks (torch's preserve_rng_state). Off: the second run draws new numbers.
  bool preserve_rng_state = true;
};

std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs, CheckpointOptions options = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  CheckpointOptions options = {});

}  // namespace kiln::utils
