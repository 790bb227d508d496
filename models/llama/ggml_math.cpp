#include "llama/ggml_math.h"

#include <cmath>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace kiln::llama::ggml {

namespace {

constexpr const char* kSwigluOp = "llama.ggml.swiglu";

inline void swiglu_loop(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + ggml::exp(0.0f - g[i])) * u[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_GGML_FMA __attribute__((target("avx2,fma")))
bool has_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
// The same loop compiled for AVX2+FMA: std::fma becomes the fused instruction (same bits
// as the library call) and the lanes vectorise.
KILN_GGML_FMA void swiglu_fma(const float* g, const float* u, float* y, int64_t n) { swiglu_loop(g, u, y, n); }
// F16C's conversion rounds to nearest even, as the portable one.
__attribute__((target("avx2,f16c"))) void to_half_f16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  if (i < n) quantize_row(GGMLType::F16, x + i, reinterpret_cast<uint8_t*>(y + i), n - i);
}
#else
bool has_fma() { return false; }
void swiglu_fma(const float*, const float*, float*, int64_t) {}
void to_half_f16c(const float*, uint16_t*, int64_t) {}
#endif

}  // namespace

RotaryTables rope_tables(int64_t from, int64_t T, int64_t head_dim, double base) {
  KILN_CHECK(from >= 0 && T >= 0 && head_dim > 0 && head_dim % 2 == 0, "llama.ggml.rope_tables",
             "positions [", from, ", ", from + T, ") and head_dim ", head_dim, " (positive, even) expected");
  const int64_t half = head_dim / 2;
  std::vector<float> c(static_cast<size_t>(T * half)), s(c.size());
  const float step = std::pow(static_cast<float>(base), -2.0f / static_cast<float>(head_dim));
  for (int64_t t = 0; t < T; ++t) {
    float theta = static_cast<float>(from + t);
    for (int64_t i = 0; i < half; ++i) {
      c[static_cast<size_t>(t * half + i)] = std::cos(theta);
      s[static_cast<size_t>(t * half + i)] = std::sin(theta);
      theta *= step;
    }
  }
  return {from_vector(c, {T, half}), from_vector(s, {T, half})};
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
  if (has_fma()) return swiglu_fma(g, u, y, n);
  swiglu_loop(g, u, y, n);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  KILN_CHECK(gate.defined() && up.defined() && gate.shape() == up.shape() && gate.dtype() == kFloat32 &&
                 up.dtype() == kFloat32 && gate.device() == kCPU && up.device() == kCPU,
             kSwigluOp, "gate and up must be float32 host tensors of one shape, got ",
             gate.defined() ? shape_str(gate.shape()) + " " + dtype_name(gate.dtype()) : "undefined", " and ",
             up.defined() ? shape_str(up.shape()) + " " + dtype_name(up.dtype()) : "undefined");
  const Tensor g = gate.contiguous(), u = up.contiguous();
  Tensor y = empty(gate.shape(), TensorOptions(kFloat32));
  const int64_t n = g.numel(), grain = 1 << 14;
  cpu::parallel_for(n, grain, [&](int64_t a, int64_t b) {
    swiglu(g.data<float>() + a, u.data<float>() + a, y.data<float>() + a, b - a);
  });
  return y;
}

void to_half(const float* x, uint16_t* y, int64_t n) {
  if (has_fma()) return to_half_f16c(x, y, n);
  quantize_row(GGMLType::F16, x, reinterpret_cast<uint8_t*>(y), n);
}

float from_half(uint16_t h) {
  float f;
  dequantize_row(GGMLType::F16, reinterpret_cast<const uint8_t*>(&h), &f, 1);
  return f;
}

}  // namespace kiln::llama::ggml
