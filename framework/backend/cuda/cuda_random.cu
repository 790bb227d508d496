// Random fills, the same numbers as the CPU backend (cpu_random.cpp) for the same
// (seed, block): the same Philox (core/generator.h, compiled for the device too) and
// the same element-to-counter rule. Element i uses block (block + i), or, for the fills
// that need one 32-bit word per element (float32 uniform, bernoulli), word i % 4 of
// block (block + i / 4). The arithmetic on the words is rounded as the CPU rounds it
// (no fused multiply-add), so uniform and bernoulli match bit for bit; normal goes
// through the device's log and cos, which may differ from glibc's in the last bit.
//   out (n) contiguous, any dtype.
#include <cmath>

#include "backend/cpu/philox_words.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

enum class Fill : uint8_t { Uniform, Normal, Randint };
enum class WordFill : uint8_t { UniformFloat, Bernoulli };

struct FillParams {
  double a = 0, b = 0;        // uniform: lo, hi; normal: mean, std
  int64_t lo = 0, span = 1;   // randint: lo, hi - lo
};

// out (n): element i from Philox block (block + i).
template <class T>
__global__ void fill_blocks_kernel(T* out, int64_t n, uint64_t seed, uint64_t block, Fill kind, FillParams p) {
  constexpr double kTwoPi = 6.28318530717958647692;
  KILN_GRID_STRIDE_LOOP(i, n) {
    const std::array<uint32_t, 4> w = philox4x32(seed, block + static_cast<uint64_t>(i));
    switch (kind) {
      case Fill::Uniform: {
        const double u = uniform_double(w[0], w[1]);
        out[i] = static_cast<T>(add_rn(p.a, mul_rn(p.b - p.a, u)));
        break;
      }
      case Fill::Normal: {
        const double u1 = 1.0 - uniform_double(w[0], w[1]);  // (0, 1]: log is finite
        const double u2 = uniform_double(w[2], w[3]);
        out[i] = static_cast<T>(add_rn(p.a, mul_rn(mul_rn(p.b, sqrt(-2.0 * log(u1))), cos(kTwoPi * u2))));
        break;
      }
      case Fill::Randint: {
        const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
        out[i] = static_cast<T>(p.lo + static_cast<int64_t>(r % static_cast<uint64_t>(p.span)));
        break;
      }
    }
  }
}

// out (n): elements 4j .. 4j+3 from the words of Philox block (block + j), one thread per block.
template <class T>
__global__ void fill_words_kernel(T* out, int64_t n, uint64_t seed, uint64_t block, WordFill kind, float lo,
                                  float span, uint64_t threshold) {
  KILN_GRID_STRIDE_LOOP(j, (n + 3) / 4) {
    const std::array<uint32_t, 4> w = philox4x32(seed, block + static_cast<uint64_t>(j));
    for (int k = 0; k < 4 && 4 * j + k < n; ++k) {
      if (kind == WordFill::UniformFloat) {
        out[4 * j + k] = static_cast<T>(add_rn(lo, mul_rn(span, uniform_float(w[k]))));
      } else {
        out[4 * j + k] = static_cast<T>(static_cast<uint64_t>(w[k]) < threshold ? 1 : 0);
      }
    }
  }
}

void fill_blocks(const Tensor& out, uint64_t seed, uint64_t block, Fill kind, FillParams p, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_blocks_kernel<T><<<grid_for(n), kThreads, 0, stream_of(out)>>>(static_cast<T*>(out.data_ptr()), n, seed,
                                                                        block, kind, p);
  });
  KILN_CUDA_LAUNCH_CHECK(op);
}

void fill_words(const Tensor& out, uint64_t seed, uint64_t block, WordFill kind, float lo, float span,
                uint64_t threshold, const char* op) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_words_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, stream_of(out)>>>(
        static_cast<T*>(out.data_ptr()), n, seed, block, kind, lo, span, threshold);
  });
  KILN_CUDA_LAUNCH_CHECK(op);
}

}  // namespace

void CudaBackend::uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) {
  if (out.dtype() == kFloat32) {
    return fill_words(out, seed, block, WordFill::UniformFloat, static_cast<float>(lo), static_cast<float>(hi - lo), 0,
                      "uniform");
  }
  FillParams p;
  p.a = lo;
  p.b = hi;
  fill_blocks(out, seed, block, Fill::Uniform, p, "uniform");
}

void CudaBackend::normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) {
  FillParams p;
  p.a = mean;
  p.b = std;
  fill_blocks(out, seed, block, Fill::Normal, p, "normal");
}

void CudaBackend::bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) {
  fill_words(out, seed, block, WordFill::Bernoulli, 0, 0, cpu::bernoulli_threshold(p), "bernoulli");
}

void CudaBackend::randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) {
  FillParams p;
  p.lo = lo;
  p.span = hi - lo;
  fill_blocks(out, seed, block, Fill::Randint, p, "randint");
}

}  // namespace kiln::cuda
