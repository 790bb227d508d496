// Cross-entropy on logits with class-index targets and label smoothing ε:
//   loss_n = -(1-ε) logp[n, t_n] - ε/C Σ_c logp[n, c],  logp = log_softmax(logits).
// logits (N, C), targets (N) -> losses (N), weights (N) (0 for ignored rows).
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_reduce.h"

namespace kiln::cpu {
namespace {

void check_targets(const int64_t* t, int64_t N, int64_t C, int64_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    KILN_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < C), "cross_entropy", "target ", t[n],
               " out of range for ", C, " classes (at position ", n, ")");
  }
}

// log of Σ exp(row) for one row of C logits.
template <class T>
KILN_MULTIVERSION double row_logsumexp(const T* row, int64_t C) {
  T mx = rows::max(row, C);
  if (mx == -std::numeric_limits<T>::infinity()) return mx;
  return mx + std::log(rows::sum_exp<T>(row, mx, nullptr, C));
}

// out (C) = gn · (softmax(row) - off), with lse the row's log-sum-exp.
template <class T>
KILN_MULTIVERSION void row_grad(const T* row, T lse, T gn, T off, T* out, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = gn * (vec::exp(row[c] - lse) - off);
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                               double eps, const Tensor& losses, const Tensor& weights) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* t = targets.data<int64_t>();
  check_targets(t, N, C, ignore_index);
  visit_floating("cross_entropy", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    T* loss = losses.data<T>();
    T* w = weights.data<T>();
    parallel_for(N, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(C * 8, 1)), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        if (t[n] == ignore_index) {
          loss[n] = 0;
          w[n] = 0;
          continue;
        }
        const T* row = x + n * C;
        double lse = row_logsumexp(row, C);
        double l = -(1.0 - eps) * (row[t[n]] - lse);
        if (eps > 0) {
          // Σ_c (row[c] - lse)
          double sum_logp = rows::sum(row, C) - static_cast<double>(C) * lse;
          l -= eps / static_cast<double>(C) * sum_logp;
        }
        loss[n] = static_cast<T>(l);
        w[n] = 1;
      }
    });
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        int64_t ignore_index, double eps, const Tensor& g_row,
                                        const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* t = targets.data<int64_t>();
  visit_floating("cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    const T* g = g_row.data<T>();
    T* gx = grad_logits.data<T>();
    const T off = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(C * 8, 1)), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        T* out = gx + n * C;
        if (t[n] == ignore_index) {
          for (int64_t c = 0; c < C; ++c) out[c] = 0;
          continue;
        }
        const T* row = x + n * C;
        const T lse = static_cast<T>(row_logsumexp(row, C));
        const T gn = g[n];
        row_grad(row, lse, gn, off, out, C);
        out[t[n]] -= gn * static_cast<T>(1.0 - eps);
      }
    });
  });
}

}  // namespace kiln::cpu
