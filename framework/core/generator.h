#pragma once
// A seedable, counter-based random generator (Philox-4x32-10). Each random element is a
// pure function of (seed, offset + element index), so results do not depend on how many
// threads fill a tensor, and a generator's whole state is two integers.
#include <array>
#include <cstdint>
#include <mutex>

// Functions the CUDA kernels share with the CPU (the random streams must be the same
// numbers on both): __host__ __device__ when nvcc compiles, plain inline otherwise.
#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // number of 128-bit blocks handed out so far
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x853c49e6748fea9bULL) : state_{seed, 0} {}

  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  GeneratorState get_state() const;
  void set_state(const GeneratorState& s);

  // Reserves `blocks` consecutive 128-bit blocks; returns the first block's index.
  uint64_t reserve(uint64_t blocks);

 private:
  mutable std::mutex mu_;
  GeneratorState state_;
};

// The process-wide generator that factories, dropout and init use by default.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Philox-4x32 with 10 rounds: four 32-bit random words for (key, counter).
// Inline so that fill loops can vectorize it.
KILN_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter) {
  // Constants of the Philox-4x32 round function (Salmon et al., SC'11).
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = static_cast<uint32_t>(p1);
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

// A uniform float in [0, 1) from a 32-bit word; a double in [0, 1) from two words.
KILN_HOST_DEVICE inline float uniform_float(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
KILN_HOST_DEVICE inline double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);  // 53 random bits
  return static_cast<double>(bits & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace kiln
