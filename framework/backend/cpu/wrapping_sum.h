#pragma once
// a + b and a * b for the kernels that sum into a tensor (scatter_add, index_add, cumsum):
// int64 wraps around on overflow as torch's does (two's complement) instead of being
// undefined behaviour, and bool adds as a logical or.
#include <cstdint>
#include <type_traits>

namespace kiln::cpu {

template <class T>
inline T wrapping_add(T a, T b) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return a + b;
  }
}

template <class T>
inline T wrapping_mul(T a, T b) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else {
    return a * b;
  }
}

}  // namespace kiln::cpu
