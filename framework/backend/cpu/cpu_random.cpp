// Random fills. Element i of a fill uses Philox block (block + i), so the numbers are
// the same whatever the thread count. out contiguous.
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

constexpr double kTwoPi = 6.28318530717958647692;

// f(i, words) -> T for each element i of out.
template <class F>
void fill_random(const Tensor& out, uint64_t seed, uint64_t block, F f) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    parallel_for(out.numel(), 4096, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) o[i] = static_cast<T>(f(philox4x32(seed, block + i)));
    });
  });
}

}  // namespace

void CpuBackend::uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) {
  if (out.dtype() == kFloat32) {
    float flo = static_cast<float>(lo), span = static_cast<float>(hi - lo);
    return fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) { return flo + span * uniform_float(w[0]); });
  }
  fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) { return lo + (hi - lo) * uniform_double(w[0], w[1]); });
}

// Box-Muller: two uniforms give one normal (the second of the pair is not used, so that
// element i depends on block i alone).
void CpuBackend::normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) {
  fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) {
    double u1 = 1.0 - uniform_double(w[0], w[1]);  // (0, 1]: log is finite
    double u2 = uniform_double(w[2], w[3]);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  });
}

void CpuBackend::bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) {
  fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) { return uniform_double(w[0], w[1]) < p ? 1 : 0; });
}

void CpuBackend::randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) {
  fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) {
    uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    return lo + static_cast<int64_t>(r % static_cast<uint64_t>(hi - lo));
  });
}

}  // namespace kiln::cpu
