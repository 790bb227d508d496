#pragma once
// kPhiloxBatch consecutive Philox-4x32-10 blocks at once: the word generator under every
// float32 uniform, bernoulli and dropout fill (see philox_words.h for the stream).
#include <cstdint>

namespace kiln::cpu {

// 32: four AVX-512 registers of 8 blocks each, enough independent work to hide the
// multiplies' latency (Xeon family 6 model 167, one core: 16 blocks ran at 0.385 ns per
// word, 32 at 0.194; the AVX2 path went from 0.715 to 0.36 by running two 16-block
// kernels back to back, which the compiler interleaves).
constexpr int kPhiloxBatch = 32;

// w (4·kPhiloxBatch) in element order: w[4b + k] = word k of philox4x32(seed, first + b).
// Runs the fastest path the CPU has.
void philox_batch(uint64_t seed, uint64_t first, uint32_t* w);

// The implementations, for tests that check each against the one-block reference.
enum class PhiloxPath { kPortable, kAvx2, kAvx512 };

// Whether this build and CPU can run `path` (the portable one always can).
bool philox_path_available(PhiloxPath path);

// philox_batch through `path`; throws kiln::Error naming "philox_batch" if it is not available.
void philox_batch_with(PhiloxPath path, uint64_t seed, uint64_t first, uint32_t* w);

}  // namespace kiln::cpu
