#pragma once
// IEEE half precision (binary16: sign, 5 exponent bits, 10 mantissa bits) as stored in
// safetensors' F16 and GGUF's F16 tensors and quantisation scales. Kiln has no float16
// dtype: halves are read into float32 (exactly) and written from it.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

// The float of half bits h (exact: subnormals, infinities and NaNs kept).
inline float float_from_half_bits(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400u)) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The half bits of f rounded to nearest, ties to even (numpy's and the F16C instruction's
// rounding): past 65504 by half an ulp or more gives infinity, below 2^-14 a subnormal,
// a NaN a quiet NaN.
inline uint16_t half_bits_from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65536, or inf
  if (ax < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, rounded to even
    float a;
    std::memcpy(&a, &ax, sizeof a);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t mant = ax & 0x7FFFFFu, rest = mant & 0x1FFFu;
  uint32_t h = (((ax >> 23) - 127 + 15) << 10) | (mant >> 13);
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

}  // namespace kiln
