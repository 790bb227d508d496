// The fused Adam/AdamW update, one thread per element, with the CPU backend's
// (torch.optim.Adam's single-tensor) arithmetic, operation for operation and rounded
// the same way (no fused multiply-add; IEEE sqrt and division):
//   p, g, m, v [, vmax] (n), in place.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

template <class T>
struct AdamScalars {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor, neg_step_size, bc2_sqrt;
};

// p, m, v [, vmax] (n) updated in place from g (n)
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, AdamScalars<T> s, bool l2,
                            bool decoupled, bool maximize) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    T grad = maximize ? -g[i] : g[i];
    if (l2) grad = add_rn(grad, mul_rn(s.weight_decay, p[i]));
    const T param = decoupled ? mul_rn(p[i], s.decay_factor) : p[i];
    const T mi = add_rn(mul_rn(m[i], s.beta1), mul_rn(s.one_minus_beta1, grad));
    T vi = add_rn(mul_rn(v[i], s.beta2), mul_rn(mul_rn(s.one_minus_beta2, grad), grad));
    m[i] = mi;
    v[i] = vi;
    if (vmax) {
      vi = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vi;
    }
    const T denom = add_rn(sqrt(vi) / s.bc2_sqrt, s.eps);
    p[i] = add_rn(param, mul_rn(s.neg_step_size, mi / denom));
  }
}

template <class T>
void adam_typed(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const AdamStepParams& hp) {
  const double bc1 = 1.0 - std::pow(hp.beta1, static_cast<double>(hp.step));
  const double bc2 = 1.0 - std::pow(hp.beta2, static_cast<double>(hp.step));
  AdamScalars<T> s{static_cast<T>(hp.beta1),
                   static_cast<T>(1.0 - hp.beta1),
                   static_cast<T>(hp.beta2),
                   static_cast<T>(1.0 - hp.beta2),
                   static_cast<T>(hp.eps),
                   static_cast<T>(hp.weight_decay),
                   static_cast<T>(1.0 - hp.lr * hp.weight_decay),
                   static_cast<T>(-(hp.lr / bc1)),
                   static_cast<T>(std::sqrt(bc2))};
  const bool l2 = !hp.decoupled && hp.weight_decay != 0.0;
  const bool decoupled = hp.decoupled && hp.weight_decay != 0.0;
  const int64_t n = param.numel();
  if (n == 0) return;
  adam_kernel<T><<<grid_for(n), kThreads, 0, stream_of(param)>>>(param.data<T>(), grad.data<T>(), m.data<T>(),
                                                                 v.data<T>(), hp.amsgrad ? vmax.data<T>() : nullptr,
                                                                 n, s, l2, decoupled, hp.maximize);
  KILN_CUDA_LAUNCH_CHECK("adam_step");
}

}  // namespace

void CudaBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const Tensor& vmax, const AdamStepParams& hp) {
  DeviceGuard guard(param);
  if (param.dtype() == kFloat64) return adam_typed<double>(param, grad, m, v, vmax, hp);
  adam_typed<float>(param, grad, m, v, vmax, hp);
}

}  // namespace kiln::cuda
