#pragma once
// Division by a run-time constant without a divide instruction, for the index
// arithmetic of the CUDA kernels (a 32-bit integer division is a ~20-instruction
// sequence on a GPU; this is a multiply-high, an add and a shift).
//
// For a divisor d in [1, 2^31) take s = ceil(log2 d) and
// m = floor(2^32 · (2^s − d) / d) + 1 (it fits 32 bits since 2^s − d < d); then for every
// n in [0, 2^31): n / d = (mulhi(n, m) + n) >> s, where mulhi is the high 32 bits of the
// 64-bit product (Granlund and Montgomery's round-up method; mulhi(n, m) ≤ n, so the sum
// stays below 2^32). tests/test_tensor.cpp checks it against '/' over divisors and
// dividends at the edges of that range. Header-only, host and device, so the test runs
// the kernels' code on the CPU.
#include <cstdint>

#if defined(__CUDACC__)
#define KILN_FAST_DIV_HD __host__ __device__
#else
#define KILN_FAST_DIV_HD
#endif

namespace kiln::cuda {

struct FastDiv {
  uint32_t divisor = 1, magic = 1, shift = 0;

  FastDiv() = default;
  // d in [1, 2^31).
  explicit FastDiv(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }

  // n / divisor, for n in [0, 2^31).
  KILN_FAST_DIV_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, magic);
#else
    const auto hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

}  // namespace kiln::cuda
