#pragma once
// y (M, N) = x (M, K) @ wᵀ for a weight w (N, K) kept in ggml's blocks (Q8_0, Q4_0,
// Q4_1), without dequantising w: each row of x is quantised to 8 bits per block of 32
// (as llama.cpp's Q8_0 / Q8_1: scale d = max|x| / 127 rounded to float16, q = x / d
// rounded to nearest even, and for Q4_1 also s = d · Σq), and each pair of blocks is
// dotted in integers, then scaled: Σ_blocks dw · dx · Σ qw qx (+ mw · sx for Q4_1, with
// Q4_0's q - 8). x and y float32 contiguous; parallel over w's rows.
#include <cstdint>

#include "../quant_blocks.h"

namespace kiln::cpu {

// The hand-written dot products: AVX-512 VNNI (vpdpbusd on 256-bit vectors), AVX2, or a
// portable loop; the best the CPU has unless a test asks for one.
enum class QuantDotPath { kBest, kPortable, kAvx2, kAvxVnni };
bool quant_dot_path_available(QuantDotPath path);
const char* quant_dot_path_name();  // the one kBest picks here: "avx512-vnni", "avx2" or "portable"

void quantized_matmul(const float* x, int64_t M, int64_t K, const QuantizedMatrix& w, float* y,
                      QuantDotPath path = QuantDotPath::kBest);

}  // namespace kiln::cpu
