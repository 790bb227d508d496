// sort and topk along one dim, in parallel over lines (dim_lines.h). NaN orders above
// every number (torch's rule); ties keep index order, so results are deterministic.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dim_lines.h"

namespace kiln::cpu {
namespace {

// a < b with NaN above every number and NaNs equal: a strict weak order.
template <class T>
bool nan_last_less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(b)) return !std::isnan(a);
  }
  return a < b;  // false when a is NaN
}

// Each line of x along dim in turn: its values copied out (strided) into v, its
// positions 0..n-1 into perm, order(perm, v) reorders perm, and the first m positions are
// written out, as values (.., m, ..) and indices (.., m, ..).
template <class Order>
void order_lines(const Tensor& x, int64_t dim, int64_t m, const Tensor& values, const Tensor& indices, Order order) {
  if (values.numel() == 0) return;
  const int64_t n = x.size(dim);
  const int64_t sx = x.stride(dim), sv = values.stride(dim), si = indices.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_line<3>({&x, &values, &indices}, dim, n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                       std::vector<T> v(static_cast<size_t>(n));
                       std::vector<int64_t> perm(static_cast<size_t>(n));
                       for (int64_t l = 0; l < count; ++l) {
                         const T* xl = reinterpret_cast<const T*>(p[0] + l * step[0]);
                         for (int64_t j = 0; j < n; ++j) v[j] = xl[j * sx];
                         std::iota(perm.begin(), perm.end(), int64_t{0});
                         order(perm, v);
                         T* vl = reinterpret_cast<T*>(p[1] + l * step[1]);
                         int64_t* il = reinterpret_cast<int64_t*>(p[2] + l * step[2]);
                         for (int64_t j = 0; j < m; ++j) {
                           vl[j * sv] = v[perm[j]];
                           il[j * si] = perm[j];
                         }
                       }
                     });
  });
}

}  // namespace

// x (.., N, ..) -> values, indices (.., N, ..), stable.
void CpuBackend::sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  order_lines(x, dim, x.size(dim), values, indices, [&](std::vector<int64_t>& perm, const auto& v) {
    if (descending) {
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return nan_last_less(v[b], v[a]); });
    } else {
      std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return nan_last_less(v[a], v[b]); });
    }
  });
}

// x (.., N, ..) -> values, indices (.., k, ..): the k best along dim, best first.
void CpuBackend::topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
                      const Tensor& indices) {
  order_lines(x, dim, k, values, indices, [&](std::vector<int64_t>& perm, const auto& v) {
    // Better value first; equal values by index.
    auto better = [&](int64_t a, int64_t b) {
      if (largest ? nan_last_less(v[b], v[a]) : nan_last_less(v[a], v[b])) return true;
      if (largest ? nan_last_less(v[a], v[b]) : nan_last_less(v[b], v[a])) return false;
      return a < b;
    };
    std::partial_sort(perm.begin(), perm.begin() + k, perm.end(), better);
  });
}

}  // namespace kiln::cpu
