// Softmax and log-softmax along one dim of a contiguous x viewed as (outer, n, inner).
// Rows (inner == 1) are the common case: one pass for the max, one for the sum of
// exponentials, one to write; a dim that is not last goes the same way over blocks of
// neighbouring lines.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_reduce.h"

namespace kiln::cpu {
namespace {

// A softmax dim that is not last: x seen as (n, inner) rows `inner` apart, and a block of
// `cols` <= kCols neighbouring lines, the columns [0, cols) of every row, at a time. Each
// pass runs along the contiguous columns, so it vectorizes; one line at a time, `inner`
// apart, it did not (22 ns an element for (32, 100, 1024) over dim 1, against 1.2 for the
// rows). Sums in double, as the rows' final sums.
constexpr int64_t kCols = 64;

// y (n, cols) = softmax or log_softmax of x (n, cols) along n.
template <class T>
KILN_MULTIVERSION void softmax_columns(const T* x, T* y, int64_t n, int64_t inner, int64_t cols, bool log) {
  T mx[kCols];
  double sum[kCols];
  for (int64_t c = 0; c < cols; ++c) mx[c] = -std::numeric_limits<T>::infinity(), sum[c] = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) mx[c] = std::max(mx[c], x[i * inner + c]);
  for (int64_t c = 0; c < cols; ++c)
    if (mx[c] == -std::numeric_limits<T>::infinity()) mx[c] = 0;  // a fully masked line stays finite
  if (log) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) sum[c] += vec::exp(x[i * inner + c] - mx[c]);
    T lse[kCols];
    for (int64_t c = 0; c < cols; ++c) lse[c] = mx[c] + static_cast<T>(std::log(sum[c]));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) y[i * inner + c] = x[i * inner + c] - lse[c];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const T e = vec::exp(x[i * inner + c] - mx[c]);
      y[i * inner + c] = e;
      sum[c] += e;
    }
  T inv[kCols];
  for (int64_t c = 0; c < cols; ++c) inv[c] = static_cast<T>(1.0 / sum[c]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) y[i * inner + c] *= inv[c];
}

// gx (n, cols) from y and g (n, cols), along n: softmax y * (g - <g, y>); log_softmax
// g - exp(y) * sum(g).
template <class T>
KILN_MULTIVERSION void softmax_backward_columns(const T* y, const T* g, T* gx, int64_t n, int64_t inner, int64_t cols,
                                                bool log) {
  double acc[kCols];
  for (int64_t c = 0; c < cols; ++c) acc[c] = 0;
  T s[kCols];
  if (log) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) acc[c] += g[i * inner + c];
    for (int64_t c = 0; c < cols; ++c) s[c] = static_cast<T>(acc[c]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < cols; ++c) gx[i * inner + c] = g[i * inner + c] - vec::exp(y[i * inner + c]) * s[c];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(g[i * inner + c]) * y[i * inner + c];
  for (int64_t c = 0; c < cols; ++c) s[c] = static_cast<T>(acc[c]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cols; ++c) gx[i * inner + c] = y[i * inner + c] * (g[i * inner + c] - s[c]);
}

// The common case, contiguous rows (the softmax dim is last): y (n) from x (n).
template <class T>
KILN_MULTIVERSION void softmax_row(const T* x, T* y, int64_t n, bool log) {
  T mx = rows::max(x, n);
  if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // a fully masked row stays finite
  if (log) {
    const T lse = mx + static_cast<T>(std::log(rows::sum_exp<T>(x, mx, nullptr, n)));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] - lse;
    return;
  }
  const T inv = static_cast<T>(1.0 / rows::sum_exp(x, mx, y, n));
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

template <class T>
KILN_MULTIVERSION void softmax_backward_row(const T* y, const T* g, T* gx, int64_t n, bool log) {
  if (log) {
    const T s = static_cast<T>(rows::sum(g, n));
    for (int64_t i = 0; i < n; ++i) gx[i] = g[i] - vec::exp(y[i]) * s;
    return;
  }
  const T s = static_cast<T>(rows::dot(g, y, n));
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] * (g[i] - s);
}

// f(base, cols) for every block of up to kCols neighbouring lines of a dim that is not
// last (d.inner > 1).
template <class F>
void for_each_column_block(const DimSplit& d, F f) {
  const int64_t per_outer = (d.inner + kCols - 1) / kCols;
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(d.n * kCols * 8, 1));
  parallel_for(d.outer * per_outer, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t o = b / per_outer, c0 = b % per_outer * kCols;
      f(o * d.n * d.inner + c0, std::min(kCols, d.inner - c0));
    }
  });
}

template <class F>
void for_each_line_base(const DimSplit& d, F f) {
  int64_t lines = d.outer * d.inner;
  int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(d.n * 8, 1));
  parallel_for(lines, grain, [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) {
      int64_t o = l / d.inner, i = l % d.inner;
      f(o * d.n * d.inner + i);
    }
  });
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  DimSplit d = split_at_dim(x.shape(), dim);
  visit_floating("softmax", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    if (d.inner == 1) {
      for_each_line_base(d, [&](int64_t base) { softmax_row(px + base, py + base, d.n, log); });
    } else {
      for_each_column_block(d, [&](int64_t base, int64_t cols) {
        softmax_columns(px + base, py + base, d.n, d.inner, cols, log);
      });
    }
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                                  const Tensor& grad_x) {
  DimSplit d = split_at_dim(y.shape(), dim);
  visit_floating("softmax_backward", y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* py = y.data<T>();
    const T* pg = g.data<T>();
    T* pgx = grad_x.data<T>();
    if (d.inner == 1) {
      for_each_line_base(d, [&](int64_t base) { softmax_backward_row(py + base, pg + base, pgx + base, d.n, log); });
    } else {
      for_each_column_block(d, [&](int64_t base, int64_t cols) {
        softmax_backward_columns(py + base, pg + base, pgx + base, d.n, d.inner, cols, log);
      });
    }
  });
}

}  // namespace kiln::cpu
