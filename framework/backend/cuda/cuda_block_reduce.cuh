#pragma once
// Sums and maxima over a warp and over a block (nvcc only). blockDim.x must be a
// multiple of 32 and at most 1024; every thread of the block must call, and every
// thread gets the result.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// max that skips NaN operands where the other is a number, like the CPU's rows::max
// (`x > m ? x : m` from -inf never takes a NaN); NaN reaches a softmax through the sum.
template <class T>
__device__ inline T max_skip_nan(T a, T b) {
  return b > a ? b : (a != a ? b : a);
}

template <class T>
__device__ inline T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = max_skip_nan(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// The sum of v over the block (lane 0 of each warp publishes its warp's sum, warp 0 sums those).
template <class T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers of partial[0] are done
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? partial[lane] : T(0);
    w = warp_sum(w);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  return partial[0];
}

// The max of v over the block, with the identity `lowest` (-inf for floats).
template <class T>
__device__ inline T block_max(T v, T lowest) {
  __shared__ T partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < nwarps ? partial[lane] : lowest;
    w = warp_max(w);
    if (lane == 0) partial[0] = w;
  }
  __syncthreads();
  return partial[0];
}

// The sum / max of v over the warp, in every lane (warp_sum and warp_max leave it in lane 0).
template <class T>
__device__ inline T warp_total(T v) {
  return __shfl_sync(0xffffffffu, warp_sum(v), 0);
}
template <class T>
__device__ inline T warp_top(T v) {
  return __shfl_sync(0xffffffffu, warp_max(v), 0);
}

// Who works on one row of a row kernel: a whole block (BlockRows: long rows) or one
// warp (WarpRows: a block of kWarpsPerBlock rows at once; rows of a few hundred elements
// left most of a block idle and paid block-wide reductions). first() and step() walk the
// rows, lane() and width() the elements of a row, total() sums over the team (every
// thread of the team gets the result; every thread must call).
constexpr int kWarpsPerBlock = 8;  // blocks of 256 threads

struct BlockRows {
  static __device__ int64_t first() { return blockIdx.x; }
  static __device__ int64_t step() { return gridDim.x; }
  static __device__ int lane() { return threadIdx.x; }
  static __device__ int width() { return blockDim.x; }
  static __device__ double total(double v) { return block_sum(v); }
  static unsigned blocks(int64_t rows) { return grid_for_rows(rows); }
};

struct WarpRows {
  static __device__ int64_t first() { return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); }
  static __device__ int64_t step() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }
  static __device__ int lane() { return threadIdx.x & 31; }
  static __device__ int width() { return 32; }
  static __device__ double total(double v) { return warp_total(v); }
  static unsigned blocks(int64_t rows) { return BlockRows::blocks((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }
};

}  // namespace kiln::cuda
