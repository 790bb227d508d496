// The fused Adam/AdamW update, one thread per element, with the CPU backend's
// (torch.optim.Adam's single-tensor) arithmetic, operation for operation and rounded
// the same way (no fused multiply-add; IEEE sqrt and division):
//   p, g, m, v [, vmax] (n), in place.
#include <cmath>

#include "backend/adam_scalars.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// p, m, v [, vmax] (n) updated in place from g (n)
template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, AdamScalars<T> s) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    T grad = s.maximize ? -g[i] : g[i];
    if (s.l2) grad = add_rn(grad, mul_rn(s.weight_decay, p[i]));
    const T param = s.decoupled ? mul_rn(p[i], s.decay_factor) : p[i];
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
  const AdamScalars<T> s = adam_scalars<T>(hp);
  const int64_t n = param.numel();
  if (n == 0) return;
  adam_kernel<T><<<grid_for(n), kThreads, 0, stream_of(param)>>>(param.data<T>(), grad.data<T>(), m.data<T>(),
                                                                 v.data<T>(), hp.amsgrad ? vmax.data<T>() : nullptr,
                                                                 n, s);
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
