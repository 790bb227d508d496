// Written as plain integer loops that g++ vectorizes in each clone (AVX-512: 16 floats a
// step). Where the CPU has AVX512_BF16, float_to_bf16 uses its conversion instruction
// (VCVTNEPS2BF16: the same round to nearest even and quiet NaN; 1.6-1.8x the loop's speed
// on data in cache, 1.2-1.3x from memory), except that it reads subnormal inputs as zero
// where torch keeps them: a vector with such a lane takes the loop's arithmetic instead.
#include "backend/cpu/bfloat16_convert.h"

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define KILN_BF16_INSTRUCTION 1
#endif

#include "backend/cpu/multiversion.h"

namespace kiln::cpu {
namespace {

KILN_MULTIVERSION void float_to_bf16_loop(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    // core/bfloat16.h's bf16_bits_from_float, branch-free so that it vectorizes.
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
}

#ifdef KILN_BF16_INSTRUCTION

// AVX512_BF16 (CPUID leaf 7, sub-leaf 1, EAX bit 5) with the AVX-512 state enabled by the
// OS (which __builtin_cpu_supports checks for avx512f).
bool has_bf16_instruction() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl"))
      return false;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a >> 5 & 1u) != 0;
  }();
  return has;
}

// dst (n) = src (n) rounded, 16 at a time; n a multiple of 16.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void float_to_bf16_instruction(const float* src,
                                                                                                  uint16_t* dst,
                                                                                                  int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7F800000), magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(v));
    // A subnormal lane (exponent 0, magnitude not 0): these 16 again through the loop.
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 zero_exponent = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exponent), _mm512_setzero_si512());
    if (_mm512_mask_cmpneq_epi32_mask(zero_exponent, _mm512_and_si512(u, magnitude), _mm512_setzero_si512()))
      float_to_bf16_loop(src + i, dst + i, 16);
  }
}

#endif

}  // namespace

void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
#ifdef KILN_BF16_INSTRUCTION
  if (n >= 16 && has_bf16_instruction()) {
    const int64_t whole = n - n % 16;
    float_to_bf16_instruction(src, dst, whole);
    src += whole;
    dst += whole;
    n -= whole;
  }
#endif
  float_to_bf16_loop(src, dst, n);
}

KILN_MULTIVERSION void bf16_to_float(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

}  // namespace kiln::cpu
