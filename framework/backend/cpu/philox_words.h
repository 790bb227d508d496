#pragma once
// The Philox word stream that bernoulli, float32 uniform and dropout share: element i of
// a fill starting at `block` uses word i % 4 of Philox block (block + i / 4).
#include <cstdint>

namespace kiln::cpu {

// out (count) = the words of elements [first, first + count) of the stream at (seed, block).
void philox_words(uint64_t seed, uint64_t block, int64_t first, int64_t count, uint32_t* out);

// A word w is a success of bernoulli(p) when w < bernoulli_threshold(p) (to 2^-32).
inline uint64_t bernoulli_threshold(double p) {
  const double scaled = p * 4294967296.0;
  // !(scaled > 0) also catches NaN, which the cast would make undefined.
  return scaled >= 4294967296.0 ? uint64_t{1} << 32 : !(scaled > 0) ? 0 : static_cast<uint64_t>(scaled);
}

}  // namespace kiln::cpu
