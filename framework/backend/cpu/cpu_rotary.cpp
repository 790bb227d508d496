// Rotary position embeddings' inference kernel: x (..., d) contiguous -> y (..., d), each
// pair of a row turned by its angle's cos and sin, read through their broadcast strides
// (a (T, d/2) table serves every batch and head without being copied).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// One row of pairs: (a_i, b_i) at a[i * step], b[i * step] -> (a cos - b sin, b cos + a sin).
// Each result is one product rounded and one fused multiply-add, written out so that
// every compiler and clone rounds alike and as ggml's rope does (a 4-bit model quantises
// these values to 8 bits next, where one different rounding changes the tokens).
template <class T>
KILN_MULTIVERSION void rotate_row(const T* a, const T* b, const T* c, const T* s, T* ya, T* yb, int64_t half,
                                  int64_t step) {
  for (int64_t i = 0; i < half; ++i) {
    const T x0 = a[i * step], x1 = b[i * step];
    ya[i * step] = std::fma(x0, c[i], -(x1 * s[i]));
    yb[i * step] = std::fma(x0, s[i], x1 * c[i]);
  }
}

// The element offset of row `r` (counted over cos's shape less its last dim) in a tensor
// of those strides.
int64_t row_offset(int64_t r, const Shape& shape, const Strides& strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
    const int64_t n = shape[static_cast<size_t>(d)];
    off += (r % n) * strides[static_cast<size_t>(d)];
    r /= n;
  }
  return off;
}

}  // namespace

void CpuBackend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, const Tensor& y) {
  const bool unit = cos.stride(-1) == 1 && sin.stride(-1) == 1;
  if (!unit || (x.dtype() != kFloat32 && x.dtype() != kFloat64)) return Backend::rotary(x, cos, sin, interleaved, y);
  const int64_t d = x.size(-1), half = d / 2, rows = half == 0 ? 0 : x.numel() / d;
  if (rows == 0) return;
  const int64_t second = interleaved ? 1 : half, step = interleaved ? 2 : 1;
  visit_floating("rotary", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pc = cos.data<T>();
    const T* ps = sin.data<T>();
    T* py = y.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(d * 4, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* c = pc + row_offset(r, cos.shape(), cos.strides());
        const T* s = ps + row_offset(r, sin.shape(), sin.strides());
        rotate_row(px + r * d, px + r * d + second, c, s, py + r * d, py + r * d + second, half, step);
      }
    });
  });
}

}  // namespace kiln::cpu
