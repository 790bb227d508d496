#pragma once
// The float32 arithmetic of llama.cpp's CPU backend (ggml) where a Llama block's own ops
// round differently from Kiln's: the rotary tables, exp and SwiGLU. A 4-bit GGUF model
// rounds every activation to 8 bits before each product with its weights, so a last-bit
// difference anywhere changes some of those roundings, and a few layers later the logits
// differ by as much as the quantisation itself (tenths of a logit). Computing these parts
// with ggml's formulas and operation order makes a quantized model's logits llama.cpp's
// to the bit (the matrix products and RMSNorm already match; f16_attention.h has the
// attention). Inference only: nothing here records a graph.
#include <bit>
#include <cmath>
#include <cstdint>

#include <kiln/kiln.h>

namespace kiln::llama::ggml {

// cos and sin (T, head_dim / 2) float32 of positions [from, from + T): the angle of pair i
// at position p is p · base^(-2i/head_dim), accumulated in float as ggml's rope cache does
// (theta = p, then theta *= powf(base, -2/head_dim) per pair; cosf, sinf).
RotaryTables rope_tables(int64_t from, int64_t T, int64_t head_dim, double base);

// exp(x) in float32 as ggml's vectorised exp computes it (within 2 ulp of the exact value;
// 0 below about -104, inf above about 88.7): exp(x) = 2^n · (1 + j(b)) with n = round(x /
// ln 2) found by the 1.5 · 2^23 shift, b = x - n ln 2 in two parts, j a degree-5
// polynomial. Constants and rounding steps are ggml's (each fma one rounding, as its
// vector code), so every lane gives its bits; where |n| > 126 the scale 2^n is built in
// two factors (0 or inf past |n| > 192). Inline and branch-free so that callers' loops
// vectorise.
inline float exp(float x) {
  const auto bits_of = [](float f) { return std::bit_cast<uint32_t>(f); };
  const auto float_of = [](uint32_t u) { return std::bit_cast<float>(u); };
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);
  const float n = z - shift;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits_of(z) << 23;
  const float k = float_of(e + bits_of(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  const float an = std::fabs(n);
  const uint32_t g = n <= 0 ? 0x82000000u : 0u;
  const float s1 = float_of(g + 0x7f000000u), s2 = float_of(e - g);
  const float wide = an > 192 ? s1 * s1 : std::fma(s2, j, s2) * s1;
  return an > 126 ? wide : std::fma(k, j, k);
}

// y = silu(g) · u (n), silu(g) = g / (1 + exp(-g)) with exp above, as ggml's SwiGLU.
void swiglu(const float* g, const float* u, float* y, int64_t n);
// gate, up (..., n) float32 on the host -> silu(gate) · up, no graph.
Tensor swiglu(const Tensor& gate, const Tensor& up);

// ggml's float16 of n values (rounded to nearest even), and one value back.
void to_half(const float* x, uint16_t* y, int64_t n);
float from_half(uint16_t h);

}  // namespace kiln::llama::ggml
