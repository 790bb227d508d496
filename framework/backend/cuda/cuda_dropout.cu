// Dropout, and relu then dropout in one pass (a feed-forward block's hidden activation),
// its backward from y alone, and under autocast the forward's bfloat16 copy written in
// the same pass and the backward reading that copy (backend.h's relu_dropout contract;
// the CPU's kernels are cpu_random.cpp's). relu_dropout gives the bits of the default
// passes (relu, dropout, copy; ReluBackward, then the scale). Element i is kept where
// word i % 4 of Philox block (block + i / 4) is below the threshold, as for
// bernoulli(1 - p), and scaled by 1 / (1 - p).
//   x, y (n) contiguous, one floating dtype; low (n) bfloat16; g, gx (n) as y, or float32
//   with a bfloat16 y. dropout: x, out (n) contiguous, one floating dtype.
#include <type_traits>

#include "backend/cpu/philox_words.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// dropout(v), after relu where kRelu.
template <class T, bool kRelu>
__device__ inline T keep_or_zero(T v, uint32_t word, uint64_t threshold, T scale) {
  if (kRelu) v = v < T(0) ? T(0) : v;  // relu's rule: NaN stays NaN
  return static_cast<uint64_t>(word) < threshold ? v * scale : T(0);
}

// y (n) = dropout(relu(x)) (kRelu) or dropout(x), and low (n) = y rounded to bfloat16
// where low is not null (float32 only). One thread per Philox block: elements 4j ..
// 4j+3, loaded and stored as one pack where kPacked (every pointer aligned to its Pack4).
template <class T, bool kRelu, bool kPacked>
__global__ void dropout_kernel(const T* x, T* y, bfloat16* low, int64_t n, uint64_t seed, uint64_t block,
                               uint64_t threshold, T scale) {
  KILN_GRID_STRIDE_LOOP(j, (n + 3) / 4) {
    const std::array<uint32_t, 4> w = philox4x32(seed, block + static_cast<uint64_t>(j));
    const int64_t i0 = 4 * j;
    if (kPacked && i0 + 4 <= n) {
      const Pack4<T> a = reinterpret_cast<const Pack4<T>*>(x)[j];
      Pack4<T> b;
#pragma unroll
      for (int k = 0; k < 4; ++k) b.v[k] = keep_or_zero<T, kRelu>(a.v[k], w[k], threshold, scale);
      reinterpret_cast<Pack4<T>*>(y)[j] = b;
      if constexpr (std::is_same_v<T, float>) {
        if (low) {
          Pack4<bfloat16> c;
#pragma unroll
          for (int k = 0; k < 4; ++k) c.v[k] = bfloat16(b.v[k]);
          reinterpret_cast<Pack4<bfloat16>*>(low)[j] = c;
        }
      }
      continue;
    }
    for (int k = 0; k < 4 && i0 + k < n; ++k) {
      const T v = keep_or_zero<T, kRelu>(x[i0 + k], w[k], threshold, scale);
      y[i0 + k] = v;
      if constexpr (std::is_same_v<T, float>) {
        if (low) low[i0 + k] = bfloat16(v);
      }
    }
  }
}

// y > 0 for y's element type; a bfloat16 y as its bits: 0x0001 (the least positive) to
// 0x7F80 (+inf) are the positive values, so one unsigned compare of bits - 1 tests it.
template <class Y>
__device__ inline bool positive(Y v) {
  if constexpr (std::is_same_v<Y, bfloat16>) {
    return static_cast<uint16_t>(v.bits - 1u) < 0x7F80u;
  } else {
    return v > Y(0);
  }
}

// gx (n) = g (n) · (y > 0) · scale: four elements a thread, as packs where kPacked.
template <class T, class Y, bool kPacked>
__global__ void relu_dropout_backward_kernel(const T* g, const Y* y, T* gx, int64_t n, T scale) {
  KILN_GRID_STRIDE_LOOP(j, (n + 3) / 4) {
    const int64_t i0 = 4 * j;
    if (kPacked && i0 + 4 <= n) {
      const Pack4<T> a = reinterpret_cast<const Pack4<T>*>(g)[j];
      const Pack4<Y> b = reinterpret_cast<const Pack4<Y>*>(y)[j];
      Pack4<T> c;
#pragma unroll
      for (int k = 0; k < 4; ++k) c.v[k] = positive(b.v[k]) ? a.v[k] * scale : T(0);
      reinterpret_cast<Pack4<T>*>(gx)[j] = c;
      continue;
    }
    for (int k = 0; k < 4 && i0 + k < n; ++k) gx[i0 + k] = positive(y[i0 + k]) ? g[i0 + k] * scale : T(0);
  }
}

// float32 or float64 (the kernels' T; bfloat16 tensors reach them only as the mixed y).
bool wide_floating(DType t) { return t == kFloat32 || t == kFloat64; }

bool dense(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!t->is_contiguous()) return false;
  return true;
}

// dropout_kernel's launch: y (and low) from x, all contiguous and checked by the caller.
template <class T, bool kRelu>
void launch_dropout(const Tensor& x, const Tensor& y, bfloat16* low, uint64_t seed, uint64_t block, double p) {
  const int64_t n = y.numel();
  const T* px = x.data<T>();
  T* py = y.data<T>();
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  const bool packed = pack_aligned<T>(px) && pack_aligned<T>(py) && (!low || pack_aligned<bfloat16>(low));
  const unsigned grid = grid_for((n + 3) / 4);
  if (packed)
    dropout_kernel<T, kRelu, true><<<grid, kThreads, 0, stream_of(y)>>>(px, py, low, n, seed, block, threshold, scale);
  else
    dropout_kernel<T, kRelu, false><<<grid, kThreads, 0, stream_of(y)>>>(px, py, low, n, seed, block, threshold, scale);
}

}  // namespace

void CudaBackend::dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) {
  // x and out contiguous, of one dtype (backend.h's dropout contract, as the CPU's).
  if (x.numel() == 0) return;
  DeviceGuard guard(out);
  visit_floating("dropout", x.dtype(), [&](auto tag) {
    launch_dropout<typename decltype(tag)::type, false>(x, out, nullptr, seed, block, p);
  });
  KILN_CUDA_LAUNCH_CHECK("dropout");
}

// relu_dropout, and y's bfloat16 copy into low when low is defined (float32 y only).
void CudaBackend::relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                               const Tensor& low) {
  const bool fused = dense({&x, &y}) && x.dtype() == y.dtype() && wide_floating(y.dtype()) &&
                     (!low.defined() || (y.dtype() == kFloat32 && low.dtype() == kBFloat16 &&
                                         low.is_contiguous() && low.shape() == y.shape()));
  if (!fused) return Backend::relu_dropout(x, seed, block, p, y, low);
  if (y.numel() == 0) return;
  DeviceGuard guard(y);
  bfloat16* pl = low.defined() ? low.data<bfloat16>() : nullptr;
  visit_floating("relu_dropout", y.dtype(), [&](auto tag) {
    launch_dropout<typename decltype(tag)::type, true>(x, y, pl, seed, block, p);
  });
  KILN_CUDA_LAUNCH_CHECK("relu_dropout");
}

void CudaBackend::relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) {
  const bool mixed = y.dtype() == kBFloat16 && g.dtype() == kFloat32 && gx.dtype() == kFloat32;
  const bool same = g.dtype() == y.dtype() && gx.dtype() == y.dtype() && wide_floating(y.dtype());
  if (!dense({&g, &y, &gx}) || !(mixed || same)) {
    if (y.dtype() == kBFloat16) return Backend::relu_dropout_backward(g, y.to(kFloat32), p, gx);
    return Backend::relu_dropout_backward(g, y, p, gx);
  }
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(gx);
  auto launch = [&](auto ttag, auto ytag) {
    using T = typename decltype(ttag)::type;
    using Y = typename decltype(ytag)::type;
    const T* pg = g.data<T>();
    const Y* py = y.data<Y>();
    T* pgx = gx.data<T>();
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const unsigned grid = grid_for((n + 3) / 4);
    if (pack_aligned<T>(pg) && pack_aligned<Y>(py) && pack_aligned<T>(pgx))
      relu_dropout_backward_kernel<T, Y, true><<<grid, kThreads, 0, stream_of(gx)>>>(pg, py, pgx, n, scale);
    else
      relu_dropout_backward_kernel<T, Y, false><<<grid, kThreads, 0, stream_of(gx)>>>(pg, py, pgx, n, scale);
  };
  if (mixed) {
    launch(TypeTag<float>{}, TypeTag<bfloat16>{});
  } else {
    visit_floating("relu_dropout", y.dtype(), [&](auto tag) { launch(tag, tag); });
  }
  KILN_CUDA_LAUNCH_CHECK("relu_dropout");
}

}  // namespace kiln::cuda
