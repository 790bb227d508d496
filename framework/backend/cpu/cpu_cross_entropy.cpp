// Cross-entropy on logits with class-index targets, class weights w (all 1 when not
// given) and label smoothing ε:
//   loss_n = -(1-ε) w[t_n] logp[n, t_n] - ε/C Σ_c w[c] logp[n, c],  logp = log_softmax(logits).
// logits (N, C), targets (N), w (C) -> losses (N), weights (N) (w[t_n]; 0 for ignored rows),
// lse (N) (log Σ exp of the row; 0 for ignored rows); backward from lse, one pass a row.
// The unweighted rows keep their own loops: the weights cost nothing when not given.
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

// out (C) = on · softmax(row) - off · w (C), with lse the row's log-sum-exp.
template <class T>
KILN_MULTIVERSION void row_grad_weighted(const T* row, T lse, T on, T off, const T* w, T* out, int64_t C) {
  for (int64_t c = 0; c < C; ++c) out[c] = on * vec::exp(row[c] - lse) - off * w[c];
}

// -Σ_c w[c] logp[c] of one row (w null: all 1), with lse the row's log-sum-exp and
// w_sum = Σ w: Σ_c w[c] (lse - row[c]).
template <class T>
double smoothing_term(const T* row, const T* w, double lse, double w_sum, int64_t C) {
  const double dot = w ? rows::dot(row, w, C) : rows::sum(row, C);
  return w_sum * lse - dot;
}

// Σ w (C), or C without weights.
template <class T>
double weight_sum(const T* w, int64_t C) {
  return w ? rows::sum(w, C) : static_cast<double>(C);
}

// Rows of C per parallel task, about kGrainElements elements' work.
int64_t row_grain(int64_t C) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(C * 8, 1)); }

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                               int64_t ignore_index, double eps, const Tensor& losses, const Tensor& weights,
                               const Tensor& lse_out) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* t = targets.data<int64_t>();
  check_targets(t, N, C, ignore_index);
  visit_floating("cross_entropy", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    const T* cw = class_weight.defined() ? class_weight.data<T>() : nullptr;
    const double w_sum = weight_sum(cw, C);
    T* loss = losses.data<T>();
    T* w = weights.data<T>();
    T* lse_rows = lse_out.data<T>();
    parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        if (t[n] == ignore_index) {
          loss[n] = 0;
          w[n] = 0;
          lse_rows[n] = 0;
          continue;
        }
        const T* row = x + n * C;
        const double lse = row_logsumexp(row, C);
        lse_rows[n] = static_cast<T>(lse);
        const double wt = cw ? static_cast<double>(cw[t[n]]) : 1.0;
        double l = -(1.0 - eps) * wt * (row[t[n]] - lse);
        if (eps > 0) l += eps / static_cast<double>(C) * smoothing_term(row, cw, lse, w_sum, C);
        loss[n] = static_cast<T>(l);
        w[n] = static_cast<T>(wt);
      }
    });
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                        int64_t ignore_index, double eps, const Tensor& lse_rows,
                                        const Tensor& g_row, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t* t = targets.data<int64_t>();
  visit_floating("cross_entropy_backward", logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = logits.data<T>();
    const T* cw = class_weight.defined() ? class_weight.data<T>() : nullptr;
    const double w_sum = weight_sum(cw, C);
    const T* g = g_row.data<T>();
    const T* lse_of = lse_rows.data<T>();
    T* gx = grad_logits.data<T>();
    const T off = static_cast<T>(eps / static_cast<double>(C));
    parallel_for(N, row_grain(C), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        T* out = gx + n * C;
        if (t[n] == ignore_index) {
          for (int64_t c = 0; c < C; ++c) out[c] = 0;
          continue;
        }
        const T* row = x + n * C;
        const T lse = lse_of[n];
        const T gn = g[n];
        if (cw) {
          // ∂loss/∂row[c] = p[c] ((1-ε) w[t] + ε/C Σw) - ε/C w[c] - [c = t] (1-ε) w[t]
          const double wt = cw[t[n]];
          const T on = static_cast<T>(gn * ((1.0 - eps) * wt + eps / static_cast<double>(C) * w_sum));
          row_grad_weighted(row, lse, on, static_cast<T>(gn * off), cw, out, C);
          out[t[n]] -= static_cast<T>(gn * (1.0 - eps) * wt);
        } else {
          row_grad(row, lse, gn, off, out, C);
          out[t[n]] -= gn * static_cast<T>(1.0 - eps);
        }
      }
    });
  });
}

}  // namespace kiln::cpu
