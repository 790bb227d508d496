#pragma once
// The per-step constants of torch.optim.Adam's single-tensor update, in the parameter's
// dtype, computed once on the host for every backend's fused adam_step kernel.
#include <cmath>

#include "backend.h"

namespace kiln {

template <class T>
struct AdamScalars {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor, neg_step_size, bc2_sqrt;
  bool l2, decoupled;  // L2 weight decay on the gradient, or AdamW's decay of the parameter
  bool maximize;       // ascend: the gradient's sign flipped
};

template <class T>
AdamScalars<T> adam_scalars(const AdamStepParams& hp) {
  const double bc1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  return {static_cast<T>(hp.beta1),
          static_cast<T>(1.0 - hp.beta1),
          static_cast<T>(hp.beta2),
          static_cast<T>(1.0 - hp.beta2),
          static_cast<T>(hp.eps),
          static_cast<T>(hp.weight_decay),
          static_cast<T>(1.0 - hp.lr * hp.weight_decay),
          static_cast<T>(-(hp.lr / bc1)),
          static_cast<T>(std::sqrt(bc2)),
          !hp.decoupled && hp.weight_decay != 0.0,
          hp.decoupled && hp.weight_decay != 0.0,
          hp.maximize};
}

}  // namespace kiln
