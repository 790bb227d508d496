// Written as plain integer loops that g++ vectorizes in each clone (AVX-512: 16 floats a
// step), not with the AVX512_BF16 conversion instruction, which flushes subnormals to
// zero where torch keeps them.
#include "backend/cpu/bfloat16_convert.h"

#include <cstring>

#include "backend/cpu/multiversion.h"

namespace kiln::cpu {

KILN_MULTIVERSION void float_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, sizeof u);
    // core/bfloat16.h's bf16_bits_from_float, branch-free so that it vectorizes.
    const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x0040u;
    dst[i] = static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
}

KILN_MULTIVERSION void bf16_to_float(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &u, sizeof u);
  }
}

}  // namespace kiln::cpu
