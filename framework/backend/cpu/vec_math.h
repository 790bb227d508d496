#pragma once
// Branch-free float32 exp, tanh, erfc, erf, log, log1p and expm1 that GCC can vectorize
// inside KILN_MULTIVERSION loops (the <cmath> functions are library calls, one element at
// a time). Doubles keep the library functions. All are accurate to a few float ulps:
//   exp:  x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-6 Taylor polynomial
//         (truncation error r^7/7! < 2e-7 relative); 2^n built in the exponent bits.
//         No float-to-int conversion (undefined for NaN), and exact up to FLT_MAX.
//   erfc: the rational-exponential fit of Numerical Recipes §6.2 (erfcc), fractional
//         error below 1.2e-7 for every x >= 0.
//   erf:  its Taylor series below |x| = 0.5, 1 - erfc above.
//   tanh: within 4.4 ulps of the correctly rounded value for every float (checked
//         against the double tanh over all floats in [0, 12]; odd, so the negatives
//         alike), 1.35 against glibc's 24.6 ns an element on a Zen 3 core.
//   log:  x = 2^k·m with m in [√2/2, √2); log m = 2·atanh(s), s = (m-1)/(m+1), as
//         f - f²/2 + s·(f²/2 + R(s²)) with R the degree-4 minimax fit of fdlibm's logf.
//   log1p: log(u)·x/(u-1) with u = 1 + x rounded (Goldberg's correction of u's rounding).
//   expm1: its Taylor series to x^13 on [-1, 1] (the first term left out below 2e-10
//         relative), exp(x) - 1 outside, where the subtraction loses under one bit.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cpu/multiversion.h"

namespace kiln::cpu::vec {

// c[0] z^(N-1) + c[1] z^(N-2) + ... + c[N-1] by Horner's rule, highest power first: the
// same operations, in the same order, as the chain written out by hand.
template <size_t N>
KILN_INLINE_IN_CLONES float horner(float z, const float (&c)[N]) {
  float p = c[0];
  for (size_t i = 1; i < N; ++i) p = p * z + c[i];
  return p;
}

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
  static constexpr float kSeries[] = {6404582.0f / 10854718875.0f, -929569.0f / 638512875.0f,
                                      21844.0f / 6081075.0f,        -1382.0f / 155925.0f,
                                      62.0f / 2835.0f,              -17.0f / 315.0f,
                                      2.0f / 15.0f,                 -1.0f / 3.0f};
  const float p = horner(z, kSeries);
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

// erf for float32, odd in x; NaN stays NaN.
KILN_INLINE_IN_CLONES float erf(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  // 2/√π · Σ (-1)^n x^(2n+1) / (n! (2n+1)), n <= 7: at |x| = 0.5 the next term is 1e-11 of
  // the value.
  static constexpr float kSeries[] = {-1.0f / 75600, 1.0f / 9360, -1.0f / 1320, 1.0f / 216,  // 75600 = 7! · 15
                                      -1.0f / 42,    1.0f / 10,   -1.0f / 3,    1.0f};
  const float p = horner(z, kSeries);
  const float small = 1.12837916709551257f * a * p;
  const float large = 1.0f - erfc_nonneg(a);
  const float r = a < 0.5f ? small : large;
  return x != x ? x : std::copysign(r, x);
}
inline double erf(double x) { return std::erf(x); }

// log for float32: -inf at ±0, NaN below 0 and at NaN, inf at inf; denormals exact.
KILN_INLINE_IN_CLONES float log(float x) {
  constexpr float kLn2Hi = 6.9313812256e-01f;  // ln 2 split so that k·kLn2Hi is exact
  constexpr float kLn2Lo = 9.0580006145e-06f;
  const bool denormal = x < 1.17549435e-38f;  // below FLT_MIN: scaled by 2^25 first
  const float xs = denormal ? x * 33554432.0f : x;
  uint32_t bits;
  std::memcpy(&bits, &xs, sizeof bits);
  // m in [√2/2, √2): the mantissa's bits, moved down one octave when above √2.
  const uint32_t mant = bits & 0x007fffffu;
  const uint32_t above = mant > 0x3504f3u ? 1u : 0u;  // 0x3504f3: √2's mantissa bits
  const uint32_t mbits = mant | (above ? 0x3f000000u : 0x3f800000u);
  float m;
  std::memcpy(&m, &mbits, sizeof m);
  const float k = static_cast<float>(static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + static_cast<int32_t>(above)) -
                  (denormal ? 25.0f : 0.0f);
  const float f = m - 1.0f;
  const float s = f / (2.0f + f);
  const float z = s * s, w = z * z;
  const float r = z * (0.66666662693f + w * 0.28498786688f) + w * (0.40000972152f + w * 0.24279078841f);
  const float hfsq = 0.5f * f * f;
  float y = k * kLn2Hi - ((hfsq - (s * (hfsq + r) + k * kLn2Lo)) - f);
  y = x == 0.0f ? -INFINITY : y;
  y = x == INFINITY ? INFINITY : y;
  return x < 0.0f || x != x ? NAN : y;
}
inline double log(double x) { return std::log(x); }

// log(1 + x) for float32: x itself where 1 + x rounds to 1, -inf at -1, NaN below it.
KILN_INLINE_IN_CLONES float log1p(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  float y = log(u) * (x / (d == 0.0f ? 1.0f : d));
  y = d == 0.0f ? x : y;
  return x == INFINITY ? INFINITY : y;  // (u - 1 is inf there, and x / inf·log NaN)
}
inline double log1p(double x) { return std::log1p(x); }

// exp(x) - 1 for float32: -1 below -87, inf above ln(FLT_MAX), NaN stays NaN.
KILN_INLINE_IN_CLONES float expm1(float x) {
  // 1/13!, 1/12!, ..., 1/2!
  static constexpr float kSeries[] = {1.0f / 6227020800.0f, 1.0f / 479001600.0f, 1.0f / 39916800.0f,
                                      1.0f / 3628800.0f,    1.0f / 362880.0f,    1.0f / 40320.0f,
                                      1.0f / 5040.0f,       1.0f / 720.0f,       1.0f / 120.0f,
                                      1.0f / 24.0f,         1.0f / 6.0f,         0.5f};
  const float p = horner(x, kSeries);
  const float small = x == 0.0f ? x : x + x * x * p;  // -0 stays -0
  const float large = exp(x) - 1.0f;
  return std::fabs(x) <= 1.0f ? small : large;
}
inline double expm1(double x) { return std::expm1(x); }

}  // namespace kiln::cpu::vec
