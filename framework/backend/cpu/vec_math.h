#pragma once
// Branch-free float32 exp and erfc that GCC can vectorize inside KILN_MULTIVERSION
// loops (std::exp and std::erf are library calls, one element at a time). Doubles keep
// the library functions. Both are accurate to a few float ulps:
//   exp:  x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-6 Taylor polynomial
//         (truncation error r^7/7! < 2e-7 relative); 2^n built in the exponent bits.
//   erfc: the rational-exponential fit of Numerical Recipes §6.2 (erfcc), fractional
//         error below 1.2e-7 for every x >= 0.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln::cpu::vec {

inline float exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that n·kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  const bool underflow = x < -87.33654f;  // exp(x) below the smallest normal float: 0
  const bool overflow = x > 88.72283f;
  // NaN fails both range tests and is replaced too (by -87), so the int cast of n below
  // never sees a NaN (undefined behaviour); the result is x itself then. A select, like
  // the clamps: no cost in the vectorized loop.
  const bool in_range = x >= -87.33654f && x <= 88.72283f;
  float xc = in_range ? x : overflow ? 88.0f : -87.0f;
  float n = std::floor(xc * kLog2e + 0.5f);
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  // n is 128 for x in (88.38, 88.72], where exp(x) is still a float (2.7e38 at 88.5) but
  // 2^128 is not: the scale is then 2^127 and the product doubled.
  const bool top = n > 127.0f;
  int32_t bits = (static_cast<int32_t>(top ? 127.0f : n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = top ? y * 2.0f : y;
  y = underflow ? 0.0f : y;
  y = overflow ? INFINITY : y;
  return x != x ? x : y;  // NaN stays NaN
}
inline double exp(double x) { return std::exp(x); }

// erfc(z) for z >= 0.
inline float erfc_nonneg(float z) {
  float t = 1.0f / (1.0f + 0.5f * z);
  float poly =
      -1.26551223f +
      t * (1.00002368f +
           t * (0.37409196f +
                t * (0.09678418f +
                     t * (-0.18628806f +
                          t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
  return t * exp(-z * z + poly);
}

// Φ(x) = P(N(0,1) <= x) = erfc(-x/√2) / 2, accurate in both tails.
inline float normal_cdf(float x) {
  float e = erfc_nonneg(std::fabs(x) * 0.70710678118654752f);
  return x >= 0 ? 1.0f - 0.5f * e : 0.5f * e;
}
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

}  // namespace kiln::cpu::vec
