// triu / tril: the upper / lower triangle of the last two dims, the rest zeroed. The
// zeroing is masked_fill with a (M, N) mask broadcast over the batch, so any dtype
// works and the gradient is the same mask applied to the output's gradient.
#include <algorithm>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

// (M, N) bool, true where column - row < diagonal (upper) or > diagonal (lower): the
// elements triu / tril zero.
Tensor outside_triangle(int64_t m, int64_t n, int64_t diagonal, bool upper, Device device) {
  TensorOptions i64 = TensorOptions(kInt64).device(device);
  Tensor rows = arange(0, static_cast<double>(m), 1, i64).reshape({m, 1});
  Tensor cols = arange(0, static_cast<double>(n), 1, i64).reshape({1, n});
  // Offsets stay small: a diagonal beyond ±max(m, n) keeps or zeroes everything anyway,
  // so it is clamped (no overflow in column - row - diagonal).
  const int64_t bound = std::max(m, n) + 1;
  const int64_t d = std::clamp(diagonal, -bound, bound);
  Tensor offset = sub(cols, rows);  // (M, N): column - row
  return upper ? lt(offset, static_cast<double>(d)) : gt(offset, static_cast<double>(d));
}

// x (…, M, N) -> (…, M, N)
Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  detail::check_defined(op, x);
  KILN_CHECK(x.dim() >= 2, op, "input must have at least 2 dimensions, got shape ", shape_str(x.shape()));
  const int64_t m = x.size(-2), n = x.size(-1);
  return masked_fill(x, outside_triangle(m, n, diagonal, upper, x.device()), 0.0);
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }

}  // namespace kiln
