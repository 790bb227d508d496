#pragma once
// Branch-free float32 exp, tanh and erfc that GCC can vectorize inside KILN_MULTIVERSION
// loops (std::exp, std::tanh and std::erf are library calls, one element at a time).
// Doubles keep the library functions. All are accurate to a few float ulps:
//   exp:  x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-6 Taylor polynomial
//         (truncation error r^7/7! < 2e-7 relative); 2^n built in the exponent bits.
//         No float-to-int conversion (undefined for NaN), and exact up to FLT_MAX.
//   erfc: the rational-exponential fit of Numerical Recipes §6.2 (erfcc), fractional
//         error below 1.2e-7 for every x >= 0.
//   tanh: within 4.4 ulps of the correctly rounded value for every float (checked
//         against the double tanh over all floats in [0, 12]; odd, so the negatives
//         alike), 1.35 against glibc's 24.6 ns an element on a Zen 3 core.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/multiversion.h"

namespace kiln::cpu::vec {

KILN_INLINE_IN_CLONES float exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that n·kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5·2^23: t = v + kRound holds round(v) in its low bits
  // Below -86.99 (n <= -126) exp(x) < 1.7e-38 is flushed to 0; above ln(FLT_MAX) it is inf.
  const bool underflow = x < -86.98936f;
  const bool overflow = x > 88.72283f;
  float xc = underflow ? -86.0f : overflow ? 88.0f : x;
  // n = round(xc·log2 e) without a float-to-int conversion, which is undefined behaviour
  // for NaN (a NaN x runs through as bits; the result is x itself then).
  const float t = xc * kLog2e + kRound;
  const float n = t - kRound;
  float r = xc - n * kLn2Hi - n * kLn2Lo;
  // 2·exp(r) (each coefficient doubled) times 2^(n-1): n reaches 128 for x in
  // (88.38, 88.72], where exp(x) is still a float but 2^128 is not.
  float p = 2.0f + r * (2.0f + r * (1.0f + r * (1.0f / 3 + r * (1.0f / 12 + r * (1.0f / 60 + r * (1.0f / 360))))));
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  const uint32_t bits = (tb - 0x4B400000u + 126u) << 23;  // t's bits are 0x4B400000 + n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = underflow ? 0.0f : y;
  y = overflow ? INFINITY : y;
  return x != x ? x : y;  // NaN stays NaN
}
inline double exp(double x) { return std::exp(x); }

// tanh for float32, odd in x; NaN stays NaN. Below |x| = 0.5 its Taylor series to x^17
// (the coefficients 2^2n (2^2n - 1) B_2n / (2n)!; the first term left out is below 1e-9
// of the value there); above, (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.37, so that
// 1 - e cancels nothing; from |x| = 9.01 the value rounds to 1.
KILN_INLINE_IN_CLONES float tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = 6404582.0f / 10854718875.0f;
  p = p * z - 929569.0f / 638512875.0f;
  p = p * z + 21844.0f / 6081075.0f;
  p = p * z - 1382.0f / 155925.0f;
  p = p * z + 62.0f / 2835.0f;
  p = p * z - 17.0f / 315.0f;
  p = p * z + 2.0f / 15.0f;
  p = p * z - 1.0f / 3.0f;
  const float small = a + a * z * p;
  const float e = exp(-2.0f * (a < 9.01f ? a : 9.01f));
  const float large = (1.0f - e) / (1.0f + e);
  const float r = a < 0.5f ? small : large;
  return x != x ? x : std::copysign(r, x);
}
inline double tanh(double x) { return std::tanh(x); }

// erfc(z) for z >= 0.
KILN_INLINE_IN_CLONES float erfc_nonneg(float z) {
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
KILN_INLINE_IN_CLONES float normal_cdf(float x) {
  float e = erfc_nonneg(std::fabs(x) * 0.70710678118654752f);
  return x >= 0 ? 1.0f - 0.5f * e : 0.5f * e;
}
inline double normal_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }

}  // namespace kiln::cpu::vec
