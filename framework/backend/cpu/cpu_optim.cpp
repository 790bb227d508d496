// Fused optimizer updates: one pass over a parameter and its state instead of the ten
// or so elementwise ops (and temporaries) the composed form needs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/adam_scalars.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// No fused multiply-add in this loop, whatever the compiler's default (meson.build): with
// it g++ contracted `p * decay + step * ratio` one way in the vectorised body and the other
// in the scalar remainder, so an element's bits depended on where a thread's chunk began
// (AdamW differed between 1 and 2 threads). Without it every element is rounded as the
// CUDA kernel rounds it; the loop is bound by memory either way.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// adam_range over every parameter of `params` as one range of their summed lengths, so
// that a model's many small tensors (biases, norms) make one parallel loop, not one each.
template <class T>
void adam_many_typed(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  const AdamScalars<T> s = adam_scalars<T>(hp);
  std::vector<int64_t> first(params.size() + 1, 0);  // parameter k's elements: [first[k], first[k + 1])
  for (size_t k = 0; k < params.size(); ++k) first[k + 1] = first[k] + params[k].param.numel();
  parallel_for(first.back(), kGrainElements / 4, [&](int64_t i0, int64_t i1) {
    // The last parameter starting at or before i0 (empty ones are skipped by the loop).
    auto k = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), i0) - first.begin() - 1);
    for (; k < params.size() && first[k] < i1; ++k) {
      const AdamTensors& t = params[k];
      const int64_t b = std::max(i0, first[k]) - first[k], e = std::min(i1, first[k + 1]) - first[k];
      if (b >= e) continue;
      adam_range<T>(t.param.data<T>(), t.grad.data<T>(), t.exp_avg.data<T>(), t.exp_avg_sq.data<T>(),
                    hp.amsgrad ? t.max_exp_avg_sq.data<T>() : nullptr, b, e, s);
    }
  });
}

}  // namespace

void CpuBackend::adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  if (params.empty()) return;
  if (params[0].param.dtype() == kFloat64) return adam_many_typed<double>(params, hp);
  adam_many_typed<float>(params, hp);
}

void CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                           const Tensor& vmax, const AdamStepParams& hp) {
  adam_step_many({{param, grad, m, v, vmax}}, hp);
}

}  // namespace kiln::cpu
