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
constexpr int64_t kSuperBlock = 256;  // the K-quants'

constexpr GGMLTypeInfo kTypes[] = {
    {GGMLType::F32, "f32", 1, 4},        {GGMLType::F16, "f16", 1, 2},   {GGMLType::Q4_0, "q4_0", kBlock, 18},
    {GGMLType::Q4_1, "q4_1", kBlock, 20}, {GGMLType::Q8_0, "q8_0", kBlock, 34}, {GGMLType::BF16, "bf16", 1, 2},
    {GGMLType::Q5_0, "q5_0", kBlock, 22},   {GGMLType::Q5_1, "q5_1", kBlock, 24},
    {GGMLType::Q4_K, "q4_k", kSuperBlock, 144}, {GGMLType::Q5_K, "q5_k", kSuperBlock, 176},
    {GGMLType::Q6_K, "q6_k", kSuperBlock, 210},
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

// Q5_0 (22 bytes: d, uint32 qh, qs[16]) and Q5_1 (24: d, m, qh, qs): value j's low four
// bits as Q4's nibbles, its fifth bit j of qh; x = (q - 16) · d, or q · d + m.
void dequantize_q5(const uint8_t* b, float* x, bool with_min) {
  const float d = float_from_half_bits(load_u16(b)), m = with_min ? float_from_half_bits(load_u16(b + 2)) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, sizeof qh);
  const uint8_t* qs = p + 4;
  for (int j = 0; j < kBlock; ++j) {
    const int lo = j < kBlock / 2 ? qs[j] & 0x0F : qs[j - kBlock / 2] >> 4;
    const int q = lo | static_cast<int>(((qh >> j) & 1u) << 4);
    x[j] = with_min ? static_cast<float>(q) * d + m : static_cast<float>(q - 16) * d;
  }
}

// Q4_K and Q5_K's eight 6-bit scales and minimums of their 32-value sub-blocks, packed
// in 12 bytes: sub-block j < 4 in the low 6 bits of bytes j (scale) and j + 4 (minimum);
// j >= 4 in the nibbles of byte j + 4 with two more bits each from the top of bytes j - 4
// and j.
void k_scale_min(const uint8_t* s, int j, float* scale, float* min) {
  if (j < 4) {
    *scale = static_cast<float>(s[j] & 63);
    *min = static_cast<float>(s[j + 4] & 63);
  } else {
    *scale = static_cast<float>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *min = static_cast<float>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// One 256-value block of Q4_K (d, dmin, scales[12], qs[128]) or Q5_K (the same with
// qh[32] before qs): sub-block j's low four bits are the low (j even) or high nibbles of
// qs[32 (j / 2) ..], Q5_K's fifth bit j of qh[l]; x = d · scale · q - dmin · min.
void dequantize_k4(const uint8_t* b, float* x, bool fifth_bit) {
  const float d = float_from_half_bits(load_u16(b)), dmin = float_from_half_bits(load_u16(b + 2));
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (fifth_bit ? 48 : 16);
  for (int j = 0; j < 8; ++j) {
    float sc, m;
    k_scale_min(b + 4, j, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int high = fifth_bit ? ((qh[l] >> j) & 1) << 4 : 0;
      x[32 * j + l] = d1 * static_cast<float>(((qs[32 * (j / 2) + l] >> shift) & 0x0F) | high) - m1;
    }
  }
}

// One 256-value block: ql[128], qh[64], int8 scales[16], d; two halves of 128 values, each
// four runs of 32: run t's low 4 bits from ql[64 h + 32 (t % 2) ..] (low nibbles for t < 2),
// its top 2 from bits 2t of qh[32 h ..]; x = d · scale[i / 16] · (q - 32).
void dequantize_q6_k(const uint8_t* b, float* x) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = float_from_half_bits(load_u16(b + 208));
  for (int h = 0; h < 2; ++h) {
    for (int t = 0; t < 4; ++t) {
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[64 * h + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
        const int hi = (qh[32 * h + l] >> (2 * t)) & 3;
        const int i = 128 * h + 32 * t + l;
        x[i] = d * static_cast<float>(scales[i / 16]) * static_cast<float>((lo | (hi << 4)) - 32);
      }
    }
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

// One block of a block type: b (its bytes) -> x (its values).
void dequantize_block(GGMLType type, const uint8_t* b, float* x) {
  switch (type) {
    case GGMLType::Q8_0: return dequantize_q8_0(b, x);
    case GGMLType::Q4_0: return dequantize_q4_0(b, x);
    case GGMLType::Q4_1: return dequantize_q4_1(b, x);
    case GGMLType::Q5_0: return dequantize_q5(b, x, false);
    case GGMLType::Q5_1: return dequantize_q5(b, x, true);
    case GGMLType::Q4_K: return dequantize_k4(b, x, false);
    case GGMLType::Q5_K: return dequantize_k4(b, x, true);
    case GGMLType::Q6_K: return dequantize_q6_k(b, x);
    case GGMLType::F32:
    case GGMLType::F16:
    case GGMLType::BF16: break;  // element types: dequantize_row's loops
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
    default: {
      const GGMLTypeInfo& info = ggml_type_info(type);
      for (int64_t k = 0; k < n / info.block_values; ++k)
        dequantize_block(type, data + info.block_bytes * k, x + info.block_values * k);
    }
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
    case GGMLType::Q5_0:
    case GGMLType::Q5_1:
    case GGMLType::Q4_K:
    case GGMLType::Q5_K:
    case GGMLType::Q6_K:
      KILN_CHECK(false, "quantize", ggml_type_info(type).name,
                 " is read, not written: quantise to q8_0, q4_0 or q4_1 (or keep the file's blocks)");
  }
}

}  // namespace kiln
