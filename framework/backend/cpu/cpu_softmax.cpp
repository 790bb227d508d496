// Softmax and log-softmax along one dim of a contiguous x viewed as (outer, n, inner).
// Rows (inner == 1) are the common case: one pass for the max, one for the sum of
// exponentials, one to write.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_reduce.h"

namespace kiln::cpu {
namespace {

// y (n) = softmax or log_softmax of x (n), elements `stride` apart.
template <class T>
void softmax_line(const T* x, T* y, int64_t n, int64_t stride, bool log) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i * stride]);
  if (mx == -std::numeric_limits<T>::infinity()) mx = 0;  // a fully masked row stays finite
  double sum = 0;
  if (log) {
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i * stride] - mx);
    T lse = mx + static_cast<T>(std::log(sum));
    for (int64_t i = 0; i < n; ++i) y[i * stride] = x[i * stride] - lse;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      T e = std::exp(x[i * stride] - mx);
      y[i * stride] = e;
      sum += e;
    }
    T inv = static_cast<T>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i * stride] *= inv;
  }
}

// gx (n) from y (n) and g (n): softmax: y * (g - <g, y>); log_softmax: g - exp(y) * sum(g).
template <class T>
void softmax_backward_line(const T* y, const T* g, T* gx, int64_t n, int64_t stride, bool log) {
  double acc = 0;
  if (log) {
    for (int64_t i = 0; i < n; ++i) acc += g[i * stride];
    T s = static_cast<T>(acc);
    for (int64_t i = 0; i < n; ++i) gx[i * stride] = g[i * stride] - std::exp(y[i * stride]) * s;
  } else {
    for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(g[i * stride]) * y[i * stride];
    T s = static_cast<T>(acc);
    for (int64_t i = 0; i < n; ++i) gx[i * stride] = y[i * stride] * (g[i * stride] - s);
  }
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
      for_each_line_base(d, [&](int64_t base) { softmax_line(px + base, py + base, d.n, d.inner, log); });
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
      for_each_line_base(d, [&](int64_t base) {
        softmax_backward_line(py + base, pg + base, pgx + base, d.n, d.inner, log);
      });
    }
  });
}

}  // namespace kiln::cpu
