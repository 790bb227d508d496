// The fused Adam/AdamW update, one thread per element (one launch per list of up to 48
// parameters: adam_step_many; adam_step is a list of one), with the CPU backend's
// (torch.optim.Adam's single-tensor) arithmetic, operation for operation and rounded
// as the CPU's baseline code (no fused multiply-add, which g++'s AVX2 and AVX-512 clones
// of the CPU loop do use: meson.build; IEEE sqrt and division):
//   p, g, m, v [, vmax] (n), in place.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/adam_scalars.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// Element i of one parameter: p, m, v [, vmax] updated in place from g.
template <class T>
__device__ void adam_element(T* p, const T* g, T* m, T* v, T* vmax, int64_t i, const AdamScalars<T>& s) {
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

// Up to kListMax parameters of one launch, by value (a kernel's parameters may take 4 KB:
// this is about 2.5 KB). Parameter k gets blocks [first_block[k], first_block[k + 1]).
constexpr int kListMax = 48;
template <class T>
struct AdamList {
  T* p[kListMax];
  const T* g[kListMax];
  T* m[kListMax];
  T* v[kListMax];
  T* vmax[kListMax];  // null without amsgrad
  int64_t n[kListMax];
  int first_block[kListMax + 1];
  int count;
};
static_assert(sizeof(AdamList<double>) + sizeof(AdamScalars<double>) < 4000, "kernel parameters over 4 KB");

// The list's parameters (n[k]) each, in place: a block finds its parameter, then its
// threads stride over that parameter's elements with the parameter's own blocks.
template <class T>
__global__ void adam_list_kernel(AdamList<T> list, AdamScalars<T> s) {
  const int b = static_cast<int>(blockIdx.x);
  int k = 0;
  while (k + 1 < list.count && list.first_block[k + 1] <= b) ++k;
  const int64_t blocks = list.first_block[k + 1] - list.first_block[k];
  const int64_t n = list.n[k];
  for (int64_t i = (b - list.first_block[k]) * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += blocks * blockDim.x) {
    adam_element(list.p[k], list.g[k], list.m[k], list.v[k], list.vmax[k], i, s);
  }
}

// Blocks for one parameter of n elements in a list launch: one per kThreads elements,
// at most kBlocksMax (the loop above covers the rest).
constexpr int64_t kBlocksMax = 4096;

template <class T>
void adam_many_typed(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  const AdamScalars<T> s = adam_scalars<T>(hp);
  AdamList<T> list{};
  auto launch = [&] {
    if (list.count == 0) return;
    adam_list_kernel<T><<<list.first_block[list.count], kThreads, 0, stream_of(params[0].param)>>>(list, s);
    KILN_CUDA_LAUNCH_CHECK("adam_step");
    list = AdamList<T>{};
  };
  for (const AdamTensors& t : params) {
    const int64_t n = t.param.numel();
    if (n == 0) continue;
    const int k = list.count;
    list.p[k] = t.param.data<T>();
    list.g[k] = t.grad.data<T>();
    list.m[k] = t.exp_avg.data<T>();
    list.v[k] = t.exp_avg_sq.data<T>();
    list.vmax[k] = hp.amsgrad ? t.max_exp_avg_sq.data<T>() : nullptr;
    list.n[k] = n;
    const int64_t blocks = std::min(kBlocksMax, (n + kThreads - 1) / kThreads);
    list.first_block[k + 1] = list.first_block[k] + static_cast<int>(blocks);
    list.count = k + 1;
    if (list.count == kListMax) launch();
  }
  launch();
}

}  // namespace

void CudaBackend::adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  if (params.empty()) return;
  DeviceGuard guard(params[0].param);
  if (params[0].param.dtype() == kFloat64) return adam_many_typed<double>(params, hp);
  adam_many_typed<float>(params, hp);
}

void CudaBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                            const Tensor& vmax, const AdamStepParams& hp) {
  adam_step_many({{param, grad, m, v, vmax}}, hp);
}

}  // namespace kiln::cuda
