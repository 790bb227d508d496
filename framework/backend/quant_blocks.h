#pragma once
// ggml's tensor types as GGUF files store them: plain F32, F16 and BF16, and the block
// quantisations Q8_0, Q4_0 and Q4_1 (32 values a block, one float16 scale each, Q4_1
// also a float16 minimum). The layouts and the reference (de)quantisers are ggml's
// (gguf-py's quants.py computes the same), so blocks written here load in llama.cpp and
// values read here are exactly the ones gguf.quants.dequantize gives.
//   Q8_0 (34 bytes): d, int8 q[32];                     x[j] = q[j] · d
//   Q4_0 (18 bytes): d, uint8 qs[16] (two 4-bit q each); x[j] = (lo(qs[j]) - 8) · d,
//                                                        x[j + 16] = (hi(qs[j]) - 8) · d
//   Q4_1 (20 bytes): d, m, uint8 qs[16];                 x[j] = lo(qs[j]) · d + m, …
//   Q5_0 (22), Q5_1 (24 bytes) per 32 values; Q4_K (144), Q5_K (176), Q6_K (210 bytes) per
//   256 values: see quant_blocks.cpp.
#include <cstdint>
#include <memory>

namespace kiln {

// Q5_0, Q5_1 and the K-quants (256 values a block in 8 or 16 sub-blocks), the types of
// llama.cpp's Q4_K_M and Q5_K_M files, are read and dequantised, not written.
enum class GGMLType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30
};

// Values per block and bytes per block (1 and the element size for the plain types).
struct GGMLTypeInfo {
  GGMLType type;
  const char* name;  // "q4_1", as ggml names it
  int64_t block_values;
  int64_t block_bytes;
};

// The type with ggml's id `id`, or nullptr when Kiln does not read it.
const GGMLTypeInfo* ggml_type_info(uint32_t id);
const GGMLTypeInfo& ggml_type_info(GGMLType type);
// ggml's name of any type id ("q5_k" for 13), "type <id>" for an unknown one.
const char* ggml_type_name(uint32_t id);

// A (rows, cols) matrix stored row by row in `type`'s blocks (cols a multiple of the
// block size), in host memory: a GGUF tensor where the mapped file has it, or blocks
// written by quantize_matrix (ops/quantized.h). `owner` keeps the bytes alive.
struct QuantizedMatrix {
  GGMLType type = GGMLType::Q8_0;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> owner;

  int64_t row_bytes() const;
  const uint8_t* row(int64_t r) const { return data + r * row_bytes(); }
};

// x (n) = the n values stored at `data` in `type` (n a multiple of its block size).
void dequantize_row(GGMLType type, const uint8_t* data, float* x, int64_t n);
// data = x (n) stored in `type`, quantised as ggml's reference quantisers do (n a
// multiple of the block size).
void quantize_row(GGMLType type, const float* x, uint8_t* data, int64_t n);

}  // namespace kiln
