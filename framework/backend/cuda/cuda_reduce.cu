// Reductions, as the CPU backend does them: x (contiguous) viewed as (A, R, B) with R
// the reduced block of dims, out (A, B) = reduce_r x[a, r, b]; reduced dims that are
// not one block are done one block at a time (last first). Max/min can also write the
// index of the extremum: the first one on ties, and the first NaN if there is one.
#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_col_sums.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/reduce_plan.h"
#include "backend/sum_accumulator.h"

namespace kiln::cuda {
namespace {

// Whether candidate (v, i) beats (w, j): NaN beats a number, a better value wins, and
// equal values (or two NaNs) go to the lower index. A left-to-right scan that keeps
// the winner gives the CPU's answer; so does any tree of these comparisons.
template <class T>
__device__ inline bool beats(ReduceOp op, T v, int64_t i, T w, int64_t j) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool vn = v != v, wn = w != w;
    if (vn || wn) return vn && wn ? i < j : vn;
  }
  if (v == w) return i < j;
  return op == ReduceOp::Max ? v > w : v < w;
}

// x (A, R) -> out (A) [, idx (A)]: one block per row, threads striding over r.
template <class T>
__global__ void reduce_rows_kernel(ReduceOp op, const T* x, int64_t A, int64_t R, T* out, int64_t* idx) {
  using AccT = sum_accumulator_t<T>;
  __shared__ T best_v[kThreads];
  __shared__ int64_t best_i[kThreads];
  __shared__ bool has[kThreads];
  const int t = threadIdx.x;
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    const T* row = x + a * R;
    if (op == ReduceOp::Sum) {
      AccT s = 0;
      for (int64_t r = t; r < R; r += blockDim.x) s += static_cast<AccT>(row[r]);
      s = block_sum(s);
      if (t == 0) out[a] = static_cast<T>(s);
      continue;
    }
    T bv{};
    int64_t bi = -1;
    for (int64_t r = t; r < R; r += blockDim.x) {
      if (bi < 0 || beats(op, row[r], r, bv, bi)) bv = row[r], bi = r;
    }
    __syncthreads();  // the previous row's thread 0 has read slot 0
    best_v[t] = bv;
    best_i[t] = bi;
    has[t] = bi >= 0;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (t < stride && has[t + stride] &&
          (!has[t] || beats(op, best_v[t + stride], best_i[t + stride], best_v[t], best_i[t]))) {
        best_v[t] = best_v[t + stride];
        best_i[t] = best_i[t + stride];
        has[t] = true;
      }
      __syncthreads();
    }
    if (t == 0) {
      out[a] = best_v[0];
      if (idx) idx[a] = best_i[0];
    }
  }
}

// Columns of a reduction with B > 1: a block of (kColX, kColY) threads takes 32
// neighbouring b of one a; its 8 rows of threads split r, then combine.
// x (A, R, B) -> out (A, B) [, idx (A, B)]
template <class T>
__global__ void reduce_cols_kernel(ReduceOp op, const T* x, int64_t A, int64_t R, int64_t B, T* out, int64_t* idx) {
  using AccT = sum_accumulator_t<T>;
  __shared__ AccT sum_s[kColY][kColX];
  __shared__ T best_v[kColY][kColX];
  __shared__ int64_t best_i[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunks = (B + kColX - 1) / kColX;
  for (int64_t task = blockIdx.x; task < A * chunks; task += gridDim.x) {
    const int64_t a = task / chunks, b = (task % chunks) * kColX + tx;
    const bool live = b < B;
    const T* col = x + a * R * B + b;
    __syncthreads();  // the previous task's combining threads are done with the slots
    if (op == ReduceOp::Sum) {
      AccT s = 0;
      if (live)
        for (int64_t r = ty; r < R; r += kColY) s += static_cast<AccT>(col[r * B]);
      sum_s[ty][tx] = s;
      __syncthreads();
      if (ty == 0 && live) {
        AccT total = 0;
        for (int k = 0; k < kColY; ++k) total += sum_s[k][tx];
        out[a * B + b] = static_cast<T>(total);
      }
      continue;
    }
    T bv{};
    int64_t bi = -1;
    if (live)
      for (int64_t r = ty; r < R; r += kColY)
        if (bi < 0 || beats(op, col[r * B], r, bv, bi)) bv = col[r * B], bi = r;
    best_v[ty][tx] = bv;
    best_i[ty][tx] = bi;
    __syncthreads();
    if (ty == 0 && live) {
      for (int k = 1; k < kColY; ++k) {
        const int64_t j = best_i[k][tx];
        if (j >= 0 && (bi < 0 || beats(op, best_v[k][tx], j, bv, bi))) bv = best_v[k][tx], bi = j;
      }
      out[a * B + b] = bv;
      if (idx) idx[a * B + b] = bi;
    }
  }
}

// A long row split over P blocks: x (A, R) -> partial (A, P), part p summing
// r in [p·chunk, (p+1)·chunk).
template <class T, class AccT>
__global__ void sum_parts_kernel(const T* x, int64_t A, int64_t R, int64_t P, int64_t chunk, AccT* partial) {
  for (int64_t task = blockIdx.x; task < A * P; task += gridDim.x) {
    const int64_t a = task / P, r0 = (task % P) * chunk, r1 = r0 + chunk < R ? r0 + chunk : R;
    AccT s = 0;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) s += static_cast<AccT>(x[a * R + r]);
    s = block_sum(s);
    if (threadIdx.x == 0) partial[task] = s;
  }
}

// partial (A, P) -> out (A)
template <class T, class AccT>
__global__ void sum_finish_kernel(const AccT* partial, int64_t A, int64_t P, T* out) {
  for (int64_t a = blockIdx.x; a < A; a += gridDim.x) {
    AccT s = 0;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) s += partial[a * P + p];
    s = block_sum(s);
    if (threadIdx.x == 0) out[a] = static_cast<T>(s);
  }
}

// Column sums over many rows, split (col_splits): x (A, R, B) -> part (splits, A, B),
// split s summing rows [s·rows_per_split, (s+1)·rows_per_split) of each column (a
// 32-column chunk per block, its 8 rows of threads combined in shared memory).
template <class T, class AccT>
__global__ void sum_cols_parts_kernel(const T* x, int64_t A, int64_t R, int64_t B, int64_t rows_per_split,
                                      AccT* part) {
  __shared__ AccT sum_s[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t chunks = (B + kColX - 1) / kColX;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split, r1 = min(R, r0 + rows_per_split);
  for (int64_t task = blockIdx.x; task < A * chunks; task += gridDim.x) {
    const int64_t a = task / chunks, b = (task % chunks) * kColX + tx;
    const bool live = b < B;
    AccT acc = 0;
    if (live)
      for (int64_t r = r0 + ty; r < r1; r += kColY) acc += static_cast<AccT>(x[(a * R + r) * B + b]);
    __syncthreads();  // the previous task's combining threads are done with the slots
    sum_s[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && live) {
      AccT total = 0;
      for (int k = 0; k < kColY; ++k) total += sum_s[k][tx];
      part[(static_cast<int64_t>(blockIdx.y) * A + a) * B + b] = total;
    }
  }
}

// Rows this long with this few of them keep one block per row from filling the GPU.
constexpr int64_t kSplitRowLength = 1 << 16, kSplitMaxRows = 128, kSplitChunk = 1 << 14;

template <class T>
void reduce_block(ReduceOp op, const T* x, int64_t A, int64_t R, int64_t B, T* out, int64_t* idx, cudaStream_t s,
                  Device device) {
  if (A == 0 || B == 0) return;
  if (B == 1 && op == ReduceOp::Sum && R >= kSplitRowLength && A <= kSplitMaxRows) {
    using AccT = sum_accumulator_t<T>;
    const int64_t P = (R + kSplitChunk - 1) / kSplitChunk;
    Tensor partial = Tensor::empty({A * P}, TensorOptions(dtype_of<AccT>::value).device(device));
    AccT* pp = static_cast<AccT*>(partial.data_ptr());
    sum_parts_kernel<T, AccT><<<grid_for_rows(A * P), kThreads, 0, s>>>(x, A, R, P, kSplitChunk, pp);
    KILN_CUDA_LAUNCH_CHECK("reduce");
    sum_finish_kernel<T, AccT><<<grid_for_rows(A), kThreads, 0, s>>>(pp, A, P, out);
    KILN_CUDA_LAUNCH_CHECK("reduce");
    return;  // `partial` goes back to the cache; later users queue behind these kernels
  }
  const int64_t tasks = A * ((B + kColX - 1) / kColX);  // column chunks
  const int64_t splits = B > 1 && op == ReduceOp::Sum ? col_splits(A, R, B) : 1;
  if (B == 1) {
    reduce_rows_kernel<T><<<grid_for_rows(A), kThreads, 0, s>>>(op, x, A, R, out, idx);
  } else if (splits > 1) {
    using AccT = sum_accumulator_t<T>;
    const int64_t rows_per_split = (R + splits - 1) / splits;
    Tensor part = Tensor::empty({splits, A * B}, TensorOptions(dtype_of<AccT>::value).device(device));
    AccT* pp = static_cast<AccT*>(part.data_ptr());
    sum_cols_parts_kernel<T, AccT><<<dim3(grid_for_rows(tasks), static_cast<unsigned>(splits)), dim3(kColX, kColY), 0,
                                     s>>>(x, A, R, B, rows_per_split, pp);
    KILN_CUDA_LAUNCH_CHECK("reduce");
    finish_col_splits<AccT, T>(pp, nullptr, splits, A * B, out, nullptr, s);
  } else {
    reduce_cols_kernel<T><<<grid_for_rows(tasks), dim3(kColX, kColY), 0, s>>>(op, x, A, R, B, out, idx);
  }
  KILN_CUDA_LAUNCH_CHECK("reduce");
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x_in, const std::vector<int64_t>& dims, const Tensor& out,
                         const Tensor* indices) {
  DeviceGuard guard(out);
  Tensor x = x_in;
  if (!x_in.is_contiguous()) {
    x = Tensor::empty(x_in.shape(), TensorOptions(x_in.dtype()).device(x_in.device()));
    copy(x_in, x);
  }
  const std::vector<ReducePass> plan = reduce_plan(x.shape(), dims);
  KILN_CHECK(!indices || plan.size() == 1, "reduce", "indices need a single block of dims");
  cudaStream_t s = stream_of(out);
  Tensor cur = x;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ReducePass& p = plan[i];
    Tensor dst = i + 1 == plan.size() ? out : Tensor::empty(p.out_shape, TensorOptions(cur.dtype()).device(out.device()));
    visit_dtype(cur.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      reduce_block<T>(op, static_cast<const T*>(cur.data_ptr()), p.A, p.R, p.B, static_cast<T*>(dst.data_ptr()),
                      indices ? indices->data<int64_t>() : nullptr, s, out.device());
    });
    cur = dst;
  }
}

}  // namespace kiln::cuda
