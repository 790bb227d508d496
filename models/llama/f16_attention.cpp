#include "llama/f16_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "llama/ggml_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_F16_X86 1
#define KILN_F16_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace kiln::llama {

namespace {

constexpr const char* kAttentionOp = "llama.f16_attention";

// ---- the portable dots (the reference for the vector ones: the same roundings)
float hsum_blocked(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

float dot_blocked_portable(const uint16_t* a, const uint16_t* b, int64_t n) {
  float l[8] = {};
  for (int64_t i = 0; i < n; ++i) l[i % 8] = std::fma(ggml::from_half(a[i]), ggml::from_half(b[i]), l[i % 8]);
  return hsum_blocked(l);
}

float dot_strided_portable(const uint16_t* a, const uint16_t* b, int64_t n) {
  float acc[4][8] = {};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; ++i) {
    float& s = acc[(i / 8) % 4][i % 8];
    s = std::fma(ggml::from_half(a[i]), ggml::from_half(b[i]), s);
  }
  float l[8];
  for (int k = 0; k < 8; ++k) l[k] = (acc[0][k] + acc[2][k]) + (acc[1][k] + acc[3][k]);
  double sum = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(ggml::from_half(a[i]) * ggml::from_half(b[i]));
  return static_cast<float>(sum);
}

// e[j] = exp(w[j] - max) over n (a multiple of 8) -> Σ e as ggml's softmax adds it: each
// 8 values' lanes as hsum_blocked, the 8-sums in double.
inline double softmax_numerators_loop(const float* w, float max, float* e, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i += 8) {
    for (int k = 0; k < 8; ++k) e[i + k] = ggml::exp(w[i + k] - max);
    sum += hsum_blocked(e + i);
  }
  return sum;
}

#ifdef KILN_F16_X86
bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

KILN_F16_AVX2 inline __m256 load_half8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

KILN_F16_AVX2 float dot_blocked_avx2(const uint16_t* a, const uint16_t* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load_half8(a + i), load_half8(b + i), acc);
  const __m128 t = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

KILN_F16_AVX2 float dot_strided_avx2(const uint16_t* a, const uint16_t* b, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const int64_t np = n & ~int64_t{31};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(load_half8(a + i + 8 * j), load_half8(b + i + 8 * j), acc[j]);
  const __m256 s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  double sum = _mm_cvtss_f32(_mm_hadd_ps(h, h));
  for (int64_t i = np; i < n; ++i) sum += static_cast<double>(ggml::from_half(a[i]) * ggml::from_half(b[i]));
  return static_cast<float>(sum);
}

KILN_F16_AVX2 double softmax_numerators_avx2(const float* w, float max, float* e, int64_t n) {
  return softmax_numerators_loop(w, max, e, n);
}
#else
bool has_avx2() { return false; }
float dot_blocked_avx2(const uint16_t*, const uint16_t*, int64_t) { return 0; }
float dot_strided_avx2(const uint16_t*, const uint16_t*, int64_t) { return 0; }
double softmax_numerators_avx2(const float*, float, float*, int64_t) { return 0; }
#endif

double softmax_numerators(const float* w, float max, float* e, int64_t n) {
  return has_avx2() ? softmax_numerators_avx2(w, max, e, n) : softmax_numerators_loop(w, max, e, n);
}

using DotFn = float (*)(const uint16_t*, const uint16_t*, int64_t);

// The dot of `order`, chosen once per call rather than per key.
DotFn dot_for(F16DotOrder order, bool simd) {
  const bool vec = simd && has_avx2();
  if (order == F16DotOrder::kBlocked8) return vec ? dot_blocked_avx2 : dot_blocked_portable;
  return vec ? dot_strided_avx2 : dot_strided_portable;
}

// Scratch of one query row: its float16 query, scores and weights over padded positions.
struct QueryScratch {
  std::vector<uint16_t> q16, p16;
  std::vector<float> w, e;
  QueryScratch(int64_t D, int64_t padded) : q16(D), p16(padded), w(padded), e(padded) {}
};

}  // namespace

float f16_dot(const uint16_t* a, const uint16_t* b, int64_t n, F16DotOrder order, bool simd) {
  KILN_CHECK(n >= 0 && (order != F16DotOrder::kBlocked8 || n % 8 == 0), "llama.f16_dot",
             "the blocked order needs a multiple of 8 values, got ", n);
  return dot_for(order, simd)(a, b, n);
}

// q (B, H, group * T, D) -> o (B, H, group * T, D), per row: scores over the row's keys,
// ggml's softmax, then the float16 weights dotted with the transposed values' rows.
Tensor f16_attention(const Tensor& q, const KVCache& cache, int64_t layer, int64_t T) {
  KILN_CHECK(cache.is_float16(), kAttentionOp, "the cache is not float16");
  const int64_t B = cache.batch(), H = cache.kv_heads(), D = cache.head_dim();
  KILN_CHECK(q.defined() && q.dtype() == kFloat32 && q.device() == kCPU && q.dim() == 4 && q.size(0) == B &&
                 q.size(1) == H && q.size(3) == D && T >= 1 && q.size(2) % T == 0,
             kAttentionOp, "q must be (", B, ", ", H, ", group * ", T, ", ", D, ") float32 on the host, got ",
             q.defined() ? shape_str(q.shape()) + " " + dtype_name(q.dtype()) : "undefined");
  const int64_t past = cache.length(), rows = q.size(2), cap = cache.capacity(), pad = cache.padded_capacity();
  KILN_CHECK(past + T <= cap, kAttentionOp, past, " held and ", T, " new positions exceed the capacity ", cap);
  // ggml's tiled product runs for more than one new position when the sizes suit it,
  // its vector dot otherwise.
  const bool tiled = T > 1;
  const DotFn score_dot = dot_for(tiled && D % 8 == 0 ? F16DotOrder::kBlocked8 : F16DotOrder::kStrided32, true);
  const DotFn value_dot = dot_for(tiled && D % 4 == 0 ? F16DotOrder::kBlocked8 : F16DotOrder::kStrided32, true);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const Tensor qc = q.contiguous();
  Tensor out = empty(q.shape(), TensorOptions(kFloat32));
  const float* pq = qc.data<float>();
  float* po = out.data<float>();
  const uint16_t* keys = cache.keys_f16(layer);
  const uint16_t* values = cache.values_f16(layer);
  const int64_t grain = std::max<int64_t>(1, cpu::kGrainElements / std::max<int64_t>(1, (past + T) * D));
  cpu::parallel_for(B * H * rows, grain, [&](int64_t r0, int64_t r1) {
    QueryScratch s(D, pad);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bh = r / rows, pos = past + (r % rows) % T;
      const int64_t seen = pos + 1, padded = (seen + 31) / 32 * 32;
      ggml::to_half(pq + r * D, s.q16.data(), D);
      const uint16_t* K = keys + bh * cap * D;
      for (int64_t j = 0; j < seen; ++j) s.w[j] = score_dot(K + j * D, s.q16.data(), D) * scale;
      std::fill(s.w.begin() + seen, s.w.begin() + padded, -std::numeric_limits<float>::infinity());
      const float max = *std::max_element(s.w.begin(), s.w.begin() + seen);
      const float inv = static_cast<float>(1.0 / softmax_numerators(s.w.data(), max, s.e.data(), padded));
      for (int64_t j = 0; j < padded; ++j) s.e[j] *= inv;
      ggml::to_half(s.e.data(), s.p16.data(), padded);
      const uint16_t* V = values + bh * D * pad;
      for (int64_t d = 0; d < D; ++d) po[r * D + d] = value_dot(V + d * pad, s.p16.data(), padded);
    }
  });
  return out;
}

}  // namespace kiln::llama
