// Cross-entropy on logits with class-index targets, class weights w (null: all 1) and
// label smoothing ε, one block per row, with the CPU's arithmetic (cpu_cross_entropy.cpp):
//   loss_n = -(1-ε) w[t_n] logp[n, t_n] - ε/C Σ_c w[c] logp[n, c],  logp = log_softmax(logits).
// logits (N, C), targets (N), w (C) -> losses (N), weights (N) (w[t_n]; 0 for ignored rows),
// lse (N) (log Σ exp of the row; 0 for ignored rows); backward lse (N), g_row (N) ->
// grad_logits (N, C). A target out of range is the CPU's error.
#include <limits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_index_check.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// bad: min over positions n whose target is neither ignore_index nor in [0, C).
__global__ void check_targets_kernel(const int64_t* t, int64_t N, int64_t C, int64_t ignore_index,
                                     unsigned long long* bad) {
  KILN_GRID_STRIDE_LOOP(n, N) {
    if (t[n] != ignore_index && (t[n] < 0 || t[n] >= C)) atomicMin(bad, static_cast<unsigned long long>(n));
  }
}

// log Σ exp(row (C)) in double over the block; -inf for a row of -inf.
template <class T>
__device__ inline double row_logsumexp(const T* row, int64_t C) {
  const T inf = std::numeric_limits<T>::infinity();
  T mx = -inf;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = row[c] > mx ? row[c] : mx;
  mx = block_max(mx, -inf);
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += static_cast<double>(exp(row[c] - mx));
  s = block_sum(s);  // every thread calls, also for a -inf row
  if (mx == -inf) return -std::numeric_limits<double>::infinity();
  return static_cast<double>(mx) + log(s);
}

// Σ cw (C) over the block; C without weights.
template <class T>
__device__ inline double weight_sum(const T* cw, int64_t C) {
  if (!cw) return static_cast<double>(C);
  double s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += static_cast<double>(cw[c]);
  return block_sum(s);
}

// x (N, C), t (N), cw (C) or null -> loss (N), w (N), lse_out (N)
template <class T>
__global__ void cross_entropy_kernel(const T* x, const int64_t* t, const T* cw, T* loss, T* w, T* lse_out, int64_t N,
                                     int64_t C, int64_t ignore_index, double eps) {
  const double w_sum = eps > 0 ? weight_sum(cw, C) : 0;  // Σ cw, for the smoothing term: once per block
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t target = t[n];
    if (target == ignore_index || target < 0 || target >= C) {  // bad targets were rejected on the host
      if (threadIdx.x == 0) loss[n] = 0, w[n] = 0, lse_out[n] = 0;
      continue;
    }
    const T* row = x + n * C;
    const double lse = row_logsumexp(row, C);
    double dot = 0;  // Σ_c cw[c] row[c], for the smoothing term
    if (eps > 0) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        dot += static_cast<double>(row[c]) * (cw ? static_cast<double>(cw[c]) : 1.0);
      dot = block_sum(dot);
    }
    if (threadIdx.x == 0) {
      const double wt = cw ? static_cast<double>(cw[target]) : 1.0;
      double l = -(1.0 - eps) * wt * (static_cast<double>(row[target]) - lse);
      if (eps > 0) l += eps / static_cast<double>(C) * (w_sum * lse - dot);
      loss[n] = static_cast<T>(l);
      w[n] = static_cast<T>(wt);
      lse_out[n] = static_cast<T>(lse);
    }
  }
}

// x (N, C), t (N), cw (C) or null, lse_of (N), g (N) -> gx (N, C) = g_n · (softmax - smoothed one-hot),
// with weights g_n · (softmax · ((1-ε) cw[t] + ε/C Σcw) - ε/C cw - [c = t] (1-ε) cw[t]).
template <class T>
__global__ void cross_entropy_backward_kernel(const T* x, const int64_t* t, const T* cw, const T* lse_of, const T* g,
                                              T* gx, int64_t N, int64_t C, int64_t ignore_index, double eps) {
  const T off = static_cast<T>(eps / static_cast<double>(C));
  const T on = static_cast<T>(1.0 - eps);
  const double w_sum = weight_sum(cw, C);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    T* out = gx + n * C;
    const int64_t target = t[n];
    if (target == ignore_index) {
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = 0;
      continue;
    }
    const T* row = x + n * C;
    const T lse = lse_of[n];
    const T gn = g[n];
    if (cw) {
      const double wt = static_cast<double>(cw[target]);
      const T scale = static_cast<T>(gn * ((1.0 - eps) * wt + eps / static_cast<double>(C) * w_sum));
      const T shift = gn * off;
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        T v = scale * exp(row[c] - lse) - shift * cw[c];
        if (c == target) v -= static_cast<T>(gn * (1.0 - eps) * wt);
        out[c] = v;
      }
      continue;
    }
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      T v = gn * (exp(row[c] - lse) - off);
      if (c == target) v -= gn * on;
      out[c] = v;
    }
  }
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                int64_t ignore_index, double eps, const Tensor& losses, const Tensor& weights,
                                const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  DeviceGuard guard(losses);
  const int64_t* t = targets.data<int64_t>();
  {
    IndexCheck check(targets.device());
    check_targets_kernel<<<grid_for(N), kThreads, 0, stream_of(targets)>>>(t, N, C, ignore_index, check.flag());
    KILN_CUDA_LAUNCH_CHECK("cross_entropy");
    int64_t pos = 0, value = 0;
    if (check.first_bad(t, "cross_entropy", pos, value)) {
      KILN_FAIL("cross_entropy", "target ", value, " out of range for ", C, " classes (at position ", pos, ")");
    }
  }
  visit_floating("cross_entropy", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* cw = class_weight.defined() ? class_weight.data<T>() : nullptr;
    cross_entropy_kernel<T><<<grid_for_rows(N), kThreads, 0, stream_of(losses)>>>(
        logits.data<T>(), t, cw, losses.data<T>(), weights.data<T>(), lse.data<T>(), N, C, ignore_index, eps);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                         int64_t ignore_index, double eps, const Tensor& lse,
                                         const Tensor& g_row, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  DeviceGuard guard(grad_logits);
  visit_floating("cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* cw = class_weight.defined() ? class_weight.data<T>() : nullptr;
    cross_entropy_backward_kernel<T><<<grid_for_rows(N), kThreads, 0, stream_of(grad_logits)>>>(
        logits.data<T>(), targets.data<int64_t>(), cw, lse.data<T>(), g_row.data<T>(), grad_logits.data<T>(), N, C,
        ignore_index, eps);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

}  // namespace kiln::cuda
