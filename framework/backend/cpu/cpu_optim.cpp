// Fused optimizer updates: one pass over a parameter and its state instead of the ten
// or so elementwise ops (and temporaries) the composed form needs.
#include <cmath>

#include "backend/adam_scalars.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// p, g, m, v (and vmax when amsgrad): (n) each, updated in place over [i0, i1).
template <class T>
KILN_MULTIVERSION void adam_range(T* p, const T* g, T* m, T* v, T* vmax, int64_t i0, int64_t i1,
                                  const AdamScalars<T> s) {
  for (int64_t i = i0; i < i1; ++i) {
    T grad = s.maximize ? -g[i] : g[i];
    if (s.l2) grad = grad + s.weight_decay * p[i];
    T param = s.decoupled ? p[i] * s.decay_factor : p[i];
    T mi = m[i] * s.beta1 + s.one_minus_beta1 * grad;
    T vi = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    if (vmax) {
      vi = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vi;
    }
    T denom = std::sqrt(vi) / s.bc2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * (mi / denom);
  }
}

template <class T>
void adam_typed(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const Tensor& vmax,
                const AdamStepParams& hp) {
  const AdamScalars<T> s = adam_scalars<T>(hp);
  T* p = param.data<T>();
  const T* g = grad.data<T>();
  T* pm = m.data<T>();
  T* pv = v.data<T>();
  T* pvmax = hp.amsgrad ? vmax.data<T>() : nullptr;
  parallel_for(param.numel(), kGrainElements / 4, [&](int64_t i0, int64_t i1) {
    adam_range<T>(p, g, pm, pv, pvmax, i0, i1, s);
  });
}

}  // namespace

void CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                           const Tensor& vmax, const AdamStepParams& hp) {
  if (param.dtype() == kFloat64) return adam_typed<double>(param, grad, m, v, vmax, hp);
  adam_typed<float>(param, grad, m, v, vmax, hp);
}

}  // namespace kiln::cpu
