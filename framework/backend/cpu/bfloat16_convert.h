#pragma once
// The bulk float32 <-> bfloat16 loops of the copy kernel (autocast converts whole weight
// matrices every step, so they must run near memory bandwidth). Rounding as
// core/bfloat16.h: to nearest even, subnormals kept, NaN quiet.
#include <cstdint>

namespace kiln::cpu {

// dst (n) = src (n) rounded to bfloat16 bits.
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);
// dst (n) = src (n) widened (exact).
void bf16_to_float(const uint16_t* src, float* dst, int64_t n);

}  // namespace kiln::cpu
