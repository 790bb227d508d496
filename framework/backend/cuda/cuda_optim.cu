// The fused Adam/AdamW update, four elements a thread (one access per tensor, Pack4; one
// element a thread where a tensor is not aligned to the pack), one launch per list of up
// to 48 parameters (adam_step_many; adam_step is a list of one), with the CPU backend's
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

// One element's update: p, m, v [, vmax when amsgrad] in place from g.
template <class T>
__device__ void adam_update(T& p, T g, T& m, T& v, T* vmax, const AdamScalars<T>& s) {
  T grad = s.maximize ? -g : g;
  if (s.l2) grad = add_rn(grad, mul_rn(s.weight_decay, p));
  const T param = s.decoupled ? mul_rn(p, s.decay_factor) : p;
  m = add_rn(mul_rn(m, s.beta1), mul_rn(s.one_minus_beta1, grad));
  v = add_rn(mul_rn(v, s.beta2), mul_rn(mul_rn(s.one_minus_beta2, grad), grad));
  T vi = v;
  if (vmax) {
    vi = *vmax > vi ? *vmax : vi;
    *vmax = vi;
  }
  const T denom = add_rn(sqrt(vi) / s.bc2_sqrt, s.eps);
  p = add_rn(param, mul_rn(s.neg_step_size, m / denom));
}

// Element i of one parameter.
template <class T>
__device__ void adam_element(T* p, const T* g, T* m, T* v, T* vmax, int64_t i, const AdamScalars<T>& s) {
  adam_update(p[i], g[i], m[i], v[i], vmax ? vmax + i : nullptr, s);
}

// Pack q (elements [4q, 4q + 4)) of one parameter whose tensors are all pack_aligned.
template <class T>
__device__ void adam_pack(T* p, const T* g, T* m, T* v, T* vmax, int64_t q, const AdamScalars<T>& s) {
  using P = Pack4<T>;
  P pp = reinterpret_cast<P*>(p)[q], mp = reinterpret_cast<P*>(m)[q], vp = reinterpret_cast<P*>(v)[q];
  const P gp = reinterpret_cast<const P*>(g)[q];
  P xp;
  if (vmax) xp = reinterpret_cast<P*>(vmax)[q];
#pragma unroll
  for (int j = 0; j < 4; ++j) adam_update(pp.v[j], gp.v[j], mp.v[j], vp.v[j], vmax ? &xp.v[j] : nullptr, s);
  reinterpret_cast<P*>(p)[q] = pp;
  reinterpret_cast<P*>(m)[q] = mp;
  reinterpret_cast<P*>(v)[q] = vp;
  if (vmax) reinterpret_cast<P*>(vmax)[q] = xp;
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
  bool packed[kListMax];  // every tensor of the parameter pack_aligned: Pack4 accesses
  int first_block[kListMax + 1];
  int count;
};
static_assert(sizeof(AdamList<double>) + sizeof(AdamScalars<double>) < 4000, "kernel parameters over 4 KB");

// The list's parameters (n[k]) each, in place: a block finds its parameter, then its
// threads stride over that parameter's packs (or elements, where not packed) with the
// parameter's own blocks; a packed parameter's last n mod 4 elements go one a thread.
template <class T>
__global__ void adam_list_kernel(AdamList<T> list, AdamScalars<T> s) {
  const int b = static_cast<int>(blockIdx.x);
  int k = 0;
  while (k + 1 < list.count && list.first_block[k + 1] <= b) ++k;
  const int64_t stride = (list.first_block[k + 1] - list.first_block[k]) * static_cast<int64_t>(blockDim.x);
  const int64_t first = (b - list.first_block[k]) * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t n = list.n[k];
  T *p = list.p[k], *m = list.m[k], *v = list.v[k], *vmax = list.vmax[k];
  const T* g = list.g[k];
  int64_t done = 0;  // elements before those left to the loop of single elements
  if (list.packed[k]) {
    const int64_t packs = n / 4;
    for (int64_t q = first; q < packs; q += stride) adam_pack(p, g, m, v, vmax, q, s);
    done = packs * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) adam_element(p, g, m, v, vmax, i, s);
}

// Blocks for one parameter in a list launch: one per kThreads packs (elements where not
// packed), at most kBlocksMax (the loops above cover the rest).
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
    list.packed[k] = pack_aligned<T>(list.p[k]) && pack_aligned<T>(list.g[k]) && pack_aligned<T>(list.m[k]) &&
                     pack_aligned<T>(list.v[k]) && (!list.vmax[k] || pack_aligned<T>(list.vmax[k]));
    // One thread a pack where packed (the remainder's few elements ride on its threads).
    const int64_t units = list.packed[k] ? std::max<int64_t>(n / 4, 1) : n;
    const int64_t blocks = std::min(kBlocksMax, (units + kThreads - 1) / kThreads);
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
