// quantized_matmul (quant_matmul.h): x's rows quantised to 8-bit blocks once, then every
// weight row dotted with every x row block by block in integers. Hand-written AVX2 and
// AVX-512 VNNI kernels where the CPU has them (chosen at run time: the build targets any
// x86-64), a portable loop elsewhere. tests/test_quantized.cpp checks every path the
// machine can run against the dequantised product.
#include "backend/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"
#include "core/error.h"
#include "core/float16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KILN_QUANT_X86 1
#endif

namespace kiln::cpu {
namespace {

constexpr int kQuantBlock = 32;

// One block of a quantised x row: d and s = d · Σq through float16 as llama.cpp keeps them.
struct ActBlock {
  float d, s;
  int8_t q[kQuantBlock];
};

// x (K) -> K / 32 blocks: d = max|x| / 127, q = round(x · 127 / max|x|) to nearest even.
void quantize_activations(const float* x, int64_t K, ActBlock* out) {
  for (int64_t b = 0; b < K / kQuantBlock; ++b) {
    const float* v = x + b * kQuantBlock;
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) {
      const int q = static_cast<int>(std::nearbyint(v[j] * id));
      out[b].q[j] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = float_from_half_bits(half_bits_from_float(d));
    out[b].s = float_from_half_bits(half_bits_from_float(d * static_cast<float>(sum)));
  }
}

float scale_of(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return float_from_half_bits(h);
}

// A weight row unpacked once per call, then dotted with every x row: 32 int8 values a
// block (Q4_0's q - 8, Q8_0's q, Q4_1's unsigned nibbles 0..15), the scales d and, for
// Q4_1, the minimums m as floats.
struct RowScratch {
  std::vector<int8_t> q;
  std::vector<float> d, m;
  explicit RowScratch(int64_t blocks)
      : q(static_cast<size_t>(blocks * kQuantBlock)), d(static_cast<size_t>(blocks)), m(static_cast<size_t>(blocks)) {}
};

// ---- portable
void unpack_portable(GGMLType type, const uint8_t* w, int64_t blocks, RowScratch& r) {
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t* q = r.q.data() + b * kQuantBlock;
    if (type == GGMLType::Q8_0) {
      const uint8_t* blk = w + 34 * b;
      std::memcpy(q, blk + 2, kQuantBlock);
      r.d[b] = scale_of(blk);
    } else {
      const bool q4_1 = type == GGMLType::Q4_1;
      const uint8_t* blk = w + (q4_1 ? 20 : 18) * b;
      const uint8_t* qs = blk + (q4_1 ? 4 : 2);
      const int offset = q4_1 ? 0 : 8;
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        q[j] = static_cast<int8_t>((qs[j] & 0x0F) - offset);
        q[j + kQuantBlock / 2] = static_cast<int8_t>((qs[j] >> 4) - offset);
      }
      r.d[b] = scale_of(blk);
      r.m[b] = q4_1 ? scale_of(blk + 2) : 0.0f;
    }
  }
}

float dot_portable(const RowScratch& r, const ActBlock* x, int64_t blocks, bool with_min) {
  float acc = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* q = r.q.data() + b * kQuantBlock;
    int isum = 0;
    for (int j = 0; j < kQuantBlock; ++j) isum += q[j] * x[b].q[j];
    acc += r.d[b] * x[b].d * static_cast<float>(isum);
    if (with_min) acc += r.m[b] * x[b].s;
  }
  return acc;
}

#ifdef KILN_QUANT_X86

#define KILN_AVX2_FMA __attribute__((target("avx2,fma,f16c")))
#define KILN_AVX_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

// A Q4 block's 16 bytes as 32 unsigned nibbles in value order (low nibbles, then high).
KILN_AVX2_FMA inline __m256i nibbles(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask), _mm_and_si128(bytes, mask));
}

// quantize_activations with 8 lanes: the same products and round-to-nearest-even, so the
// same blocks.
KILN_AVX2_FMA void quantize_activations_avx2(const float* x, int64_t K, ActBlock* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < K / kQuantBlock; ++b) {
    const float* v = x + b * kQuantBlock;
    __m256 vals[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      vals[i] = _mm256_loadu_ps(v + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, vals[i]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    const float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(vals[i], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum32), _mm256_extracti128_si256(sum32, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    const int sum = _mm_cvtsi128_si32(s4);
    // int32 -> int8 in order: the packs interleave 128-bit lanes, the permute undoes it.
    const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i p8 = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p8);
    out[b].d = float_from_half_bits(half_bits_from_float(d));
    out[b].s = float_from_half_bits(half_bits_from_float(d * static_cast<float>(sum)));
  }
}

KILN_AVX2_FMA inline float half_f16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

KILN_AVX2_FMA void unpack_avx2(GGMLType type, const uint8_t* w, int64_t blocks, RowScratch& r) {
  for (int64_t b = 0; b < blocks; ++b) {
    auto* q = reinterpret_cast<__m256i*>(r.q.data() + b * kQuantBlock);
    if (type == GGMLType::Q8_0) {
      const uint8_t* blk = w + 34 * b;
      _mm256_storeu_si256(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
      r.d[b] = half_f16c(blk);
    } else if (type == GGMLType::Q4_0) {
      const uint8_t* blk = w + 18 * b;
      _mm256_storeu_si256(q, _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8)));
      r.d[b] = half_f16c(blk);
    } else {
      const uint8_t* blk = w + 20 * b;
      _mm256_storeu_si256(q, nibbles(blk + 4));
      r.d[b] = half_f16c(blk);
      r.m[b] = half_f16c(blk + 2);
    }
  }
}

KILN_AVX2_FMA inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Σ of u8 u · i8 s in 8 int32 lanes: maddubs (pairs to int16; at most 2 · 127 · 127, no
// saturation for our operands) then madd with ones; or VNNI's vpdpbusd in one step.
KILN_AVX2_FMA inline __m256i dot_u8_i8_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
KILN_AVX_VNNI inline __m256i dot_u8_i8_vnni(__m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

// An unpacked weight row against every x row, four x rows at a time so that each loaded
// weight vector (and, for the signed types, |w|) serves four dots: y[m · N + n] for all m.
// Q4_1's values are unsigned and dot as they are; the signed ones dot as |w| with x
// carrying w's sign.
#define KILN_QUANT_ROWS_BODY(DOT)                                                                   \
  int64_t m = 0;                                                                                   \
  for (; m + 4 <= M; m += 4) {                                                                     \
    const ActBlock* xs[4] = {act + m * blocks, act + (m + 1) * blocks, act + (m + 2) * blocks,     \
                             act + (m + 3) * blocks};                                              \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
    float extra[4] = {0, 0, 0, 0};                                                                 \
    for (int64_t b = 0; b < blocks; ++b) {                                                         \
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.q.data() + b * kQuantBlock)); \
      const __m256i uw = with_min ? qw : _mm256_sign_epi8(qw, qw);                                 \
      for (int i = 0; i < 4; ++i) {                                                                \
        const ActBlock& a = xs[i][b];                                                              \
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q));              \
        const __m256i isum = DOT(uw, with_min ? qx : _mm256_sign_epi8(qx, qw));                    \
        acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(r.d[b] * a.d), _mm256_cvtepi32_ps(isum), acc[i]);  \
        if (with_min) extra[i] += r.m[b] * a.s;                                                    \
      }                                                                                            \
    }                                                                                              \
    for (int i = 0; i < 4; ++i) y[(m + i) * N + n] = hsum(acc[i]) + extra[i];                      \
  }                                                                                                \
  for (; m < M; ++m) {                                                                             \
    const ActBlock* x = act + m * blocks;                                                          \
    __m256 acc = _mm256_setzero_ps();                                                              \
    float extra = 0;                                                                               \
    for (int64_t b = 0; b < blocks; ++b) {                                                         \
      const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.q.data() + b * kQuantBlock)); \
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));              \
      const __m256i isum = with_min ? DOT(qw, qx) : DOT(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw)); \
      acc = _mm256_fmadd_ps(_mm256_set1_ps(r.d[b] * x[b].d), _mm256_cvtepi32_ps(isum), acc);       \
      if (with_min) extra += r.m[b] * x[b].s;                                                      \
    }                                                                                              \
    y[m * N + n] = hsum(acc) + extra;                                                              \
  }

KILN_AVX2_FMA void rows_avx2(const RowScratch& r, const ActBlock* act, int64_t M, int64_t blocks, int64_t n,
                             int64_t N, float* y, bool with_min) {
  KILN_QUANT_ROWS_BODY(dot_u8_i8_avx2)
}
KILN_AVX_VNNI void rows_vnni(const RowScratch& r, const ActBlock* act, int64_t M, int64_t blocks, int64_t n,
                             int64_t N, float* y, bool with_min) {
  KILN_QUANT_ROWS_BODY(dot_u8_i8_vnni)
}
#undef KILN_QUANT_ROWS_BODY

// One weight row straight from its blocks against one x row (the decode case: nothing to
// reuse, so nothing is unpacked to memory). kType: the GGMLType's id.
#define KILN_QUANT_FUSED_STEP(DOT, B, ACC, EXTRA)                                                  \
  {                                                                                                \
    const uint8_t* blk = w + kBytes * (B);                                                         \
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[B].q));                \
    __m256i isum;                                                                                  \
    if constexpr (kType == 3) {                                                                    \
      isum = DOT(nibbles(blk + 4), qx);                                                            \
      EXTRA += half_f16c(blk + 2) * x[B].s;                                                        \
    } else {                                                                                       \
      const __m256i qw = kType == 2 ? _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8))        \
                                    : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)); \
      isum = DOT(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));                              \
    }                                                                                              \
    ACC = _mm256_fmadd_ps(_mm256_set1_ps(half_f16c(blk) * x[B].d), _mm256_cvtepi32_ps(isum), ACC); \
  }
// One chain of fused multiply-adds over the blocks, then the minimums' sum: ggml's
// vec_dot order, so that a GGUF model's products have llama.cpp's bits (its next layer
// rounds them to 8 bits, where any other order changes the tokens).
#define KILN_QUANT_FUSED_BODY(DOT)                                                                  \
  __m256 acc = _mm256_setzero_ps();                                                                \
  float extra = 0;                                                                                 \
  constexpr int64_t kBytes = kType == 8 ? 34 : kType == 2 ? 18 : 20;                               \
  for (int64_t b = 0; b < blocks; ++b) KILN_QUANT_FUSED_STEP(DOT, b, acc, extra)                   \
  return hsum(acc) + extra;

template <int kType>
KILN_AVX2_FMA inline float fused_avx2(const uint8_t* w, const ActBlock* x, int64_t blocks) {
  KILN_QUANT_FUSED_BODY(dot_u8_i8_avx2)
}
template <int kType>
KILN_AVX_VNNI inline float fused_vnni(const uint8_t* w, const ActBlock* x, int64_t blocks) {
  KILN_QUANT_FUSED_BODY(dot_u8_i8_vnni)
}
// Weight rows [n0, n1) each against the M (< 4) x rows: y[m · N + n]. One loop around the
// inlined row kernel, so that the out-of-order core overlaps one row's chain with the next.
template <int kType>
KILN_AVX2_FMA void fused_rows_avx2(const uint8_t* w, int64_t row_bytes, const ActBlock* act, int64_t M, int64_t blocks,
                                   int64_t n0, int64_t n1, int64_t N, float* y) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = fused_avx2<kType>(w + n * row_bytes, act + m * blocks, blocks);
}
template <int kType>
KILN_AVX_VNNI void fused_rows_vnni(const uint8_t* w, int64_t row_bytes, const ActBlock* act, int64_t M, int64_t blocks,
                                   int64_t n0, int64_t n1, int64_t N, float* y) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = fused_vnni<kType>(w + n * row_bytes, act + m * blocks, blocks);
}
#undef KILN_QUANT_FUSED_BODY
#undef KILN_QUANT_FUSED_STEP

bool quant_has_avx2() {
  // F16C came before AVX2 on every x86 line (and clang 14 cannot test it by name).
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
bool quant_has_vnni() {
  static const bool yes = quant_has_avx2() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return yes;
}
#else
bool quant_has_avx2() { return false; }
bool quant_has_vnni() { return false; }
void quantize_activations_avx2(const float*, int64_t, ActBlock*) {}
#endif

using UnpackFn = void (*)(GGMLType, const uint8_t*, int64_t, RowScratch&);
using RowsFn = void (*)(const RowScratch&, const ActBlock*, int64_t, int64_t, int64_t, int64_t, float*, bool);
using FusedFn = void (*)(const uint8_t*, int64_t, const ActBlock*, int64_t, int64_t, int64_t, int64_t, int64_t, float*);

void rows_portable(const RowScratch& r, const ActBlock* act, int64_t M, int64_t blocks, int64_t n, int64_t N,
                   float* y, bool with_min) {
  for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_portable(r, act + m * blocks, blocks, with_min);
}

QuantDotPath resolve_quant_path(QuantDotPath path) {
  if (path != QuantDotPath::kBest) return path;
  if (quant_has_vnni()) return QuantDotPath::kAvxVnni;
  if (quant_has_avx2()) return QuantDotPath::kAvx2;
  return QuantDotPath::kPortable;
}

using QuantizeFn = void (*)(const float*, int64_t, ActBlock*);

struct Kernels {
  QuantizeFn quantize;
  UnpackFn unpack;
  RowsFn rows;
  FusedFn fused;  // rows straight from their blocks; nullptr: unpack, then rows
};

Kernels kernels_for(QuantDotPath path, GGMLType type) {
#ifdef KILN_QUANT_X86
  auto pick = [type](FusedFn q8, FusedFn q40, FusedFn q41) {
    return type == GGMLType::Q8_0 ? q8 : type == GGMLType::Q4_0 ? q40 : q41;
  };
  if (path == QuantDotPath::kAvxVnni)
    return {quantize_activations_avx2, unpack_avx2, rows_vnni, pick(fused_rows_vnni<8>, fused_rows_vnni<2>, fused_rows_vnni<3>)};
  if (path == QuantDotPath::kAvx2)
    return {quantize_activations_avx2, unpack_avx2, rows_avx2, pick(fused_rows_avx2<8>, fused_rows_avx2<2>, fused_rows_avx2<3>)};
#else
  (void)type;
#endif
  return {quantize_activations, unpack_portable, rows_portable, nullptr};
}

}  // namespace

bool quant_dot_path_available(QuantDotPath path) {
  switch (path) {
    case QuantDotPath::kBest:
    case QuantDotPath::kPortable: return true;
    case QuantDotPath::kAvx2: return quant_has_avx2();
    case QuantDotPath::kAvxVnni: return quant_has_vnni();
  }
  return false;
}

const char* quant_dot_path_name() {
  switch (resolve_quant_path(QuantDotPath::kBest)) {
    case QuantDotPath::kAvxVnni: return "avx512-vnni";
    case QuantDotPath::kAvx2: return "avx2";
    default: return "portable";
  }
}

void quantized_matmul(const float* x, int64_t M, int64_t K, const QuantizedMatrix& w, float* y, QuantDotPath path) {
  KILN_CHECK(w.type == GGMLType::Q8_0 || w.type == GGMLType::Q4_0 || w.type == GGMLType::Q4_1, "quantized_matmul",
             "weights in ", ggml_type_info(w.type).name, " (expected q8_0, q4_0 or q4_1)");
  KILN_CHECK(w.cols == K && K % kQuantBlock == 0, "quantized_matmul", "x has ", K, " columns, the weight ", w.cols);
  KILN_CHECK(quant_dot_path_available(path), "quantized_matmul", "the requested path is not available on this CPU");
  const Kernels k = kernels_for(resolve_quant_path(path), w.type);
  const int64_t blocks = K / kQuantBlock, N = w.rows, row_bytes = w.row_bytes();
  const bool with_min = w.type == GGMLType::Q4_1;
  std::vector<ActBlock> act(static_cast<size_t>(M * blocks));
  parallel_for(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(K, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) k.quantize(x + m * K, K, act.data() + m * blocks);
  });
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(M * K, 1));
  if (k.fused && M < 4) {  // each weight row used once or twice: dotted from its blocks
    return parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
      k.fused(w.data, row_bytes, act.data(), M, blocks, n0, n1, N, y);
    });
  }
  // Each weight row is read from memory and unpacked once, then dotted with every x row
  // while it is in cache.
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
    RowScratch row(blocks);
    for (int64_t n = n0; n < n1; ++n) {
      k.unpack(w.type, w.data + n * row_bytes, blocks, row);
      k.rows(row, act.data(), M, blocks, n, N, y, with_min);
    }
  });
}

}  // namespace kiln::cpu

namespace kiln::cpu {

void CpuBackend::quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& out) {
  // The plain types have no integer dot: their values, dequantised, through the GEMM.
  if (w.type != GGMLType::Q8_0 && w.type != GGMLType::Q4_0 && w.type != GGMLType::Q4_1)
    return Backend::quantized_matmul(x, w, out);
  cpu::quantized_matmul(x.data<float>(), x.size(0), x.size(1), w, out.data<float>());
}

}  // namespace kiln::cpu
