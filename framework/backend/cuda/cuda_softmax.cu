// Softmax and log-softmax along one dim of a contiguous x viewed as (outer, n, inner),
// and their backward. Rows (inner == 1, the usual case): one block per row, the max and
// the sum over the block; otherwise one thread per line of n elements `inner` apart.
// Sums accumulate in double, as on the CPU. A fully masked row (all -inf) gives NaN, as
// on the CPU and in PyTorch.
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// x (rows, n) -> y (rows, n)
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T mx = -inf;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = xr[i] > mx ? xr[i] : mx;
    mx = block_max(mx, -inf);
    if (mx == -inf) mx = 0;  // a fully masked row stays finite until the division
    double sum = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<double>(exp(xr[i] - mx));
    sum = block_sum(sum);
    if (log) {
      const T lse = mx + static_cast<T>(::log(sum));
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] - lse;
    } else {
      const T inv = static_cast<T>(1.0 / sum);
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = exp(xr[i] - mx) * inv;
    }
  }
}

// x (outer, n, inner) -> y (outer, n, inner), one thread per (outer, inner) line.
template <class T>
__global__ void softmax_lines_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  const T inf = std::numeric_limits<T>::infinity();
  KILN_GRID_STRIDE_LOOP(l, outer * inner) {
    const int64_t base = (l / inner) * n * inner + l % inner;
    const T* xl = x + base;
    T* yl = y + base;
    T mx = -inf;
    for (int64_t i = 0; i < n; ++i) mx = xl[i * inner] > mx ? xl[i * inner] : mx;
    if (mx == -inf) mx = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(exp(xl[i * inner] - mx));
    if (log) {
      const T lse = mx + static_cast<T>(::log(sum));
      for (int64_t i = 0; i < n; ++i) yl[i * inner] = xl[i * inner] - lse;
    } else {
      const T inv = static_cast<T>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) yl[i * inner] = exp(xl[i * inner] - mx) * inv;
    }
  }
}

// gx (rows, n) from y, g (rows, n): softmax: y (g - <g, y>); log_softmax: g - exp(y) Σg.
template <class T>
__global__ void softmax_backward_rows_kernel(const T* y, const T* g, T* gx, int64_t rows, int64_t n, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * n;
    const T* gr = g + r * n;
    T* gxr = gx + r * n;
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      acc += log ? static_cast<double>(gr[i]) : static_cast<double>(gr[i]) * yr[i];
    const T s = static_cast<T>(block_sum(acc));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      gxr[i] = log ? gr[i] - exp(yr[i]) * s : yr[i] * (gr[i] - s);
  }
}

// The same over (outer, n, inner) lines.
template <class T>
__global__ void softmax_backward_lines_kernel(const T* y, const T* g, T* gx, int64_t outer, int64_t n, int64_t inner,
                                              bool log) {
  KILN_GRID_STRIDE_LOOP(l, outer * inner) {
    const int64_t base = (l / inner) * n * inner + l % inner;
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = base + i * inner;
      acc += log ? static_cast<double>(g[k]) : static_cast<double>(g[k]) * y[k];
    }
    const T s = static_cast<T>(acc);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = base + i * inner;
      gx[k] = log ? g[k] - exp(y[k]) * s : y[k] * (g[k] - s);
    }
  }
}

}  // namespace

void CudaBackend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  cpu::DimSplit d = cpu::split_at_dim(x.shape(), dim);
  if (x.numel() == 0) return;
  DeviceGuard guard(out);
  cudaStream_t s = stream_of(out);
  visit_floating("softmax", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    if (d.inner == 1) {
      softmax_rows_kernel<T><<<grid_for_rows(d.outer), kThreads, 0, s>>>(px, py, d.outer, d.n, log);
    } else {
      softmax_lines_kernel<T><<<grid_for(d.outer * d.inner), kThreads, 0, s>>>(px, py, d.outer, d.n, d.inner, log);
    }
  });
  KILN_CUDA_LAUNCH_CHECK("softmax");
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log, const Tensor& grad_x) {
  cpu::DimSplit d = cpu::split_at_dim(y.shape(), dim);
  if (y.numel() == 0) return;
  DeviceGuard guard(grad_x);
  cudaStream_t s = stream_of(grad_x);
  visit_floating("softmax_backward", y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* py = y.data<T>();
    const T* pg = g.data<T>();
    T* pgx = grad_x.data<T>();
    if (d.inner == 1) {
      softmax_backward_rows_kernel<T><<<grid_for_rows(d.outer), kThreads, 0, s>>>(py, pg, pgx, d.outer, d.n, log);
    } else {
      softmax_backward_lines_kernel<T>
          <<<grid_for(d.outer * d.inner), kThreads, 0, s>>>(py, pg, pgx, d.outer, d.n, d.inner, log);
    }
  });
  KILN_CUDA_LAUNCH_CHECK("softmax_backward");
}

}  // namespace kiln::cuda
