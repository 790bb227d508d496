// Fused scaled-dot-product attention. One (n, h) problem per task:
//   q (L, E), k (S, E), v (S, Ev) -> out (L, Ev), lse (L)
// through two single-threaded GEMMs and one row pass over an (L, S) scratch block that
// lives only for the task. Backward rebuilds P from q, k and lse (one more GEMM) and
// the dropout mask from its Philox counters, so nothing of size L·S outlives a call:
// for the seed Transformer that is 3 tensors of 20 MB per attention layer not kept
// between forward and backward.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_words.h"
#include "backend/cpu/row_reduce.h"

namespace kiln::cpu {
namespace {

// The (L, cols) matrix of problem (n, h) of a 4-D tensor whose last stride is 1.
template <class T>
struct HeadMatrix {
  T* data;
  int64_t ld;
};

template <class T>
HeadMatrix<T> head(const Tensor& t, int64_t n, int64_t h) {
  T* base = t.data<T>() + n * t.stride(0) + h * t.stride(1);
  // BLAS wants ld >= cols even where a size-1 dim's stride says otherwise.
  return {base, std::max<int64_t>({t.stride(2), t.size(3), 1})};
}

// C (m, n) = alpha · op(A) op(B), also when the inner size k is 0.
template <class T>
void gemm0(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
           int64_t ldb, T* c, int64_t ldc) {
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, T(0), c, ldc);
}

// What every problem shares.
struct Problem {
  int64_t N, H, L, S, E, Ev;
  double scale, p;
  uint64_t seed, block, threshold;
};

Problem problem_of(const Tensor& q, const Tensor& k, const Tensor& v, double scale, double p, uint64_t seed,
                   uint64_t block) {
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3), scale, p, seed, block,
          bernoulli_threshold(1.0 - p)};
}

// Row l of problem (n, h)'s mask: bool (true = masked) or additive, S values apart by
// `step` (1 when the mask's last dim is contiguous, as the models' masks are).
template <class T>
struct MaskRow {
  const bool* flags = nullptr;
  const T* add = nullptr;
  int64_t step = 1;
};

template <class T>
MaskRow<T> mask_row(const Tensor& mask, int64_t n, int64_t h, int64_t l) {
  if (!mask.defined()) return {};
  const int64_t off = n * mask.stride(0) + h * mask.stride(1) + l * mask.stride(2);
  const int64_t step = mask.size(3) == 1 ? 1 : mask.stride(3);
  if (mask.dtype() == kBool) return {mask.data<bool>() + off, nullptr, step};
  return {nullptr, mask.data<T>() + off, step};
}

// row (S) <- row masked: -inf where flagged, or + the additive mask. The contiguous
// cases are branch-free loops that vectorize.
template <class T>
KILN_MULTIVERSION void apply_mask_row(T* row, const MaskRow<T>& m, int64_t S) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (m.flags && m.step == 1) {
    for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s] ? kNegInf : row[s];
  } else if (m.flags) {
    for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s * m.step] ? kNegInf : row[s];
  } else if (m.add && m.step == 1) {
    for (int64_t s = 0; s < S; ++s) row[s] += m.add[s];
  } else if (m.add) {
    for (int64_t s = 0; s < S; ++s) row[s] += m.add[s * m.step];
  }
}

// row (S) <- exp(row - max(row)) in place; returns the sum of the exponentials and sets
// lse to the row's logsumexp. A row of -inf (a query that may attend to nothing) becomes
// zeros with lse -inf, as torch's _safe_softmax (pytorch/pytorch#133882), not NaN; the
// sum is then 1, so that normalizing leaves the zeros.
template <class T>
KILN_MULTIVERSION double exp_row(T* row, int64_t S, T& lse) {
  const T mx = rows::max(row, S);
  if (mx == -std::numeric_limits<T>::infinity()) {
    std::fill(row, row + S, T(0));
    lse = -std::numeric_limits<T>::infinity();
    return 1.0;
  }
  const double sum = rows::sum_exp<T>(row, mx, row, S);
  lse = mx + static_cast<T>(std::log(sum));
  return sum;
}

// row (S) *= c: the softmax's normalization when there is no dropout.
template <class T>
KILN_MULTIVERSION void scale_row(T* row, T c, int64_t S) {
  for (int64_t s = 0; s < S; ++s) row[s] *= c;
}

// row (S) <- exp(row masked - lse): the softmax rebuilt from its logsumexp, the mask
// applied in the same pass (a masked score's weight is 0). A fully masked row (lse -inf)
// is zeros, so its gradients are zeros too; a NaN or +inf lse stays NaN.
template <class T>
KILN_MULTIVERSION void exp_shifted_row(T* row, const MaskRow<T>& m, T lse, int64_t S) {
  if (!std::isfinite(lse)) {
    const bool all_masked = lse == -std::numeric_limits<T>::infinity();
    std::fill(row, row + S, all_masked ? T(0) : std::numeric_limits<T>::quiet_NaN());
    return;
  }
  if (m.flags && m.step == 1) {
    for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s] ? T(0) : vec::exp(row[s] - lse);
    return;
  }
  apply_mask_row(row, m, S);
  for (int64_t s = 0; s < S; ++s) row[s] = vec::exp(row[s] - lse);
}

// row (S) <- row · c where kept, 0 where dropped (keep from words (S)): the softmax's
// normalization and dropout's 1 / (1 - p) in one pass.
template <class T>
KILN_MULTIVERSION void drop_row(T* row, const uint32_t* words, uint64_t threshold, T c, int64_t S) {
  for (int64_t s = 0; s < S; ++s) row[s] = static_cast<uint64_t>(words[s]) < threshold ? row[s] * c : T(0);
}

// dP row (S) -> dS row; P row (S) -> P' row, in place:
//   dS = P ∘ (dP' ∘ keep / (1 - p) − D),  P' = P ∘ keep / (1 - p).
template <class T>
KILN_MULTIVERSION void softmax_dropout_backward_row(T* p_row, T* dp_row, const uint32_t* words, uint64_t threshold,
                                                    T keep_scale, T d, int64_t S) {
  for (int64_t s = 0; s < S; ++s) {
    const T keep = words == nullptr || static_cast<uint64_t>(words[s]) < threshold ? keep_scale : T(0);
    const T pv = p_row[s];
    dp_row[s] = pv * (dp_row[s] * keep - d);
    p_row[s] = pv * keep;
  }
}

// The words of problem b's (L, S) elements.
void problem_words(const Problem& pr, int64_t b, std::vector<uint32_t>& words) {
  words.resize(static_cast<size_t>(pr.L * pr.S));
  philox_words(pr.seed, pr.block, b * pr.L * pr.S, pr.L * pr.S, words.data());
}

// Problems are independent: spread them over the threads, a few per task when small.
template <class F>
void for_each_problem(const Problem& pr, F f) {
  const double flops = 4.0 * static_cast<double>(pr.L) * pr.S * std::max(pr.E, pr.Ev) + 1.0;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(4e5 / flops));
  blas_init();
  parallel_for(pr.N * pr.H, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) f(b / pr.H, b % pr.H, b);
  });
}

template <class T>
void attention_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Problem& pr,
                     const Tensor& out, const Tensor& lse) {
  T* lse_all = lse.data<T>();
  const T keep_scale = static_cast<T>(1.0 / (1.0 - pr.p));
  for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
    thread_local std::vector<T> scores;
    thread_local std::vector<uint32_t> words;
    scores.resize(static_cast<size_t>(pr.L * pr.S));
    auto qh = head<T>(q, n, h), kh = head<T>(k, n, h), vh = head<T>(v, n, h), oh = head<T>(out, n, h);
    // scores (L, S) = scale · q (L, E) @ k (S, E)ᵀ
    gemm0<T>(false, true, pr.L, pr.S, pr.E, static_cast<T>(pr.scale), qh.data, qh.ld, kh.data, kh.ld,
             scores.data(), pr.S);
    if (pr.p > 0) problem_words(pr, b, words);
    for (int64_t l = 0; l < pr.L; ++l) {
      T* row = scores.data() + l * pr.S;
      apply_mask_row(row, mask_row<T>(mask, n, h, l), pr.S);
      const double sum = exp_row(row, pr.S, lse_all[b * pr.L + l]);
      const T inv = static_cast<T>(1.0 / sum);
      if (pr.p > 0) {
        drop_row(row, words.data() + l * pr.S, pr.threshold, inv * keep_scale, pr.S);
      } else {
        scale_row(row, inv, pr.S);
      }
    }
    // out (L, Ev) = P' (L, S) @ v (S, Ev)
    gemm0<T>(false, false, pr.L, pr.Ev, pr.S, T(1), scores.data(), pr.S, vh.data, vh.ld, oh.data, oh.ld);
  });
}

template <class T>
void attention_backward_typed(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, const Problem& pr,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) {
  const T* lse_all = lse.data<T>();
  const T keep_scale = static_cast<T>(1.0 / (1.0 - pr.p));
  const T scale = static_cast<T>(pr.scale);
  for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
    thread_local std::vector<T> probs, dprobs;
    thread_local std::vector<uint32_t> words;
    probs.resize(static_cast<size_t>(pr.L * pr.S));
    dprobs.resize(static_cast<size_t>(pr.L * pr.S));
    auto qh = head<T>(q, n, h), kh = head<T>(k, n, h), vh = head<T>(v, n, h);
    auto gh = head<T>(g, n, h), oh = head<T>(out, n, h);
    auto gqh = head<T>(grad_q, n, h), gkh = head<T>(grad_k, n, h), gvh = head<T>(grad_v, n, h);
    // P (L, S) = exp(scale · q kᵀ + mask - lse)
    gemm0<T>(false, true, pr.L, pr.S, pr.E, scale, qh.data, qh.ld, kh.data, kh.ld, probs.data(), pr.S);
    for (int64_t l = 0; l < pr.L; ++l) {
      exp_shifted_row(probs.data() + l * pr.S, mask_row<T>(mask, n, h, l), lse_all[b * pr.L + l], pr.S);
    }
    // dP' (L, S) = g (L, Ev) @ v (S, Ev)ᵀ
    gemm0<T>(false, true, pr.L, pr.S, pr.Ev, T(1), gh.data, gh.ld, vh.data, vh.ld, dprobs.data(), pr.S);
    if (pr.p > 0) problem_words(pr, b, words);
    for (int64_t l = 0; l < pr.L; ++l) {
      // D = <g_l, out_l>: Σ_s dP'·P' of the row, without P'.
      const T d = static_cast<T>(rows::dot(gh.data + l * gh.ld, oh.data + l * oh.ld, pr.Ev));
      softmax_dropout_backward_row(probs.data() + l * pr.S, dprobs.data() + l * pr.S,
                                   pr.p > 0 ? words.data() + l * pr.S : nullptr, pr.threshold,
                                   pr.p > 0 ? keep_scale : T(1), d, pr.S);
    }
    // grad_v (S, Ev) = P'ᵀ (S, L) @ g (L, Ev)
    gemm0<T>(true, false, pr.S, pr.Ev, pr.L, T(1), probs.data(), pr.S, gh.data, gh.ld, gvh.data, gvh.ld);
    // grad_q (L, E) = scale · dS (L, S) @ k (S, E)
    gemm0<T>(false, false, pr.L, pr.E, pr.S, scale, dprobs.data(), pr.S, kh.data, kh.ld, gqh.data, gqh.ld);
    // grad_k (S, E) = scale · dSᵀ (S, L) @ q (L, E)
    gemm0<T>(true, false, pr.S, pr.E, pr.L, scale, dprobs.data(), pr.S, qh.data, qh.ld, gkh.data, gkh.ld);
  });
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                           double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  const Problem pr = problem_of(q, k, v, scale, dropout_p, seed, block);
  if (q.dtype() == kFloat64) return attention_typed<double>(q, k, v, mask, pr, out, lse);
  attention_typed<float>(q, k, v, mask, pr, out, lse);
}

void CpuBackend::attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                    double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                    const Tensor& grad_k, const Tensor& grad_v) {
  const Problem pr = problem_of(q, k, v, scale, dropout_p, seed, block);
  if (q.dtype() == kFloat64) {
    return attention_backward_typed<double>(g, q, k, v, mask, out, lse, pr, grad_q, grad_k, grad_v);
  }
  attention_backward_typed<float>(g, q, k, v, mask, out, lse, pr, grad_q, grad_k, grad_v);
}

}  // namespace kiln::cpu
