// Few-row float32 products against a (N, K) weight (see small_gemm.h). Below
// small_gemm_outer_min_rows(), the dot form: blocks of 4 rows of a by 3 rows of b, 8 lanes
// of K at a time in 12 accumulators. From there, the outer form: b's rows against a
// transposed (below).
#include "backend/cpu/small_gemm.h"

#include <algorithm>
#include <memory>

#include "backend/cpu/parallel.h"
#include "core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KILN_SMALL_GEMM_X86 1
#endif

namespace kiln::cpu {
namespace {

#ifdef KILN_SMALL_GEMM_X86

#define KILN_SMALL_GEMM_AVX2 __attribute__((target("avx2,fma")))

bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// The four sums of lanes of a0..a3, each ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)):
// the one reduction every output takes, whichever accumulators sit beside it.
KILN_SMALL_GEMM_AVX2 inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Lanes [0, r) on, for the last r < 8 values of K.
KILN_SMALL_GEMM_AVX2 inline __m256i tail_mask(int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// How c's block starts before the first stretch of K adds to it.
struct Start {
  const float* bias;  // c = bias + ...
  bool accumulate;    // c = c + ... (else c = 0 + ...)
};

// Rows [first, last) of the next three rows of b, at row + j·ldb, to fetch into the cache
// while a block computes: at a few rows of a the product waits on memory for the weight,
// and the hardware prefetcher does not follow three short rows at once (measured: 4.7
// GB/s without, a single row streams at 11).
struct Fetch {
  const float* row = nullptr;  // null: nothing to fetch
  int first = 0, last = 0;
};

// Adds a (MR, kk) · b (NR, kk)ᵀ to the (MR, NR) block of c: rows of a at a + i·lda, rows
// of b at b + j·ldb, rows of c at c + i·ldc. On the first stretch of K (start non-null)
// the block is first set as *start says. Meanwhile it fetches `fetch`'s rows.
template <int MR, int NR>
KILN_SMALL_GEMM_AVX2 void block_avx2(int64_t kk, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                              int64_t ldc, const Start* start, Fetch fetch) {
  __m256 acc[MR][3];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 3; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t k8 = kk & ~int64_t{7};
  for (int64_t k = 0; k < k8; k += 8) {
    if (fetch.row && (k & 15) == 0)  // a cache line holds 16 floats
      for (int j = fetch.first; j < fetch.last; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(fetch.row + j * ldb + k), _MM_HINT_T0);
    __m256 bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm256_loadu_ps(b + j * ldb + k);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_loadu_ps(a + i * lda + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  if (k8 < kk) {  // masked lanes load as 0 and add nothing
    const __m256i m = tail_mask(kk - k8);
    __m256 bv[NR];
    for (int j = 0; j < NR; ++j) bv[j] = _mm256_maskload_ps(b + j * ldb + k8, m);
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_maskload_ps(a + i * lda + k8, m);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    alignas(16) float s[4];
    _mm_store_ps(s, reduce4(acc[i][0], acc[i][1], acc[i][2], _mm256_setzero_ps()));
    float* row = c + i * ldc;
    for (int j = 0; j < NR; ++j) {
      const float before = !start ? row[j] : start->bias ? start->bias[j] : start->accumulate ? row[j] : 0.0f;
      row[j] = before + s[j];
    }
  }
}

// Every row of a against b's rows [n, n + NR), over one stretch of K, fetching the next
// three rows of b (next, may be null) meanwhile: block i of rows of a fetches row i of
// them (the last block, when there are fewer than three, the rest), so the weight streams
// in over the whole pass rather than in one burst beside the first block. All-MiniLM's
// (16, 1536, 384) product on cold weights: 48 -> 60 GFLOP/s at one thread (Zen 3).
template <int NR>
KILN_SMALL_GEMM_AVX2 void all_rows_avx2(int64_t M, int64_t kk, const float* a, int64_t lda, const float* b, int64_t ldb,
                                 float* c, int64_t ldc, const Start* start, const float* next) {
  const int blocks = static_cast<int>((M + 3) / 4);
  auto fetch = [&](int i) {
    return next ? Fetch{next, std::min(i, 3), i + 1 == blocks ? 3 : std::min(i + 1, 3)} : Fetch{};
  };
  int64_t m = 0;
  int i = 0;
  for (; m + 4 <= M; m += 4, ++i) block_avx2<4, NR>(kk, a + m * lda, lda, b, ldb, c + m * ldc, ldc, start, fetch(i));
  const float* ar = a + m * lda;
  float* cr = c + m * ldc;
  switch (M - m) {
    case 3: block_avx2<3, NR>(kk, ar, lda, b, ldb, cr, ldc, start, fetch(i)); break;
    case 2: block_avx2<2, NR>(kk, ar, lda, b, ldb, cr, ldc, start, fetch(i)); break;
    case 1: block_avx2<1, NR>(kk, ar, lda, b, ldb, cr, ldc, start, fetch(i)); break;
    default: break;
  }
}

// Columns [n0, n1) of c. K goes in stretches of kStretch, so that a's rows of a stretch
// (16 · 512 floats, 32 KB at most) stay near while every block of rows of a meets three
// rows of b: a block reads 7 vectors for 12 FMAs, which L2 alone could not feed. 512
// rather than 256 (a 384-wide layer then in one stretch): all-MiniLM's one-sentence
// forward 5.20 -> 4.85 ms at 2 threads, 8.70 -> 8.32 at 1 (Zen 3, alternating rounds).
// Each output sums its stretches in order, so the stretches, fixed by K, are part of its
// one fixed order.
KILN_SMALL_GEMM_AVX2 void columns_avx2(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* a, int64_t lda,
                                const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc,
                                bool accumulate) {
  constexpr int64_t kStretch = 512;
  for (int64_t k0 = 0; k0 < K; k0 += kStretch) {
    const int64_t kk = std::min(kStretch, K - k0);
    for (int64_t n = n0; n < n1; n += 3) {
      const int64_t nr = std::min<int64_t>(3, n1 - n);
      const Start first{bias ? bias + n : nullptr, accumulate};
      const Start* start = k0 == 0 ? &first : nullptr;
      const float* bn = b + n * ldb + k0;
      // Three full rows follow within the chunk: fetch them (the chunk's last rows and
      // the next stretch are left to the hardware).
      const float* next = n + 6 <= n1 ? bn + 3 * ldb : nullptr;
      if (nr == 3) all_rows_avx2<3>(M, kk, a + k0, lda, bn, ldb, c + n, ldc, start, next);
      if (nr == 2) all_rows_avx2<2>(M, kk, a + k0, lda, bn, ldb, c + n, ldc, start, next);
      if (nr == 1) all_rows_avx2<1>(M, kk, a + k0, lda, bn, ldb, c + n, ldc, start, next);
    }
  }
}

// ---- the outer form: the weight's rows against a transposed ---------------------------
// cᵀ (N, M) = b (N, K) · aᵀ (K, M) with aᵀ packed once into a panel (K, 16), zero past M:
// tiles of 6 rows of b by the panel's 16 columns in 12 accumulators, each k one broadcast
// of b's value per row against the panel's two vectors. 8 loads for 12 FMAs, against the
// dot form's 7 for 12 plus a reduction per output, and no reduction: every output is one
// FMA chain over K in order. From 13 rows up (below, the panel's zero columns cost more
// than the form saves; measured one thread, Zen 4, warm weights: (16, 1536, 384) 60 ->
// 79 GFLOP/s, cold 44 -> 57; at 12 rows the dot form's three full blocks win, 63 against
// 54); all-MiniLM's one-sentence forward at one thread 8.3 -> 7.3 ms.
constexpr int kOuterRows = 6, kPanel = 16, kOuterMinRowsAvx2 = 13;

// at (K, 16) <- a (M, K)ᵀ, rows of a lda apart; zeros in the columns past M.
void pack_transposed(int64_t M, int64_t K, const float* a, int64_t lda, float* at) {
  for (int64_t k = 0; k < K; ++k)
    for (int64_t i = 0; i < kPanel; ++i) at[k * kPanel + i] = i < M ? a[i * lda + k] : 0.0f;
}

// c's columns [0, nr) for its M rows: c = (as *start says) + t's columns, t (nr, 16) the
// block's sums transposed.
void write_block(int64_t M, int nr, const float (*t)[kPanel], float* c, int64_t ldc, const Start& start) {
  for (int64_t i = 0; i < M; ++i) {
    float* row = c + i * ldc;
    for (int r = 0; r < nr; ++r) {
      const float before = start.bias ? start.bias[r] : start.accumulate ? row[r] : 0.0f;
      row[r] = before + t[r][i];
    }
  }
}

// c's columns [0, NR) (b's rows b, b + ldb, ...) for its M rows, from the panel, as
// *start says; meanwhile it fetches the next NR rows of b (next, may be null).
template <int NR>
KILN_SMALL_GEMM_AVX2 void outer_block(int64_t M, int64_t K, const float* at, const float* b, int64_t ldb,
                                      const float* next, float* c, int64_t ldc, const Start& start) {
  __m256 lo[NR], hi[NR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    if (next && (k & 15) == 0)
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * ldb + k), _MM_HINT_T0);
    const __m256 p_lo = _mm256_loadu_ps(at + k * kPanel), p_hi = _mm256_loadu_ps(at + k * kPanel + 8);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m256 w = _mm256_broadcast_ss(b + r * ldb + k);
      lo[r] = _mm256_fmadd_ps(w, p_lo, lo[r]);
      hi[r] = _mm256_fmadd_ps(w, p_hi, hi[r]);
    }
  }
  alignas(32) float t[NR][kPanel];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    _mm256_store_ps(t[r], lo[r]);
    _mm256_store_ps(t[r] + 8, hi[r]);
  }
  write_block(M, NR, t, c, ldc, start);
}

#undef KILN_SMALL_GEMM_AVX2

// The same form in AVX-512 where the CPU has it: 8 rows of b against the panel as one
// 16-lane vector, 9 loads for 8 FMAs of 16 lanes. Each output is the same FMA chain over K
// as in the AVX2 tiles, so the two give the same bits. One Zen 4 core (which splits a
// 512-bit FMA in two): (16, 1536, 384) 75-77 -> 103-105 GFLOP/s on warm weights, 57-60 ->
// 66-68 on cold; 12 rows a block ran as fast warm but streamed cold weights slower (one
// sentence's forward at one thread 6.0-6.4 -> 6.5-7.0 ms), 6 and 8 rows alike; 8 keeps
// 8 FMA chains in flight for cores with two 512-bit FMA units.
#define KILN_SMALL_GEMM_AVX512 __attribute__((target("avx512f,fma")))

bool has_avx512f() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

constexpr int kOuterRows512 = 8;
// With these tiles the outer form wins from 9 rows (one Zen 4 core, warm weights, GFLOP/s
// of the dot form against the outer: (9, 384, 384) 50 / 60, (10, ...) 57 / 66, (12, ...)
// 66 / 83 with (12, 1536, 384); cold alike or better; at 8 rows the dot form, 67 / 52).
constexpr int kOuterMinRowsAvx512 = 9;

template <int NR>
KILN_SMALL_GEMM_AVX512 void outer_block_avx512(int64_t M, int64_t K, const float* at, const float* b, int64_t ldb,
                                               const float* next, float* c, int64_t ldc, const Start& start) {
  __m512 acc[NR];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    if (next && (k & 15) == 0)
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * ldb + k), _MM_HINT_T0);
    const __m512 p = _mm512_loadu_ps(at + k * kPanel);
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(b[r * ldb + k]), p, acc[r]);
  }
  alignas(64) float t[NR][kPanel];
#pragma GCC unroll 16
  for (int r = 0; r < NR; ++r) _mm512_store_ps(t[r], acc[r]);
  write_block(M, NR, t, c, ldc, start);
}

// One block of NR rows of b in the wide (AVX-512) or the AVX2 tiles.
template <bool kWide, int NR>
void outer_block_in(int64_t M, int64_t K, const float* at, const float* b, int64_t ldb, const float* next, float* c,
                    int64_t ldc, const Start& start) {
  if constexpr (kWide) outer_block_avx512<NR>(M, K, at, b, ldb, next, c, ldc, start);
  else outer_block<NR>(M, K, at, b, ldb, next, c, ldc, start);
}

// Columns [n0, n1) of c, every row, from the packed panel: full blocks of the tiles' rows
// of b, each fetching the next full block's rows meanwhile, the rest in blocks of 4 and 1.
template <bool kWide>
void columns_outer(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* at, const float* b, int64_t ldb,
                   const float* bias, float* c, int64_t ldc, bool accumulate) {
  constexpr int kRows = kWide ? kOuterRows512 : kOuterRows;
  auto start = [&](int64_t n) { return Start{bias ? bias + n : nullptr, accumulate}; };
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) {
    const float* next = n + 2 * kRows <= n1 ? b + (n + kRows) * ldb : nullptr;
    outer_block_in<kWide, kRows>(M, K, at, b + n * ldb, ldb, next, c + n, ldc, start(n));
  }
  for (; n + 4 <= n1; n += 4) outer_block_in<kWide, 4>(M, K, at, b + n * ldb, ldb, nullptr, c + n, ldc, start(n));
  for (; n < n1; ++n) outer_block_in<kWide, 1>(M, K, at, b + n * ldb, ldb, nullptr, c + n, ldc, start(n));
}

#undef KILN_SMALL_GEMM_AVX512
#endif  // KILN_SMALL_GEMM_X86

// Roughly the flops below which a chunk of columns is not worth a task of its own.
constexpr double kMinFlopsPerChunk = 4e5;

}  // namespace

int64_t small_gemm_outer_min_rows() {
#ifdef KILN_SMALL_GEMM_X86
  return has_avx512f() ? kOuterMinRowsAvx512 : kOuterMinRowsAvx2;
#else
  return kSmallGemmMaxRows + 1;
#endif
}

bool small_gemm_applies(int64_t M, int64_t N, int64_t K) {
#ifdef KILN_SMALL_GEMM_X86
  return M > 0 && M <= kSmallGemmMaxRows && N > 0 && K > 0 && has_avx2_fma();
#else
  (void)M, (void)N, (void)K;
  return false;
#endif
}

void gemm_small_nt(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                   const float* bias, float* c, int64_t ldc, bool accumulate) {
  KILN_CHECK(small_gemm_applies(M, N, K), "gemm_small_nt", "no small-product kernel for (M, N, K) = (", M, ", ", N,
             ", ", K, ") on this CPU");
  KILN_CHECK(!(bias && accumulate), "gemm_small_nt", "a bias and accumulate together");
#ifdef KILN_SMALL_GEMM_X86
  if (M >= small_gemm_outer_min_rows()) {
    const std::unique_ptr<float[]> at(new float[static_cast<size_t>(K * kPanel)]);
    pack_transposed(M, K, a, lda, at.get());
    const bool wide = has_avx512f();
    const int64_t rows = wide ? kOuterRows512 : kOuterRows;
    const double per_block = 2.0 * kPanel * static_cast<double>(rows) * static_cast<double>(K);
    const int64_t blocks = (N + rows - 1) / rows;
    const FixedChunks chunks = fixed_chunks(blocks, static_cast<int64_t>(kMinFlopsPerChunk / per_block), 64);
    parallel_for_fixed(blocks, chunks, [&](int64_t, int64_t b0, int64_t b1) {
      const int64_t n0 = rows * b0, n1 = std::min(N, rows * b1);
      if (wide) columns_outer<true>(M, n0, n1, K, at.get(), b, ldb, bias, c, ldc, accumulate);
      else columns_outer<false>(M, n0, n1, K, at.get(), b, ldb, bias, c, ldc, accumulate);
    });
    return;
  }
  // Chunks of whole 3-column blocks, fixed by the shape (a chunk's edge block would run
  // at two thirds of the speed).
  const double per_block = 6.0 * static_cast<double>(M) * static_cast<double>(K);
  const int64_t blocks = (N + 2) / 3;
  const FixedChunks chunks = fixed_chunks(blocks, static_cast<int64_t>(kMinFlopsPerChunk / per_block), 64);
  parallel_for_fixed(blocks, chunks, [&](int64_t, int64_t b0, int64_t b1) {
    columns_avx2(M, 3 * b0, std::min(N, 3 * b1), K, a, lda, b, ldb, bias, c, ldc, accumulate);
  });
#endif
}

}  // namespace kiln::cpu
