// Fused scaled-dot-product attention. One (n, h) problem per task:
//   q (L, E), k (S, E), v (S, Ev) -> out (L, Ev), lse (L)
// through two single-threaded GEMMs and one row pass over an (L, S) scratch block that
// lives only for the task. Backward rebuilds P from q, k and lse (one more GEMM) and
// the dropout mask from its Philox counters, so nothing of size L·S outlives a call:
// for the seed Transformer that is 3 tensors of 20 MB per attention layer not kept
// between forward and backward. Autocast's mixed form (bfloat16 q, k, v) runs the same
// passes with bfloat16 GEMMs (below, attention_mixed).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/bfloat16_staged.h"
#include "backend/cpu/bfloat16_convert.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
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

// dst (cols, rows) = src (rows, cols)ᵀ, src's rows ld apart: in 8 x 8 tiles, which GCC
// turns into shuffles (a plain double loop scatters every store).
template <class T>
KILN_MULTIVERSION void transpose_into(const T* src, int64_t ld, int64_t rows, int64_t cols, T* dst) {
  constexpr int64_t kT = 8;
  int64_t r0 = 0;
  for (; r0 + kT <= rows; r0 += kT) {
    int64_t c0 = 0;
    for (; c0 + kT <= cols; c0 += kT) {
      T tile[kT][kT];
      for (int64_t r = 0; r < kT; ++r)
        for (int64_t c = 0; c < kT; ++c) tile[c][r] = src[(r0 + r) * ld + c0 + c];
      for (int64_t c = 0; c < kT; ++c)
        for (int64_t r = 0; r < kT; ++r) dst[(c0 + c) * rows + r0 + r] = tile[c][r];
    }
    for (; c0 < cols; ++c0)
      for (int64_t r = r0; r < r0 + kT; ++r) dst[c0 * rows + r] = src[r * ld + c0];
  }
  for (; r0 < rows; ++r0)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r0] = src[r0 * ld + c];
}

// C (m, n) = alpha · A (m, k) @ B (n, k)ᵀ with B's transpose copied into bt first (k, n):
// OpenBLAS's small-matrix kernel for a transposed B ran at a third to a half of the one
// for B as it is on attention's products (q kᵀ and g vᵀ of (32, 32, 32): 60 against 157
// GFLOP/s, one thread), and the copy is n·k values against the product's 2·m·n·k flops.
template <class T>
void gemm_bt(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
             int64_t ldc, std::vector<T>& bt) {
  bt.resize(static_cast<size_t>(k * n));
  transpose_into(b, ldb, n, k, bt.data());
  gemm0<T>(false, false, m, n, k, alpha, a, lda, bt.data(), std::max<int64_t>(n, 1), c, ldc);
}

// row (S) *= c: the softmax's normalization when there is no dropout.
template <class T>
KILN_MULTIVERSION void scale_row(T* row, T c, int64_t S) {
  for (int64_t s = 0; s < S; ++s) row[s] *= c;
}

// oneDNN's fp32 matmul takes a problem's products from this many multiply-adds up: at
// all-MiniLM's 128-token heads, (128, 128, 32), it ran attention's forward 20% faster
// than OpenBLAS's small kernels (one thread, 384 heads: 23.1 -> 18.0 ms), and 17% at
// 512 tokens; at (32, 32, 32) the two were level and at (16, 16, 32) oneDNN's fixed cost
// a call (about 1.3 us a product) lost 60%.
constexpr double kOnednnMinMacs = 64.0 * 64 * 32;

// C (m, n) = alpha · op(A) (m, k) op(B) (k, n): one product of a problem, on oneDNN from
// kOnednnMinMacs up (float32; the scale then a pass over C, in cache), else on OpenBLAS
// with op(B) = Bᵀ copied transposed first (gemm_bt). Forward and backward take their
// q kᵀ through here alike, so the backward rebuilds the forward's scores bit for bit.
template <class T>
void head_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
               int64_t ldb, T* c, int64_t ldc, std::vector<T>& bt) {
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0 && static_cast<double>(m) * n * k >= kOnednnMinMacs && onednn::available()) {
      onednn::gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, /*accumulate=*/false);
      if (alpha != T(1))
        for (int64_t i = 0; i < m; ++i) scale_row(c + i * ldc, alpha, n);
      return;
    }
  }
  if (tb && !ta) return gemm_bt<T>(m, n, k, alpha, a, lda, b, ldb, c, ldc, bt);
  gemm0<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
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

// mask_row for every l of one problem (n, h) without the Tensor calls per row (they cost
// about as much as the row's masking at S = 32).
template <class T>
struct MaskRows {
  MaskRow<T> first;
  int64_t row_stride = 0;
  MaskRow<T> at(int64_t l) const {
    MaskRow<T> m = first;
    if (m.flags) m.flags += l * row_stride;
    if (m.add) m.add += l * row_stride;
    return m;
  }
};

template <class T>
MaskRows<T> mask_rows(const Tensor& mask, int64_t n, int64_t h) {
  if (!mask.defined()) return {};
  return {mask_row<T>(mask, n, h, 0), mask.stride(2)};
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
    if constexpr (std::is_same_v<T, float>) {
      // Two passes that vectorize: exp under the flag ran one element at a time, and
      // an exp of every score then the select in one loop was not vectorized either
      // (attention forward+backward 1613 -> 1465 us at 32 x 4 heads of 32 x 32, causal).
      // A masked score's exp is computed and dropped.
      for (int64_t s = 0; s < S; ++s) row[s] = vec::exp(row[s] - lse);
      for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s] ? T(0) : row[s];
      return;
    }
    for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s] ? T(0) : vec::exp(row[s] - lse);
    return;
  }
  apply_mask_row(row, m, S);
  for (int64_t s = 0; s < S; ++s) row[s] = vec::exp(row[s] - lse);
}

// row (S) <- row · c, then masked as apply_mask_row: the scores' scale and mask in one
// pass (the mixed kernels' GEMMs have no alpha).
template <class T>
KILN_MULTIVERSION void scale_mask_row(T* row, T c, const MaskRow<T>& m, int64_t S) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (m.flags && m.step == 1) {
    for (int64_t s = 0; s < S; ++s) row[s] = m.flags[s] ? kNegInf : row[s] * c;
  } else if (m.add && m.step == 1) {
    for (int64_t s = 0; s < S; ++s) row[s] = row[s] * c + m.add[s];
  } else {
    for (int64_t s = 0; s < S; ++s) row[s] *= c;
    apply_mask_row(row, m, S);
  }
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

// Asks the caches for problem b's rows of each tensor (N, H, rows, cols) ahead of their
// use, whatever its dtype. A head's rows are a few hundred bytes each and kilobytes apart
// (the heads of one projection side by side), too short a run per page for the hardware
// prefetchers: without this every row of q, k and v began with a miss to memory.
void prefetch_problem(const Problem& pr, int64_t b, std::initializer_list<const Tensor*> tensors) {
  if (b >= pr.N * pr.H) return;
  for (const Tensor* t : tensors) {
    if (t->numel() == 0) continue;
    // Sizes and strides read once: Tensor::size and stride are calls (with a dim check),
    // which cost 1-2% of the small step when asked once per row.
    const int64_t es = static_cast<int64_t>(t->element_size()), row_bytes = t->size(3) * es;
    const int64_t rows = t->size(2), row_step = t->stride(2) * es;
    const char* base = static_cast<const char*>(t->data_ptr()) +
                       ((b / pr.H) * t->stride(0) + (b % pr.H) * t->stride(1)) * es;
    for (int64_t r = 0; r < rows; ++r) {
      const char* row = base + r * row_step;
      for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(row + o, 0, 3);
    }
  }
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

// Few queries (decoding: a token, or a kv head's group of them): BLAS's fixed cost per
// call and the transpose of k outweigh products this small, so the scores are dot
// products of q's rows with k's rows as they lie and the output sums v's rows scaled by
// them. row (S) = scale · q_l (E) · k_s (E); o (Ev) = Σ_s p_s v_s.
template <class T>
KILN_MULTIVERSION void few_query_scores(const T* ql, const T* k, int64_t ldk, int64_t S, int64_t E, T scale, T* row) {
  for (int64_t s = 0; s < S; ++s) row[s] = static_cast<T>(rows::dot(ql, k + s * ldk, E)) * scale;
}

template <class T>
KILN_MULTIVERSION void few_query_output(const T* p, const T* v, int64_t ldv, int64_t S, int64_t Ev, T* o) {
  std::fill(o, o + Ev, T(0));
  for (int64_t s = 0; s < S; ++s) {
    const T ps = p[s];
    const T* vs = v + s * ldv;
    for (int64_t e = 0; e < Ev; ++e) o[e] += ps * vs[e];
  }
}

constexpr int64_t kFewQueries = 8;

template <class T>
void attention_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Problem& pr,
                     const Tensor& out, const Tensor& lse) {
  T* lse_all = lse.data<T>();
  const T keep_scale = static_cast<T>(1.0 / (1.0 - pr.p));
  if (pr.L <= kFewQueries && pr.p == 0) {
    for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
      thread_local std::vector<T> scores;
      scores.resize(static_cast<size_t>(pr.S));
      auto qh = head<T>(q, n, h), kh = head<T>(k, n, h), vh = head<T>(v, n, h), oh = head<T>(out, n, h);
      const MaskRows<T> masks = mask_rows<T>(mask, n, h);
      for (int64_t l = 0; l < pr.L; ++l) {
        T* row = scores.data();
        few_query_scores(qh.data + l * qh.ld, kh.data, kh.ld, pr.S, pr.E, static_cast<T>(pr.scale), row);
        apply_mask_row(row, masks.at(l), pr.S);
        const double sum = exp_row(row, pr.S, lse_all[b * pr.L + l]);
        scale_row(row, static_cast<T>(1.0 / sum), pr.S);
        few_query_output(row, vh.data, vh.ld, pr.S, pr.Ev, oh.data + l * oh.ld);
      }
    });
    return;
  }
  for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
    thread_local std::vector<T> scores, kt;
    thread_local std::vector<uint32_t> words;
    scores.resize(static_cast<size_t>(pr.L * pr.S));
    auto qh = head<T>(q, n, h), kh = head<T>(k, n, h), vh = head<T>(v, n, h), oh = head<T>(out, n, h);
    prefetch_problem(pr, b + 1, {&q, &k, &v});
    // scores (L, S) = scale · q (L, E) @ k (S, E)ᵀ
    head_gemm<T>(false, true, pr.L, pr.S, pr.E, static_cast<T>(pr.scale), qh.data, qh.ld, kh.data, kh.ld, scores.data(),
                 pr.S, kt);
    if (pr.p > 0) problem_words(pr, b, words);
    const MaskRows<T> masks = mask_rows<T>(mask, n, h);
    for (int64_t l = 0; l < pr.L; ++l) {
      T* row = scores.data() + l * pr.S;
      apply_mask_row(row, masks.at(l), pr.S);
      const double sum = exp_row(row, pr.S, lse_all[b * pr.L + l]);
      const T inv = static_cast<T>(1.0 / sum);
      if (pr.p > 0) {
        drop_row(row, words.data() + l * pr.S, pr.threshold, inv * keep_scale, pr.S);
      } else {
        scale_row(row, inv, pr.S);
      }
    }
    // out (L, Ev) = P' (L, S) @ v (S, Ev)
    head_gemm<T>(false, false, pr.L, pr.Ev, pr.S, T(1), scores.data(), pr.S, vh.data, vh.ld, oh.data, oh.ld, kt);
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
    thread_local std::vector<T> probs, dprobs, bt;
    thread_local std::vector<uint32_t> words;
    probs.resize(static_cast<size_t>(pr.L * pr.S));
    dprobs.resize(static_cast<size_t>(pr.L * pr.S));
    auto qh = head<T>(q, n, h), kh = head<T>(k, n, h), vh = head<T>(v, n, h);
    auto gh = head<T>(g, n, h), oh = head<T>(out, n, h);
    auto gqh = head<T>(grad_q, n, h), gkh = head<T>(grad_k, n, h), gvh = head<T>(grad_v, n, h);
    prefetch_problem(pr, b + 1, {&q, &k, &v, &g, &out});
    // P (L, S) = exp(scale · q kᵀ + mask - lse)
    head_gemm<T>(false, true, pr.L, pr.S, pr.E, scale, qh.data, qh.ld, kh.data, kh.ld, probs.data(), pr.S, bt);
    const MaskRows<T> masks = mask_rows<T>(mask, n, h);
    for (int64_t l = 0; l < pr.L; ++l) {
      exp_shifted_row(probs.data() + l * pr.S, masks.at(l), lse_all[b * pr.L + l], pr.S);
    }
    // dP' (L, S) = g (L, Ev) @ v (S, Ev)ᵀ
    head_gemm<T>(false, true, pr.L, pr.S, pr.Ev, T(1), gh.data, gh.ld, vh.data, vh.ld, dprobs.data(), pr.S, bt);
    if (pr.p > 0) problem_words(pr, b, words);
    for (int64_t l = 0; l < pr.L; ++l) {
      // D = <g_l, out_l>: Σ_s dP'·P' of the row, without P'.
      const T d = static_cast<T>(rows::dot(gh.data + l * gh.ld, oh.data + l * oh.ld, pr.Ev));
      softmax_dropout_backward_row(probs.data() + l * pr.S, dprobs.data() + l * pr.S,
                                   pr.p > 0 ? words.data() + l * pr.S : nullptr, pr.threshold,
                                   pr.p > 0 ? keep_scale : T(1), d, pr.S);
    }
    // grad_v (S, Ev) = P'ᵀ (S, L) @ g (L, Ev)
    head_gemm<T>(true, false, pr.S, pr.Ev, pr.L, T(1), probs.data(), pr.S, gh.data, gh.ld, gvh.data, gvh.ld, bt);
    // grad_q (L, E) = scale · dS (L, S) @ k (S, E)
    head_gemm<T>(false, false, pr.L, pr.E, pr.S, scale, dprobs.data(), pr.S, kh.data, kh.ld, gqh.data, gqh.ld, bt);
    // grad_k (S, E) = scale · dSᵀ (S, L) @ q (L, E)
    head_gemm<T>(true, false, pr.S, pr.E, pr.L, scale, dprobs.data(), pr.S, qh.data, qh.ld, gkh.data, gkh.ld, bt);
  });
}

// ---- autocast's mixed attention: bfloat16 q, k, v; float32 softmax, outputs, gradients
//
// Every GEMM takes bfloat16 operands with float32 accumulation: oneDNN's bf16 GEMM on
// the bits (Low = uint16_t) where the CPU has bf16 units, else OpenBLAS's sgemm on the
// same values held as floats (Low = float: identical products, summed in another
// order). What a GEMM reads besides q, k and v (P', g, scale · dS) is rounded to
// bfloat16 first, into a per-task buffer. oneDNN has no alpha here, so the scale of the
// scores is applied in the row pass.

KILN_MULTIVERSION void round_to_values(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_from_bf16_bits(bf16_bits_from_float(src[i]));
}

// Σ a·b over n, b bfloat16 bits widened on the fly (8 lanes, as rows::dot).
KILN_MULTIVERSION double dot_bf16(const float* a, const uint16_t* b, int64_t n) {
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] += a[i + k] * float_from_bf16_bits(b[i + k]);
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(a[i]) * float_from_bf16_bits(b[i]);
  for (int k = 0; k < 8; ++k) s += lane[k];
  return s;
}

// dst (n) = src (n) rounded to bfloat16, as bits or as floats.
template <class Low>
void round_low(const float* src, Low* dst, int64_t n) {
  if constexpr (std::is_same_v<Low, uint16_t>) {
    float_to_bf16(src, dst, n);
  } else {
    round_to_values(src, dst, n);
  }
}

// C (m, n) = op(A) op(B) in float32, also when k is 0.
void gemm_low(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, float* c, int64_t ldc) {
  onednn::gemm_bf16(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, /*accumulate=*/false);
}
void gemm_low(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* c, int64_t ldc) {
  gemm0<float>(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, c, ldc);
}

// Problem (n, h)'s matrix of a bfloat16 tensor (Low = uint16_t) or of its float32 copy.
template <class Low>
HeadMatrix<const Low> low_head(const Tensor& t, int64_t n, int64_t h) {
  if constexpr (std::is_same_v<Low, uint16_t>) {
    const HeadMatrix<bfloat16> m = head<bfloat16>(t, n, h);
    return {reinterpret_cast<const uint16_t*>(m.data), m.ld};
  } else {
    const HeadMatrix<float> m = head<float>(t, n, h);
    return {m.data, m.ld};
  }
}

// oneDNN runs a bf16 product on its fast kernels (brgemm on AMX) only when each matrix's
// rows are packed; a head inside the rows of a wider tensor (MultiheadAttention's layout,
// the heads of one projection) sends it to its gemm:jit code instead, 1.7-2x slower on a
// (100, 100, 64) product. So a strided head is packed into a per-task buffer first, and
// a strided output written packed and copied out. (OpenBLAS, the fallback, takes the
// strides as they are.)
template <class Low>
HeadMatrix<const Low> packed(const HeadMatrix<const Low>& m, int64_t rows, int64_t cols, std::vector<Low>& buf) {
  if (std::is_same_v<Low, float> || m.ld == cols) return m;
  buf.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) std::copy(m.data + r * m.ld, m.data + r * m.ld + cols, buf.data() + r * cols);
  return {buf.data(), cols};
}

// c (m, n) = op(A) op(B) as gemm_low, through a packed buffer when c's rows are strided.
template <class Low>
void gemm_to(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Low* a, int64_t lda, const Low* b,
             int64_t ldb, const HeadMatrix<float>& c, std::vector<float>& buf) {
  if (std::is_same_v<Low, float> || c.ld == n) return gemm_low(ta, tb, m, n, k, a, lda, b, ldb, c.data, c.ld);
  buf.resize(static_cast<size_t>(m * n));
  gemm_low(ta, tb, m, n, k, a, lda, b, ldb, buf.data(), n);
  for (int64_t r = 0; r < m; ++r) std::copy(buf.data() + r * n, buf.data() + (r + 1) * n, c.data + r * c.ld);
}

template <class Low>
void attention_mixed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Problem& pr,
                     const Tensor& out, const Tensor& lse) {
  float* lse_all = lse.data<float>();
  const float keep_scale = static_cast<float>(1.0 / (1.0 - pr.p)), scale = static_cast<float>(pr.scale);
  for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
    thread_local std::vector<float> scores, out_buf;
    thread_local std::vector<Low> weights, q_buf, k_buf, v_buf;
    thread_local std::vector<uint32_t> words;
    scores.resize(static_cast<size_t>(pr.L * pr.S));
    weights.resize(static_cast<size_t>(pr.L * pr.S));
    auto qh = packed(low_head<Low>(q, n, h), pr.L, pr.E, q_buf), kh = packed(low_head<Low>(k, n, h), pr.S, pr.E, k_buf),
         vh = packed(low_head<Low>(v, n, h), pr.S, pr.Ev, v_buf);
    auto oh = head<float>(out, n, h);
    prefetch_problem(pr, b + 1, {&q, &k, &v});
    // scores (L, S) = q (L, E) @ k (S, E)ᵀ, scaled below
    gemm_low(false, true, pr.L, pr.S, pr.E, qh.data, qh.ld, kh.data, kh.ld, scores.data(), pr.S);
    if (pr.p > 0) problem_words(pr, b, words);
    const MaskRows<float> masks = mask_rows<float>(mask, n, h);
    for (int64_t l = 0; l < pr.L; ++l) {
      float* row = scores.data() + l * pr.S;
      scale_mask_row(row, scale, masks.at(l), pr.S);
      const double sum = exp_row(row, pr.S, lse_all[b * pr.L + l]);
      const float inv = static_cast<float>(1.0 / sum);
      if (pr.p > 0) {
        drop_row(row, words.data() + l * pr.S, pr.threshold, inv * keep_scale, pr.S);
      } else {
        scale_row(row, inv, pr.S);
      }
    }
    // out (L, Ev) = P' (L, S) @ v (S, Ev), P' rounded
    round_low(scores.data(), weights.data(), pr.L * pr.S);
    gemm_to(false, false, pr.L, pr.Ev, pr.S, weights.data(), pr.S, vh.data, vh.ld, oh, out_buf);
  });
}

template <class Low>
void attention_backward_mixed(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, const Problem& pr,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) {
  const float* lse_all = lse.data<float>();
  const float keep_scale = static_cast<float>(1.0 / (1.0 - pr.p)), scale = static_cast<float>(pr.scale);
  for_each_problem(pr, [&](int64_t n, int64_t h, int64_t b) {
    thread_local std::vector<float> probs, dprobs, grad_buf;
    thread_local std::vector<Low> low, g_low, q_buf, k_buf, v_buf;
    thread_local std::vector<uint32_t> words;
    probs.resize(static_cast<size_t>(pr.L * pr.S));
    dprobs.resize(static_cast<size_t>(pr.L * pr.S));
    low.resize(static_cast<size_t>(pr.L * pr.S));
    g_low.resize(static_cast<size_t>(pr.L * pr.Ev));
    auto qh = packed(low_head<Low>(q, n, h), pr.L, pr.E, q_buf), kh = packed(low_head<Low>(k, n, h), pr.S, pr.E, k_buf),
         vh = packed(low_head<Low>(v, n, h), pr.S, pr.Ev, v_buf);
    auto gh = head<float>(g, n, h);
    // D = <g_l, out_l> in float32, out as stored or as the bfloat16 copy autocast keeps.
    auto row_d = [&](int64_t l) -> float {
      if (out.dtype() == kFloat32) {
        const HeadMatrix<float> oh = head<float>(out, n, h);
        return static_cast<float>(rows::dot(gh.data + l * gh.ld, oh.data + l * oh.ld, pr.Ev));
      }
      const HeadMatrix<const uint16_t> oh = low_head<uint16_t>(out, n, h);
      return static_cast<float>(dot_bf16(gh.data + l * gh.ld, oh.data + l * oh.ld, pr.Ev));
    };
    auto gqh = head<float>(grad_q, n, h), gkh = head<float>(grad_k, n, h), gvh = head<float>(grad_v, n, h);
    prefetch_problem(pr, b + 1, {&q, &k, &v, &g, &out});
    // P (L, S) = exp(scale · q kᵀ + mask - lse)
    gemm_low(false, true, pr.L, pr.S, pr.E, qh.data, qh.ld, kh.data, kh.ld, probs.data(), pr.S);
    const MaskRows<float> masks = mask_rows<float>(mask, n, h);
    for (int64_t l = 0; l < pr.L; ++l) {
      float* row = probs.data() + l * pr.S;
      scale_row(row, scale, pr.S);
      exp_shifted_row(row, masks.at(l), lse_all[b * pr.L + l], pr.S);
    }
    // g (L, Ev) rounded, its rows packed
    for (int64_t l = 0; l < pr.L; ++l) round_low(gh.data + l * gh.ld, g_low.data() + l * pr.Ev, pr.Ev);
    // dP' (L, S) = g (L, Ev) @ v (S, Ev)ᵀ
    gemm_low(false, true, pr.L, pr.S, pr.Ev, g_low.data(), pr.Ev, vh.data, vh.ld, dprobs.data(), pr.S);
    if (pr.p > 0) problem_words(pr, b, words);
    for (int64_t l = 0; l < pr.L; ++l) {
      const float d = row_d(l);
      softmax_dropout_backward_row(probs.data() + l * pr.S, dprobs.data() + l * pr.S,
                                   pr.p > 0 ? words.data() + l * pr.S : nullptr, pr.threshold,
                                   pr.p > 0 ? keep_scale : 1.0f, d, pr.S);
    }
    // grad_v (S, Ev) = P'ᵀ (S, L) @ g (L, Ev)
    round_low(probs.data(), low.data(), pr.L * pr.S);
    gemm_to(true, false, pr.S, pr.Ev, pr.L, low.data(), pr.S, g_low.data(), pr.Ev, gvh, grad_buf);
    // scale · dS rounded once for both: grad_q (L, E) = (scale dS) k, grad_k (S, E) = (scale dS)ᵀ q
    scale_row(dprobs.data(), scale, pr.L * pr.S);
    round_low(dprobs.data(), low.data(), pr.L * pr.S);
    gemm_to(false, false, pr.L, pr.E, pr.S, low.data(), pr.S, kh.data, kh.ld, gqh, grad_buf);
    gemm_to(true, false, pr.S, pr.E, pr.L, low.data(), pr.S, qh.data, qh.ld, gkh, grad_buf);
  });
}

void check_mixed(const Tensor& out) {
  KILN_CHECK(out.dtype() == kFloat32, "scaled_dot_product_attention",
             "bfloat16 query, key and value take float32 outputs (autocast), got ", dtype_name(out.dtype()));
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                           double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  const Problem pr = problem_of(q, k, v, scale, dropout_p, seed, block);
  if (q.dtype() == kFloat64) return attention_typed<double>(q, k, v, mask, pr, out, lse);
  if (q.dtype() == kBFloat16) {
    check_mixed(out);
    if (onednn::has_native_bf16()) return attention_mixed<uint16_t>(q, k, v, mask, pr, out, lse);
    return attention_mixed<float>(float32_copy(*this, q), float32_copy(*this, k), float32_copy(*this, v), mask, pr,
                                  out, lse);
  }
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
  if (q.dtype() == kBFloat16) {
    check_mixed(grad_q);
    if (onednn::has_native_bf16()) {
      return attention_backward_mixed<uint16_t>(g, q, k, v, mask, out, lse, pr, grad_q, grad_k, grad_v);
    }
    return attention_backward_mixed<float>(g, float32_copy(*this, q), float32_copy(*this, k),
                                           float32_copy(*this, v), mask, out, lse, pr, grad_q, grad_k, grad_v);
  }
  attention_backward_typed<float>(g, q, k, v, mask, out, lse, pr, grad_q, grad_k, grad_v);
}

}  // namespace kiln::cpu
