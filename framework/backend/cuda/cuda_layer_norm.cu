// LayerNorm over rows: x (rows, n) -> y (rows, n), mean (rows), rstd (rows), the same
// after a residual add (add_layer_norm), and the backward. The arithmetic is the CPU's
// (cpu_layer_norm.cpp): two passes (mean, then centred squares) with double sums, one
// warp per row up to kWarpRowLength elements (a block each beyond: cuda_block_reduce.cuh's
// teams); weight and bias gradients are column sums over the rows.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_col_sums.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// Rows up to this long take one warp each (512: 16 elements a lane), longer ones a block.
constexpr int64_t kWarpRowLength = 2048;

// x (rows, n), w (n) or null, b (n) or null -> y (rows, n), mean (rows), rstd (rows).
// With res (rows, n): the rows of x + res are normalised instead, the sum rounded to T
// first (add_layer_norm), and written to sum (rows, n) when not null, else into y, which
// the last loop then normalises in place (each thread reads back only what it wrote).
// low (rows, n), where not null: y rounded to bfloat16 as it is written (autocast's copy).
template <class T, class Team>
__global__ void layer_norm_kernel(const T* x, const T* res, const T* w, const T* b, T* sum, T* y, T* mean, T* rstd,
                                  bfloat16* low, int64_t rows, int64_t n, double eps) {
  for (int64_t r = Team::first(); r < rows; r += Team::step()) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    double s = 0;
    if (res) {
      const T* rr = res + r * n;
      T* sr = (sum ? sum : y) + r * n;
      for (int64_t j = Team::lane(); j < n; j += Team::width()) {
        const T v = xr[j] + rr[j];
        sr[j] = v;
        s += static_cast<double>(v);
      }
      xr = sr;
    } else {
      for (int64_t j = Team::lane(); j < n; j += Team::width()) s += static_cast<double>(xr[j]);
    }
    const T mu = static_cast<T>(Team::total(s) / static_cast<double>(n));
    double v = 0;
    for (int64_t j = Team::lane(); j < n; j += Team::width()) {
      const T d = xr[j] - mu;
      v += static_cast<double>(d * d);
    }
    v = Team::total(v);
    const T rs = static_cast<T>(1.0 / sqrt(v / static_cast<double>(n) + eps));
    if (Team::lane() == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t j = Team::lane(); j < n; j += Team::width()) {
      T h = (xr[j] - mu) * rs;
      if (w) h *= w[j];
      if (b) h += b[j];
      yr[j] = h;
      if (low) low[r * n + j] = bfloat16(h);
    }
  }
}

// dx (rows, n) = rstd · (gw - mean(gw) - x̂ · mean(gw · x̂)), gw = g·w, x̂ = (x - mean)·rstd
template <class T, class Team>
__global__ void layer_norm_grad_x_kernel(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* gx,
                                         int64_t rows, int64_t n) {
  for (int64_t r = Team::first(); r < rows; r += Team::step()) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    T* gxr = gx + r * n;
    const T mu = mean[r], rs = rstd[r];
    double s_gw = 0, s_gwx = 0;
    for (int64_t j = Team::lane(); j < n; j += Team::width()) {
      const T xh = (xr[j] - mu) * rs;
      const T gw = w ? gr[j] * w[j] : gr[j];
      s_gw += static_cast<double>(gw);
      s_gwx += static_cast<double>(gw * xh);
    }
    const T m_gw = static_cast<T>(Team::total(s_gw) / static_cast<double>(n));
    const T m_gwx = static_cast<T>(Team::total(s_gwx) / static_cast<double>(n));
    for (int64_t j = Team::lane(); j < n; j += Team::width()) {
      const T xh = (xr[j] - mu) * rs;
      const T gw = w ? gr[j] * w[j] : gr[j];
      gxr[j] = rs * (gw - m_gw - xh * m_gwx);
    }
  }
}

// Stage 1 of dw (n) = Σ_r g (r, n) · x̂ (r, n) and db (n) = Σ_r g (r, n), x̂ = (x - mean) · rstd,
// over row splits: part_w, part_b (splits, n) in double, split s summing rows
// [s·rows_per_split, (s+1)·rows_per_split). A block takes a 32-column chunk (coalesced
// reads along n) of one split; its 8 rows of threads split the rows, then combine.
template <class T>
__global__ void layer_norm_grad_wb_parts_kernel(const T* g, const T* x, const T* mean, const T* rstd, double* part_w,
                                                double* part_b, int64_t rows, int64_t n, int64_t rows_per_split) {
  __shared__ double sw_s[kColY][kColX], sb_s[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_split, r1 = min(rows, r0 + rows_per_split);
  for (int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColX; c0 < n; c0 += static_cast<int64_t>(gridDim.x) * kColX) {
    const int64_t j = c0 + tx;
    double sw = 0, sb = 0;
    if (j < n) {
      for (int64_t r = r0 + ty; r < r1; r += kColY) {
        const T gv = g[r * n + j];
        sw += static_cast<double>(gv * ((x[r * n + j] - mean[r]) * rstd[r]));
        sb += static_cast<double>(gv);
      }
    }
    __syncthreads();  // the previous columns' sums have been read
    sw_s[ty][tx] = sw;
    sb_s[ty][tx] = sb;
    __syncthreads();
    if (ty == 0 && j < n) {
      double tw = 0, tb = 0;
      for (int k = 0; k < kColY; ++k) {
        tw += sw_s[k][tx];
        tb += sb_s[k][tx];
      }
      part_w[blockIdx.y * n + j] = tw;
      part_b[blockIdx.y * n + j] = tb;
    }
  }
}

// layer_norm_kernel on the team the row length calls for.
template <class T>
void launch_layer_norm(const Tensor& x, const Tensor& res, const Tensor& w, const Tensor& b, const Tensor& sum,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& low, int64_t rows,
                       int64_t n, double eps) {
  auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
  bfloat16* pl = low.defined() ? low.data<bfloat16>() : nullptr;
  if (n <= kWarpRowLength) {
    layer_norm_kernel<T, WarpRows><<<WarpRows::blocks(rows), kThreads, 0, stream_of(y)>>>(
        x.data<T>(), ptr(res), ptr(w), ptr(b), ptr(sum), y.data<T>(), mean.data<T>(), rstd.data<T>(), pl, rows, n,
        eps);
  } else {
    layer_norm_kernel<T, BlockRows><<<BlockRows::blocks(rows), kThreads, 0, stream_of(y)>>>(
        x.data<T>(), ptr(res), ptr(w), ptr(b), ptr(sum), y.data<T>(), mean.data<T>(), rstd.data<T>(), pl, rows, n,
        eps);
  }
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  if (rows == 0 || n == 0) return;
  DeviceGuard guard(y);
  visit_floating("layer_norm", x.dtype(), [&](auto tag) {
    launch_layer_norm<typename decltype(tag)::type>(x, Tensor(), weight, bias, Tensor(), y, mean, rstd, Tensor(), rows,
                                                    n, eps);
  });
  KILN_CUDA_LAUNCH_CHECK("layer_norm");
}

// add_layer_norm, and y's bfloat16 copy into low (contiguous, y's shape) when defined,
// written by the thread that writes y's element.
void CudaBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& low) {
  if (low.defined() && (x.dtype() != kFloat32 || low.dtype() != kBFloat16 || !low.is_contiguous() ||
                        low.shape() != y.shape() || !y.is_contiguous()))
    return Backend::add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd, low);
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  if (rows == 0 || n == 0) return;
  DeviceGuard guard(y);
  visit_floating("add_layer_norm", x.dtype(), [&](auto tag) {
    launch_layer_norm<typename decltype(tag)::type>(x, residual, weight, bias, sum, y, mean, rstd, low, rows, n, eps);
  });
  KILN_CUDA_LAUNCH_CHECK("add_layer_norm");
}

void CudaBackend::layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                      const Tensor& grad_bias) {
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  if (rows == 0 || n == 0) return;
  DeviceGuard guard(x);
  cudaStream_t s = stream_of(x);
  visit_floating("layer_norm_backward", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    if (grad_x.defined()) {
      if (n <= kWarpRowLength)
        layer_norm_grad_x_kernel<T, WarpRows><<<WarpRows::blocks(rows), kThreads, 0, s>>>(
            g.data<T>(), x.data<T>(), pw, mean.data<T>(), rstd.data<T>(), grad_x.data<T>(), rows, n);
      else
        layer_norm_grad_x_kernel<T, BlockRows><<<BlockRows::blocks(rows), kThreads, 0, s>>>(
            g.data<T>(), x.data<T>(), pw, mean.data<T>(), rstd.data<T>(), grad_x.data<T>(), rows, n);
      KILN_CUDA_LAUNCH_CHECK("layer_norm_backward");
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      const int64_t chunks = (n + kColX - 1) / kColX;
      const int64_t splits = col_splits(1, rows, n);
      const int64_t rows_per_split = (rows + splits - 1) / splits;
      Tensor part = Tensor::empty({2, splits, n}, TensorOptions(kFloat64).device(x.device()));
      double* part_w = part.data<double>();
      double* part_b = part_w + splits * n;
      layer_norm_grad_wb_parts_kernel<T><<<dim3(grid_for_rows(chunks), static_cast<unsigned>(splits)),
                                           dim3(kColX, kColY), 0, s>>>(g.data<T>(), x.data<T>(), mean.data<T>(),
                                                                       rstd.data<T>(), part_w, part_b, rows, n,
                                                                       rows_per_split);
      KILN_CUDA_LAUNCH_CHECK("layer_norm_backward");
      finish_col_splits<double, T>(part_w, part_b, splits, n, grad_weight.defined() ? grad_weight.data<T>() : nullptr,
                                   grad_bias.defined() ? grad_bias.data<T>() : nullptr, s);
      KILN_CUDA_LAUNCH_CHECK("layer_norm_backward");
    }
  });
}

}  // namespace kiln::cuda
