#pragma once
// torch.utils.checkpoint.checkpoint_sequential(functions, segments, input): the modules of
// a Sequential cut into `segments` runs of len / segments modules (the last run takes the
// rest), every run but the last through utils::checkpoint (autograd/activation_checkpoint.h), the
// last one plainly, as its output is what backward starts from anyway.
//
//   Tensor y = kiln::utils::checkpoint_sequential(*seq, 2, x);
#include <cstdint>

#include "../autograd/activation_checkpoint.h"
#include "layers.h"

namespace kiln::utils {

// Throws "[checkpoint_sequential] …" unless 1 <= segments <= seq.size().
Tensor checkpoint_sequential(const nn::Sequential& seq, int64_t segments, const Tensor& input,
                             CheckpointOptions options = {});

}  // namespace kiln::utils
