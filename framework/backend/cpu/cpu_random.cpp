// Random fills. Element i of a fill uses Philox block (block + i), or for the fills that
// need one 32-bit word per element, word i % 4 of block (block + i / 4): either way the
// numbers are the same whatever the thread count. out contiguous.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/bfloat16_convert.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/philox_batch.h"
#include "backend/cpu/philox_words.h"

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

constexpr int kBatch = kPhiloxBatch;

// o[4j + k] = f(word k of Philox block (block + j)) for j in [j0, j1).
template <class T, class F>
void words_range(T* o, int64_t n, int64_t j0, int64_t j1, uint64_t seed, uint64_t block, F f) {
  alignas(32) uint32_t w[4 * kBatch];
  for (int64_t j = j0; j < j1; j += kBatch) {
    philox_batch(seed, block + static_cast<uint64_t>(j), w);
    const int64_t end = std::min<int64_t>(4 * std::min<int64_t>(j + kBatch, j1), n);  // elements
    for (int64_t e = 4 * j; e < end; ++e) o[e] = static_cast<T>(f(w[e - 4 * j]));
  }
}

// f(word) -> T for each element, four elements per Philox block: dropout masks and
// float32 uniforms are a quarter of the Philox work.
template <class F>
void fill_random_words(const Tensor& out, uint64_t seed, uint64_t block, F f) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const int64_t n = out.numel();
    parallel_for((n + 3) / 4, 1024, [&](int64_t j0, int64_t j1) { words_range<T>(o, n, j0, j1, seed, block, f); });
  });
}

// out (n) = x (n) * keep / (1 - p), keep from words [first, first + n) of the stream.
template <class T>
KILN_MULTIVERSION void dropout_range(const T* x, T* out, int64_t n, int64_t first, uint64_t seed, uint64_t block,
                                     uint64_t threshold, T scale) {
  constexpr int64_t kChunk = 4 * kBatch;
  uint32_t w[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    philox_words(seed, block, first + i, m, w);
    for (int64_t j = 0; j < m; ++j) out[i + j] = static_cast<uint64_t>(w[j]) < threshold ? x[i + j] * scale : T(0);
  }
}

// out (n) = relu(x) (n) * keep / (1 - p): relu then dropout in one pass, the same bits.
template <class T>
KILN_MULTIVERSION void relu_dropout_range(const T* x, T* out, int64_t n, int64_t first, uint64_t seed,
                                          uint64_t block, uint64_t threshold, T scale) {
  constexpr int64_t kChunk = 4 * kBatch;
  uint32_t w[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    philox_words(seed, block, first + i, m, w);
    for (int64_t j = 0; j < m; ++j) {
      const T v = x[i + j] < T(0) ? T(0) : x[i + j];  // relu's rule: NaN stays NaN
      out[i + j] = static_cast<uint64_t>(w[j]) < threshold ? v * scale : T(0);
    }
  }
}

// The same, and, when low is not null (float32 only), low (n) = out rounded to bfloat16
// bits (float_to_bf16's rounding) from each piece while it is in L1: the second pass over
// out that a copy would make.
template <class T>
void relu_dropout_round_range(const T* x, T* out, uint16_t* low, int64_t n, int64_t first, uint64_t seed,
                              uint64_t block, uint64_t threshold, T scale) {
  if constexpr (std::is_same_v<T, float>) {
    if (low) {
      constexpr int64_t kPiece = 16 * 4 * kBatch;  // 8 KB of out: whole Philox batches
      for (int64_t i = 0; i < n; i += kPiece) {
        const int64_t m = std::min(kPiece, n - i);
        relu_dropout_range<float>(x + i, out + i, m, first + i, seed, block, threshold, scale);
        float_to_bf16(out + i, low + i, m);
      }
      return;
    }
  }
  relu_dropout_range<T>(x, out, n, first, seed, block, threshold, scale);
}

// gx (n) = g (n) · (y > 0) · scale, as ReluBackward and then the scale (0 · scale is 0).
template <class T>
KILN_MULTIVERSION void relu_dropout_backward_range(const T* g, const T* y, T* gx, int64_t n, T scale) {
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] > T(0) ? g[i] * scale : T(0);
}

// The same with y bfloat16 (autocast's copy): y > 0 exactly for the bits 0x0001 (the
// least positive) to 0x7F80 (+inf), so one unsigned compare of bits - 1 tests it (0,
// negatives and NaN fall outside).
KILN_MULTIVERSION void relu_dropout_backward_mixed_range(const float* g, const uint16_t* y, float* gx, int64_t n,
                                                         float scale) {
  for (int64_t i = 0; i < n; ++i) gx[i] = static_cast<uint16_t>(y[i] - 1u) < 0x7F80u ? g[i] * scale : 0.0f;
}

// Elements [i0, i1) of a dropout-style pass cut into chunks of whole Philox batches, so
// that no block is computed twice.
template <class F>
void for_batch_chunks(int64_t n, F f) {
  constexpr int64_t kChunk = 4 * kBatch;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, kGrainElements / kChunk,
               [&](int64_t c0, int64_t c1) { f(c0 * kChunk, std::min(n, c1 * kChunk)); });
}

}  // namespace

void philox_words(uint64_t seed, uint64_t block, int64_t first, int64_t count, uint32_t* out) {
  uint32_t w[4 * kBatch];
  int64_t i = 0;
  while (i < count) {
    const int64_t e = first + i;  // the next element wanted
    const int64_t j = e / 4;      // its block, relative to `block`
    // The batch holds elements [4j, 4j + 4·kBatch).
    const int64_t skip = e - 4 * j, n = std::min<int64_t>(4 * kBatch - skip, count - i);
    if (n == 4 * kBatch) {  // a whole batch wanted (dropout's chunks, attention's rows): no copy
      philox_batch(seed, block + static_cast<uint64_t>(j), out + i);
      i += n;
      continue;
    }
    philox_batch(seed, block + static_cast<uint64_t>(j), w);
    std::memcpy(out + i, w + skip, static_cast<size_t>(n) * sizeof(uint32_t));
    i += n;
  }
}

void CpuBackend::dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) {
  const uint64_t threshold = bernoulli_threshold(1.0 - p);
  visit_floating("dropout", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    for_batch_chunks(x.numel(), [&](int64_t i0, int64_t i1) {
      dropout_range<T>(px + i0, po + i0, i1 - i0, i0, seed, block, threshold, scale);
    });
  });
}

// relu_dropout, and y's bfloat16 copy into low when low is defined (float32 y only).
void CpuBackend::relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                              const Tensor& low) {
  const bool dense = x.is_contiguous() && y.is_contiguous() && x.dtype() == y.dtype();
  if (!dense) return Backend::relu_dropout(x, seed, block, p, y, low);
  if (low.defined() && (y.dtype() != kFloat32 || low.dtype() != kBFloat16 || !low.is_contiguous() ||
                        low.shape() != y.shape()))
    return Backend::relu_dropout(x, seed, block, p, y, low);
  uint16_t* pl = low.defined() ? reinterpret_cast<uint16_t*>(low.data<bfloat16>()) : nullptr;
  const uint64_t threshold = bernoulli_threshold(1.0 - p);
  visit_floating("relu_dropout", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    for_batch_chunks(x.numel(), [&](int64_t i0, int64_t i1) {
      relu_dropout_round_range<T>(px + i0, py + i0, pl ? pl + i0 : nullptr, i1 - i0, i0, seed, block, threshold,
                                  scale);
    });
  });
}

void CpuBackend::relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) {
  const bool dense = g.is_contiguous() && y.is_contiguous() && gx.is_contiguous();
  if (dense && y.dtype() == kBFloat16 && g.dtype() == kFloat32 && gx.dtype() == kFloat32) {
    const float* pg = g.data<float>();
    const uint16_t* py = reinterpret_cast<const uint16_t*>(y.data<bfloat16>());
    float* pgx = gx.data<float>();
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    return parallel_for(y.numel(), kGrainElements, [&](int64_t i0, int64_t i1) {
      relu_dropout_backward_mixed_range(pg + i0, py + i0, pgx + i0, i1 - i0, scale);
    });
  }
  if (y.dtype() == kBFloat16) return Backend::relu_dropout_backward(g, y.to(kFloat32), p, gx);
  if (!dense || g.dtype() != y.dtype() || gx.dtype() != y.dtype()) return Backend::relu_dropout_backward(g, y, p, gx);
  visit_floating("relu_dropout", y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = g.data<T>();
    const T* py = y.data<T>();
    T* pgx = gx.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for(y.numel(), kGrainElements,
                 [&](int64_t i0, int64_t i1) { relu_dropout_backward_range<T>(pg + i0, py + i0, pgx + i0, i1 - i0, scale); });
  });
}

void CpuBackend::uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) {
  if (out.dtype() == kFloat32) {
    float flo = static_cast<float>(lo), span = static_cast<float>(hi - lo);
    return fill_random_words(out, seed, block, [=](uint32_t w) { return flo + span * uniform_float(w); });
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
  const uint64_t threshold = bernoulli_threshold(p);
  fill_random_words(out, seed, block, [=](uint32_t w) { return static_cast<uint64_t>(w) < threshold ? 1 : 0; });
}

void CpuBackend::randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) {
  fill_random(out, seed, block, [=](const std::array<uint32_t, 4>& w) {
    uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
    return lo + static_cast<int64_t>(r % static_cast<uint64_t>(hi - lo));
  });
}

}  // namespace kiln::cpu
