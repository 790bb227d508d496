// The block layouts and reference (de)quantisers of quant_blocks.h. Each quantiser
// computes in float32 in the order gguf-py's does (numpy float32 arithmetic), so the
// bytes are the same as gguf.quants.quantize writes.
#include "backend/quant_blocks.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/float16.h"

// No fused multiply-add: numpy rounds x · id and then the sum (and d · q, then + m), and
// a contracted a · b + c would round once and give other bits.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace kiln {
namespace {

constexpr int64_t kBlock = 32;

constexpr GGMLTypeInfo kTypes[] = {
    {GGMLType::F32, "f32", 1, 4},        {GGMLType::F16, "f16", 1, 2},   {GGMLType::Q4_0, "q4_0", kBlock, 18},
    {GGMLType::Q4_1, "q4_1", kBlock, 20}, {GGMLType::Q8_0, "q8_0", kBlock, 34}, {GGMLType::BF16, "bf16", 1, 2},
};

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

// gguf-py's np_roundf, halves away from zero: floor(|v|) + floor(2 (|v| - floor(|v|))),
// each step exact in float32 (adding 0.5 first would round 0.49999997 up).
float round_half_away(float v) {
  const float a = std::fabs(v), f = std::floor(a);
  const float r = f + std::floor(2.0f * (a - f));
  return v < 0 ? -r : r;
}

// One 32-value block each: b (block bytes) <-> x (32).
void dequantize_q8_0(const uint8_t* b, float* x) {
  const float d = float_from_half_bits(load_u16(b));
  for (int j = 0; j < kBlock; ++j) x[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequantize_q4_0(const uint8_t* b, float* x) {
  const float d = float_from_half_bits(load_u16(b));
  for (int j = 0; j < kBlock / 2; ++j) {
    x[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    x[j + kBlock / 2] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void dequantize_q4_1(const uint8_t* b, float* x) {
  const float d = float_from_half_bits(load_u16(b)), m = float_from_half_bits(load_u16(b + 2));
  for (int j = 0; j < kBlock / 2; ++j) {
    x[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
    x[j + kBlock / 2] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

// d = max|x| / 127, q = round(x / d) (halves away from zero).
void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, id = d == 0 ? 0.0f : 1.0f / d;
  store_u16(b, half_bits_from_float(d));
  for (int j = 0; j < kBlock; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_half_away(x[j] * id)));
}

// Four bits q in [0, 15] from v = x · id + offset, truncated (v >= 0 here but for NaN).
uint8_t nibble(float v) {
  const float t = std::trunc(v);
  return t > 15.0f ? 15 : t >= 0.0f ? static_cast<uint8_t>(t) : 0;
}

// max = the value of largest magnitude (the first such), d = max / -8,
// q = trunc(x / d + 8.5) clipped to [0, 15].
void quantize_q4_0(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f, id = d == 0 ? 0.0f : 1.0f / d;
  store_u16(b, half_bits_from_float(d));
  for (int j = 0; j < kBlock / 2; ++j) {
    const uint8_t lo = nibble(x[j] * id + 8.5f), hi = nibble(x[j + kBlock / 2] * id + 8.5f);
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// d = (max - min) / 15, m = min, q = trunc((x - min) / d + 0.5) clipped to [0, 15].
void quantize_q4_1(const float* x, uint8_t* b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < kBlock; ++j) {
    min = std::fmin(min, x[j]);
    max = std::fmax(max, x[j]);
  }
  const float d = (max - min) / 15.0f, id = d == 0 ? 0.0f : 1.0f / d;
  store_u16(b, half_bits_from_float(d));
  store_u16(b + 2, half_bits_from_float(min));
  for (int j = 0; j < kBlock / 2; ++j) {
    const uint8_t lo = nibble((x[j] - min) * id + 0.5f), hi = nibble((x[j + kBlock / 2] - min) * id + 0.5f);
    b[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void check_row(const char* op, GGMLType type, int64_t n) {
  const GGMLTypeInfo& info = ggml_type_info(type);
  KILN_CHECK(n >= 0 && n % info.block_values == 0, op, info.name, " stores values in blocks of ", info.block_values,
             ", got a row of ", n);
}

}  // namespace

const GGMLTypeInfo* ggml_type_info(uint32_t id) {
  for (const GGMLTypeInfo& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const GGMLTypeInfo& ggml_type_info(GGMLType type) { return *ggml_type_info(static_cast<uint32_t>(type)); }

const char* ggml_type_name(uint32_t id) {
  // ggml's type ids 0 .. 39 (ggml.h), gaps where types were removed.
  static const char* const kNames[] = {
      "f32",  "f16",  "q4_0",    "q4_1",    nullptr, nullptr, "q5_0",   "q5_1", "q8_0", "q8_1",
      "q2_k", "q3_k", "q4_k",    "q5_k",    "q6_k",  "q8_k",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
      "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",    "i16",   "i32",    "i64",  "f64",  "iq1_m",
      "bf16", nullptr, nullptr, nullptr, "tq1_0", "tq2_0", nullptr, nullptr, nullptr, "mxfp4"};
  static thread_local char unknown[24];
  if (id < sizeof kNames / sizeof kNames[0] && kNames[id]) return kNames[id];
  std::snprintf(unknown, sizeof unknown, "type %u", id);
  return unknown;
}

int64_t QuantizedMatrix::row_bytes() const {
  const GGMLTypeInfo& info = ggml_type_info(type);
  return cols / info.block_values * info.block_bytes;
}

void dequantize_row(GGMLType type, const uint8_t* data, float* x, int64_t n) {
  check_row("dequantize", type, n);
  switch (type) {
    case GGMLType::F32: std::memcpy(x, data, static_cast<size_t>(n) * 4); return;
    case GGMLType::F16:
      for (int64_t i = 0; i < n; ++i) x[i] = float_from_half_bits(load_u16(data + 2 * i));
      return;
    case GGMLType::BF16:
      for (int64_t i = 0; i < n; ++i) x[i] = float_from_bf16_bits(load_u16(data + 2 * i));
      return;
    case GGMLType::Q8_0:
      for (int64_t k = 0; k < n / kBlock; ++k) dequantize_q8_0(data + 34 * k, x + kBlock * k);
      return;
    case GGMLType::Q4_0:
      for (int64_t k = 0; k < n / kBlock; ++k) dequantize_q4_0(data + 18 * k, x + kBlock * k);
      return;
    case GGMLType::Q4_1:
      for (int64_t k = 0; k < n / kBlock; ++k) dequantize_q4_1(data + 20 * k, x + kBlock * k);
      return;
  }
}

void quantize_row(GGMLType type, const float* x, uint8_t* data, int64_t n) {
  check_row("quantize", type, n);
  switch (type) {
    case GGMLType::F32: std::memcpy(data, x, static_cast<size_t>(n) * 4); return;
    case GGMLType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(data + 2 * i, half_bits_from_float(x[i]));
      return;
    case GGMLType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(data + 2 * i, bf16_bits_from_float(x[i]));
      return;
    case GGMLType::Q8_0:
      for (int64_t k = 0; k < n / kBlock; ++k) quantize_q8_0(x + kBlock * k, data + 34 * k);
      return;
    case GGMLType::Q4_0:
      for (int64_t k = 0; k < n / kBlock; ++k) quantize_q4_0(x + kBlock * k, data + 18 * k);
      return;
    case GGMLType::Q4_1:
      for (int64_t k = 0; k < n / kBlock; ++k) quantize_q4_1(x + kBlock * k, data + 20 * k);
      return;
  }
}

}  // namespace kiln
