#pragma once
// kiln::bfloat16: the 16-bit "brain" float, the top half of an IEEE float32 (sign, 8
// exponent bits, 7 mantissa bits), the element type of kBFloat16 tensors. It only
// stores: arithmetic widens to float (exactly) and the result is rounded back.
//
// float -> bfloat16 rounds to nearest, ties to even, as torch's c10::BFloat16: infinities
// stay, values past the largest bfloat16 become inf, subnormals are rounded like any
// other value (never flushed to zero, so not the AVX512_BF16 instruction, which flushes
// them), and a NaN stays a quiet NaN with its sign. double -> bfloat16 goes through
// float (two roundings), as torch converts a double.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

// The bits of f rounded to bfloat16.
KILN_HOST_DEVICE inline uint16_t bf16_bits_from_float(float f) {
#if defined(__CUDA_ARCH__)
  uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
#endif
  // A NaN's mantissa could round up into the exponent (an infinity): keep its top bits
  // and set the quiet bit instead.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7FFF rounds halfway cases up; the lowest kept bit turns that into to-even.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The float whose top half is `bits` (exact).
KILN_HOST_DEVICE inline float float_from_bf16_bits(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  KILN_HOST_DEVICE explicit bfloat16(float f) : bits(bf16_bits_from_float(f)) {}
  KILN_HOST_DEVICE explicit bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
  KILN_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 v;
    v.bits = b;
    return v;
  }
  // Widening is exact, so it is implicit (as c10::BFloat16's): comparisons and
  // arithmetic happen in float.
  KILN_HOST_DEVICE operator float() const { return float_from_bf16_bits(bits); }  // NOLINT
};

static_assert(sizeof(bfloat16) == 2, "bfloat16 is two bytes");

}  // namespace kiln
