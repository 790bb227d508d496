// Philox-4x32-10 for 32 blocks at a time, the same arithmetic as philox4x32 in
// core/generator.h. Dropout spends most of its time here (about 5% of a seed training
// step before this file had an AVX2 path, 9% of the small step with it), so x86-64 CPUs
// get hand-written kernels: AVX-512 (8 blocks per register) where the CPU has it, else
// AVX2 (4 per register); every other CPU gets the portable loop. tests/test_tensor.cpp
// checks every path the machine can run against the one-block reference.
#include "backend/cpu/philox_batch.h"

#include "core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KILN_PHILOX_AVX2 1
#endif

namespace kiln::cpu {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

// The portable path, in structure-of-arrays form. The words sit in 64-bit lanes with
// their upper halves zero so that GCC turns each 32x32->64 product into one vpmuludq
// lane; with uint32_t lanes it left the rounds scalar (measured 21 -> 11 ns per block).
void philox_batch_portable(uint64_t seed, uint64_t first, uint32_t* w) {
  constexpr uint64_t kLow = 0xffffffffu;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint64_t c0[kPhiloxBatch], c1[kPhiloxBatch], c2[kPhiloxBatch], c3[kPhiloxBatch];
  for (int b = 0; b < kPhiloxBatch; ++b) {
    const uint64_t counter = first + static_cast<uint64_t>(b);
    c0[b] = counter & kLow;
    c1[b] = counter >> 32;
    c2[b] = 0;
    c3[b] = 0;
  }
  for (int round = 0; round < 10; ++round) {
    for (int b = 0; b < kPhiloxBatch; ++b) {
      const uint64_t p0 = (c0[b] & kLow) * kMul0;
      const uint64_t p1 = (c2[b] & kLow) * kMul1;
      const uint64_t n0 = (p1 >> 32) ^ c1[b] ^ k0;
      const uint64_t n2 = (p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = p1 & kLow;
      c3[b] = p0 & kLow;
      c0[b] = n0;
      c2[b] = n2;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int b = 0; b < kPhiloxBatch; ++b) {
    w[4 * b] = static_cast<uint32_t>(c0[b]);
    w[4 * b + 1] = static_cast<uint32_t>(c1[b]);
    w[4 * b + 2] = static_cast<uint32_t>(c2[b]);
    w[4 * b + 3] = static_cast<uint32_t>(c3[b]);
  }
}

#ifdef KILN_PHILOX_AVX2
#define KILN_AVX2 __attribute__((target("avx2")))

// The words of 4 blocks, one block per 64-bit lane, each word in the lane's low half.
// vpmuludq reads only those low halves, so the high halves may hold anything: that
// saves masking them, and a round is 2 multiplies, 2 shifts and 4 xors.
struct Quad {
  __m256i c0, c1, c2, c3;
};

KILN_AVX2 inline Quad counters4(uint64_t first) {
  const __m256i counter = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(first)),
                                           _mm256_set_epi64x(3, 2, 1, 0));
  const __m256i zero = _mm256_setzero_si256();
  return {counter, _mm256_srli_epi64(counter, 32), zero, zero};
}

KILN_AVX2 inline void round4(Quad& s, __m256i m0, __m256i m1, __m256i k0, __m256i k1) {
  const __m256i p0 = _mm256_mul_epu32(s.c0, m0);  // (lo, hi) of kMul0 * c0 per lane
  const __m256i p1 = _mm256_mul_epu32(s.c2, m1);
  s.c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), s.c1), k0);
  s.c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), s.c3), k1);
  s.c1 = p1;
  s.c3 = p0;
}

// w (16 words) = the 4 blocks of s in element order: w[4b + k] = low half of ck's lane b.
KILN_AVX2 inline void store4(const Quad& s, uint32_t* w) {
  const __m256i c01 = _mm256_blend_epi32(s.c0, _mm256_slli_epi64(s.c1, 32), 0xAA);  // lane b: c0 c1
  const __m256i c23 = _mm256_blend_epi32(s.c2, _mm256_slli_epi64(s.c3, 32), 0xAA);  // lane b: c2 c3
  const __m256i even = _mm256_unpacklo_epi64(c01, c23);  // block 0 | block 2
  const __m256i odd = _mm256_unpackhi_epi64(c01, c23);   // block 1 | block 3
  auto* out = reinterpret_cast<__m256i*>(w);
  _mm256_storeu_si256(out, _mm256_permute2x128_si256(even, odd, 0x20));      // blocks 0, 1
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(even, odd, 0x31));  // blocks 2, 3
}

// Four independent quads, so that the multiplies of one fill the latency of another:
// 16 blocks, half a batch.
KILN_AVX2 void philox_16_avx2(uint64_t seed, uint64_t first, uint32_t* w) {
  const __m256i m0 = _mm256_set1_epi64x(kMul0), m1 = _mm256_set1_epi64x(kMul1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  // Named, not an array: GCC kept an array of quads in memory.
  Quad a = counters4(first), b = counters4(first + 4), c = counters4(first + 8), d = counters4(first + 12);
  for (int round = 0; round < 10; ++round) {
    const __m256i vk0 = _mm256_set1_epi64x(k0), vk1 = _mm256_set1_epi64x(k1);
    round4(a, m0, m1, vk0, vk1);
    round4(b, m0, m1, vk0, vk1);
    round4(c, m0, m1, vk0, vk1);
    round4(d, m0, m1, vk0, vk1);
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  store4(a, w);
  store4(b, w + 16);
  store4(c, w + 32);
  store4(d, w + 48);
}

KILN_AVX2 void philox_batch_avx2(uint64_t seed, uint64_t first, uint32_t* w) {
  static_assert(kPhiloxBatch == 32);
  philox_16_avx2(seed, first, w);
  philox_16_avx2(seed, first + 16, w + 64);
}

#define KILN_AVX512 __attribute__((target("avx512f")))

// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_epi32() placeholder is
// used uninitialized once they are inlined here (GCC bug 105593, fixed in GCC 13): a
// false positive that -Werror would make fatal.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// The words of 8 blocks, one block per 64-bit lane, as Quad.
struct Oct {
  __m512i c0, c1, c2, c3;
};

KILN_AVX512 inline Oct counters8(uint64_t first) {
  const __m512i counter = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(first)),
                                           _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  const __m512i zero = _mm512_setzero_si512();
  return {counter, _mm512_srli_epi64(counter, 32), zero, zero};
}

KILN_AVX512 inline void round8(Oct& s, __m512i m0, __m512i m1, __m512i k0, __m512i k1) {
  const __m512i p0 = _mm512_mul_epu32(s.c0, m0);  // (lo, hi) of kMul0 * c0 per lane
  const __m512i p1 = _mm512_mul_epu32(s.c2, m1);
  // xor of three: 0x96 is a ^ b ^ c as a ternary-logic truth table.
  s.c0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), s.c1, k0, 0x96);
  s.c2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), s.c3, k1, 0x96);
  s.c1 = p1;
  s.c3 = p0;
}

// w (32 words) = the 8 blocks of s in element order: w[4b + k] = low half of ck's lane b.
KILN_AVX512 inline void store8(const Oct& s, uint32_t* w) {
  constexpr __mmask16 kOddWords = 0xAAAA;
  const __m512i c01 = _mm512_mask_blend_epi32(kOddWords, s.c0, _mm512_slli_epi64(s.c1, 32));  // lane b: c0 c1
  const __m512i c23 = _mm512_mask_blend_epi32(kOddWords, s.c2, _mm512_slli_epi64(s.c3, 32));  // lane b: c2 c3
  // 64-bit indices into (c01, c23): 0-7 c01's lanes, 8-15 c23's; block b is lanes b, 8 + b.
  const __m512i first4 = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);   // blocks 0, 1, 2, 3
  const __m512i last4 = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);  // blocks 4, 5, 6, 7
  _mm512_storeu_si512(w, _mm512_permutex2var_epi64(c01, first4, c23));
  _mm512_storeu_si512(w + 16, _mm512_permutex2var_epi64(c01, last4, c23));
}

// Four independent octs, as the AVX2 path's quads: one round's chain (multiply, shift,
// ternary xor) is ~7 cycles of latency, which two octs left mostly idle.
KILN_AVX512 void philox_batch_avx512(uint64_t seed, uint64_t first, uint32_t* w) {
  static_assert(kPhiloxBatch == 32);
  const __m512i m0 = _mm512_set1_epi64(kMul0), m1 = _mm512_set1_epi64(kMul1);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  Oct a = counters8(first), b = counters8(first + 8), c = counters8(first + 16), d = counters8(first + 24);
  for (int round = 0; round < 10; ++round) {
    const __m512i vk0 = _mm512_set1_epi64(k0), vk1 = _mm512_set1_epi64(k1);
    round8(a, m0, m1, vk0, vk1);
    round8(b, m0, m1, vk0, vk1);
    round8(c, m0, m1, vk0, vk1);
    round8(d, m0, m1, vk0, vk1);
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  store8(a, w);
  store8(b, w + 32);
  store8(c, w + 64);
  store8(d, w + 96);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

}  // namespace

bool philox_path_available(PhiloxPath path) {
  switch (path) {
    case PhiloxPath::kPortable: return true;
#ifdef KILN_PHILOX_AVX2
    case PhiloxPath::kAvx2: return has_avx2();
    case PhiloxPath::kAvx512: return has_avx512();
#else
    case PhiloxPath::kAvx2:
    case PhiloxPath::kAvx512: return false;
#endif
  }
  return false;
}

void philox_batch_with(PhiloxPath path, uint64_t seed, uint64_t first, uint32_t* w) {
  static constexpr const char* kNames[] = {"portable", "avx2", "avx512"};
  KILN_CHECK(philox_path_available(path), "philox_batch", "the ", kNames[static_cast<int>(path)],
             " path is not available on this CPU or build");
  switch (path) {
    case PhiloxPath::kPortable: return philox_batch_portable(seed, first, w);
#ifdef KILN_PHILOX_AVX2
    case PhiloxPath::kAvx2: return philox_batch_avx2(seed, first, w);
    case PhiloxPath::kAvx512: return philox_batch_avx512(seed, first, w);
#else
    default: break;
#endif
  }
}

void philox_batch(uint64_t seed, uint64_t first, uint32_t* w) {
#ifdef KILN_PHILOX_AVX2
  if (has_avx512()) return philox_batch_avx512(seed, first, w);
  if (has_avx2()) return philox_batch_avx2(seed, first, w);
#endif
  philox_batch_portable(seed, first, w);
}

}  // namespace kiln::cpu
