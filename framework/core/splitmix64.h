#pragma once
// SplitMix64 (Steele, Lea and Flood 2014): the next of a sequence of well-mixed 64-bit
// words from a counter, the same on every platform. Seeds and shuffles that must not
// depend on the standard library's engines use it.
#include <cstdint>

namespace kiln {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kiln
