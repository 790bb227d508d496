#pragma once
// What attention's two CUDA paths share (nvcc only): operand views, the mask, the
// dropout stream, and the entry points of the tiled ("flash") kernels.
//   q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev) -> out (N, H, L, Ev), lse (N, H, L)
// cuda_attention.cu holds the path that materialises the (N, H, L, S) scores around
// cuBLAS; cuda_flash_attention.cu the tiled one that never does, which is taken wherever
// it fits (head sizes up to 128, its tiles within the GPU's shared memory).
#include <array>
#include <cstdint>
#include <limits>

#include "backend/cpu/philox_words.h"
#include "core/generator.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {

// A 4-D operand (N, H, rows, cols) by value: element (n, h, r, c) at n·s0 + h·s1 + r·s2 + c·s3.
struct View4 {
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
};
inline View4 view_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

__host__ __device__ inline int64_t offset_of(const View4& v, int64_t n, int64_t h, int64_t r, int64_t c) {
  return n * v.s0 + h * v.s1 + r * v.s2 + c * v.s3;
}

// The mask of the scores: none, bool (true = -inf) or added (T).
struct MaskView {
  const void* data = nullptr;
  bool is_bool = false;
  View4 at;
};

inline MaskView mask_view(const Tensor& mask) {
  MaskView m;
  if (!mask.defined()) return m;
  m.data = mask.data_ptr();
  m.is_bool = mask.dtype() == kBool;
  m.at = view_of(mask);
  return m;
}

// Score x with the mask element at offset `off` applied (none: x).
template <class T>
__device__ inline T masked_score_at(T x, const MaskView& mask, int64_t off) {
  if (!mask.data) return x;
  if (mask.is_bool) return static_cast<const bool*>(mask.data)[off] ? -std::numeric_limits<T>::infinity() : x;
  return x + static_cast<const T*>(mask.data)[off];
}

// Score x of element (n, h, l, s) with the mask applied.
template <class T>
__device__ inline T masked_score(T x, const MaskView& mask, int64_t n, int64_t h, int64_t l, int64_t s) {
  return mask.data ? masked_score_at(x, mask, offset_of(mask.at, n, h, l, s)) : x;
}

// P of a score x from its row's lse, as attention_backward: 0 for a fully masked row
// (lse -inf), NaN where lse is NaN or +inf.
template <class T>
__device__ inline T prob_from_lse(T x, T lse) {
  if (isfinite(lse)) return exp(x - lse);
  return lse == -std::numeric_limits<T>::infinity() ? T(0) : std::numeric_limits<T>::quiet_NaN();
}

// Whether element e of the stream at (seed, block) is kept: word e % 4 of Philox block
// (block + e / 4), as for bernoulli(1 - p). Keeps the block it drew last, so a thread
// that asks for consecutive elements draws each block once.
struct DropoutWords {
  uint64_t drawn = ~uint64_t{0};
  std::array<uint32_t, 4> w{};
  __device__ bool kept(uint64_t seed, uint64_t block, int64_t e, uint64_t threshold) {
    const uint64_t b = block + static_cast<uint64_t>(e / 4);
    if (b != drawn) {
      w = philox4x32(seed, b);
      drawn = b;
    }
    // A select, not w[e % 4]: an array indexed at run time lives in local memory.
    const int k = static_cast<int>(e % 4);
    const uint32_t word = k == 0 ? w[0] : k == 1 ? w[1] : k == 2 ? w[2] : w[3];
    return static_cast<uint64_t>(word) < threshold;
  }
};

__device__ inline bool kept(uint64_t seed, uint64_t block, int64_t e, uint64_t threshold) {
  return DropoutWords().kept(seed, block, e, threshold);
}

// The tiled kernels: false (and nothing done) where the shapes do not fit them, and the
// caller takes the materialising path. Same arguments as Backend::attention and
// attention_backward (T float or double, every tensor on the device of out / grad_q),
// after the caller's return for no rows (N·H·L = 0) and, in the backward, its zero
// gradients where L or S is 0.
template <class T>
bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, double p,
                     uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse);
template <class T>
bool flash_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, double scale, double p,
                              uint64_t seed, uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                              const Tensor& grad_v);

}  // namespace kiln::cuda
