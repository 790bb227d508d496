#pragma once
// Launch geometry and strided addressing shared by the kernels (nvcc only).
//
// Elementwise kernels are grid-stride loops over a linear element index (int64: a
// tensor may have more than 2^31 elements); each operand's element offset comes from
// its own strides, which travel by value in a small struct (no device allocation per
// launch). Row kernels use one block per row.
#include <algorithm>
#include <array>
#include <cstdint>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/fast_div.h"
#include "core/tensor.h"

namespace kiln::cuda {

constexpr int kThreads = 256;  // threads per block everywhere (a multiple of the warp)

// Blocks for n elements, one per thread, capped: grid-stride loops cover the rest.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

// Blocks for `rows` rows of a one-block-per-row kernel (which loops over rows beyond it).
inline unsigned grid_for_rows(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 20));
}

#define KILN_GRID_STRIDE_LOOP(i, n)                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Dimensions of N same-shaped operands after merging the ones that are contiguous for
// all of them; more than this many left is an error (PyTorch's limit is 25; real
// layouts merge to 4 or fewer).
constexpr int kMaxDims = 16;

// sizes (innermost last) and each operand's strides, in elements, by value.
template <int N>
struct Strided {
  int ndim = 0;
  bool fits31 = false;  // fewer than 2^31 elements: indices divide by `div` (fast_div.h)
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
  FastDiv div[kMaxDims];  // by sizes[d], where fits31

  // Element offsets of linear (row-major) element i in each operand. Operands of one
  // layout merge to a single dimension (contiguous ones: stride 1), which needs no
  // division: the 64-bit divisions of the general loop cost more than the memory
  // traffic of a simple kernel, and even 32-bit ones (~20 instructions each) several
  // times the multiply-high of a FastDiv, which tensors under 2^31 elements take.
  __device__ void offsets(int64_t i, int64_t (&off)[N]) const {
    if (ndim == 1) {
      for (int k = 0; k < N; ++k) off[k] = i * strides[k][0];
      return;
    }
    if (fits31) return offsets_fast(static_cast<uint32_t>(i), off);
    offsets_wide(i, off);
  }

 private:
  __device__ void offsets_fast(uint32_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const uint32_t q = div[d].div(i), idx = i - q * div[d].divisor;
      i = q;
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(idx) * strides[k][d];
    }
  }
  __device__ void offsets_wide(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t idx = i % sizes[d];
      i /= sizes[d];
      for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
  }
};

// The layout of ops (same shape, any strides), merged as the CPU's strided loop does:
// size-1 dims dropped, neighbours merged where every operand is contiguous across them.
template <int N>
Strided<N> make_strided(const char* op, const std::array<const Tensor*, N>& ops) {
  Strided<N> L;
  const Shape& shape = ops[0]->shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = L.ndim > 0;
    for (int k = 0; k < N && merge; ++k) merge = L.strides[k][L.ndim - 1] == ops[k]->strides()[d] * shape[d];
    if (merge) {
      L.sizes[L.ndim - 1] *= shape[d];
      for (int k = 0; k < N; ++k) L.strides[k][L.ndim - 1] = ops[k]->strides()[d];
      continue;
    }
    KILN_CHECK(L.ndim < kMaxDims, op, "CUDA kernels take at most ", kMaxDims,
               " non-mergeable dimensions, got a tensor of shape ", shape_str(shape));
    L.sizes[L.ndim] = shape[d];
    for (int k = 0; k < N; ++k) L.strides[k][L.ndim] = ops[k]->strides()[d];
    ++L.ndim;
  }
  if (L.ndim == 0) {  // a single element
    L.ndim = 1;
    L.sizes[0] = 1;
    for (int k = 0; k < N; ++k) L.strides[k][0] = 0;
  }
  L.fits31 = ops[0]->numel() < (int64_t{1} << 31);
  if (L.fits31)
    for (int d = 0; d < L.ndim; ++d) L.div[d] = FastDiv(static_cast<uint32_t>(L.sizes[d]));
  return L;
}

// Four elements of T, loaded or stored as one access where the address is aligned to the
// pack (pack_aligned): elementwise kernels over contiguous tensors take four elements a
// thread so (one element a thread moved a float32 -> bfloat16 cast at 1.3 TB/s).
template <class T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

template <class T>
bool pack_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(Pack4<T>) == 0;
}

// Arithmetic that the compiler may not fuse into an FMA: where the CPU's result must be
// reproduced to the bit (random ranges, arange, Adam), one rounding per operation.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }

}  // namespace kiln::cuda
