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
  // Kiln's own (torch has no such option): let the outputs go too. A product or any other
  // op outside that saves an output for its backward (a linear reading the checkpointed
  // activation) keeps a recipe (autograd/recompute.h) instead of the output's memory, and
  // its backward reads the second run's output, the same bits; under autocast the same
  // holds for the bfloat16 copy of an output the checkpoint's last op cached for the next
  // product. So `h = checkpoint(linear1 -> relu_dropout)` then `linear2(h)` keeps nothing
  // of h, at the cost of linear1 once more (rather than linear2 too, were it inside).
  // Applies whatever set_recompute_saved says, to outputs that are their storage's whole
  // (not to an input returned, nor inside another checkpoint, whose hooks save instead).
  // The recipes live while the checkpoint's graph or a consumer holds them; the second
  // run's output is kept only where a consumer will ask for it, and then handed over.
  bool recompute_outputs = false;
};

std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs, CheckpointOptions options = {});
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  CheckpointOptions options = {});

}  // namespace kiln::utils
