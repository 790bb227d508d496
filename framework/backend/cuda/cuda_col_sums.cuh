#pragma once
// Column reductions, x (A, R, B) -> (A, B) over R, on blocks of (kColX, kColY) threads:
// 32 neighbouring columns read coalesced along B, 8 rows of threads splitting the rows
// (reductions over dims, the layer-norm weight and bias gradients; nvcc only).
#include <algorithm>
#include <cstdint>

namespace kiln::cuda {

constexpr int kColX = 32, kColY = 8;

// Row splits for a column sum of A·⌈B/32⌉ column chunks over R rows: enough blocks to
// fill the GPU (about 1024), none shorter than 64 rows. With few columns one block per
// chunk leaves most of it idle (a bias gradient: 512 columns of 6400 rows is 16 blocks).
// Each split's sums go to a scratch tensor, and a second pass adds the splits in a fixed
// order, so the result is the same on every run.
inline int64_t col_splits(int64_t A, int64_t R, int64_t B) {
  const int64_t blocks = A * ((B + kColX - 1) / kColX);
  return std::clamp<int64_t>(std::min<int64_t>(R / 64, 1024 / std::max<int64_t>(blocks, 1)), 1, 65535);
}

// Stage 2 of a column sum over row splits: out0 (n) = Σ_s part0 (s, n), and the same for
// part1 into out1 where given (the layer norm's weight and bias gradients at once). A
// block of (kColX, kColY) threads takes 32 columns; its rows of threads add every
// kColY-th split, then thread row 0 adds the kColY partial sums in order: a fixed order,
// so every run gives the same bits. (One thread a column adding all the splits in turn
// waited on each load: 37 µs for 64 splits of 512 columns.)
template <class AccT, class T>
__global__ void finish_col_splits_kernel(const AccT* part0, const AccT* part1, int64_t splits, int64_t n, T* out0,
                                         T* out1) {
  __shared__ AccT s0[kColY][kColX], s1[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColX; c0 < n; c0 += static_cast<int64_t>(gridDim.x) * kColX) {
    const int64_t j = c0 + tx;
    AccT a0 = 0, a1 = 0;
    if (j < n) {
      for (int64_t sp = ty; sp < splits; sp += kColY) {
        a0 += part0[sp * n + j];
        if (part1) a1 += part1[sp * n + j];
      }
    }
    __syncthreads();  // the previous columns' sums have been read
    s0[ty][tx] = a0;
    s1[ty][tx] = a1;
    __syncthreads();
    if (ty == 0 && j < n) {
      AccT t0 = 0, t1 = 0;
      for (int k = 0; k < kColY; ++k) {
        t0 += s0[k][tx];
        t1 += s1[k][tx];
      }
      if (out0) out0[j] = static_cast<T>(t0);
      if (out1) out1[j] = static_cast<T>(t1);
    }
  }
}

// finish_col_splits_kernel's launch over n columns.
template <class AccT, class T>
void finish_col_splits(const AccT* part0, const AccT* part1, int64_t splits, int64_t n, T* out0, T* out1,
                       cudaStream_t s) {
  const int64_t chunks = (n + kColX - 1) / kColX;
  const auto blocks = static_cast<unsigned>(std::clamp<int64_t>(chunks, 1, int64_t{1} << 20));
  finish_col_splits_kernel<AccT, T><<<blocks, dim3(kColX, kColY), 0, s>>>(part0, part1, splits, n, out0, out1);
}

}  // namespace kiln::cuda
