#pragma once
// kPhiloxBatch consecutive Philox-4x32-10 blocks at once: the word generator under every
// float32 uniform, bernoulli and dropout fill (see philox_words.h for the stream).
#include <cstdint>

namespace kiln::cpu {

constexpr int kPhiloxBatch = 16;

// w (4·kPhiloxBatch) in element order: w[4b + k] = word k of philox4x32(seed, first + b).
void philox_batch(uint64_t seed, uint64_t first, uint32_t* w);

}  // namespace kiln::cpu
