// Philox-4x32-10 for 16 blocks at a time, the same arithmetic as philox4x32 in
// core/generator.h. Dropout spends most of its time here (about 5% of a seed training
// step before this file had an AVX2 path), so x86-64 CPUs with AVX2 get a hand-written
// kernel; every other CPU gets the portable loop. The test "float32 rand is the Philox
// word stream" checks whichever path the machine takes against the one-block reference.
#include "backend/cpu/philox_batch.h"

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

// Four independent quads, so that the multiplies of one fill the latency of another.
KILN_AVX2 void philox_batch_avx2(uint64_t seed, uint64_t first, uint32_t* w) {
  static_assert(kPhiloxBatch == 16);
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

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

void philox_batch(uint64_t seed, uint64_t first, uint32_t* w) {
#ifdef KILN_PHILOX_AVX2
  if (has_avx2()) return philox_batch_avx2(seed, first, w);
#endif
  philox_batch_portable(seed, first, w);
}

}  // namespace kiln::cpu
