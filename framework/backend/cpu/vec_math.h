#pragma once
// Branch-free float32 exp and erfc that GCC can vectorize inside KILN_MULTIVERSION
// loops (std::exp and std::erf are library calls, one element at a time). Doubles keep
// the library functions. Both are accurate to a few float ulps:
//   exp:  x = n·ln2 + r, |r| <= ln2/2; exp(r) by its degree-6 Taylor polynomial
//         (truncation error r^7/7! < 2e-7 relative); 2^n built in the exponent bits.
//         No float-to-int conversion (undefined for NaN), and exact up to FLT_MAX.
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
