#pragma once
#include <vector>

#include "../core/tensor.h"

namespace kiln::optim {

// Scales all gradients so that their global norm (over every parameter together) is at
// most max_norm; returns the norm before clipping. norm_type 2 (L2) or infinity.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim

// Where PyTorch keeps them: torch.nn.utils.clip_grad_norm_ (torch::nn::utils in libtorch).
namespace kiln::nn::utils {
using optim::clip_grad_norm_;
using optim::clip_grad_value_;
}  // namespace kiln::nn::utils
