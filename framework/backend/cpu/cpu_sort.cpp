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

// One line at a time: its values copied out (strided) and the positions 0..n-1 to order.
template <class T>
struct LineBuffer {
  std::vector<T> vals;
  std::vector<int64_t> perm;

  void load(const T* x, int64_t stride, int64_t n) {
    vals.resize(static_cast<size_t>(n));
    perm.resize(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) vals[j] = x[j * stride];
    std::iota(perm.begin(), perm.end(), int64_t{0});
  }
  // The first m positions of perm written out as values and indices.
  void store(int64_t m, T* values, int64_t sv, int64_t* indices, int64_t si) const {
    for (int64_t j = 0; j < m; ++j) {
      values[j * sv] = vals[perm[j]];
      indices[j * si] = perm[j];
    }
  }
};

}  // namespace

// x (.., N, ..) -> values, indices (.., N, ..), stable.
void CpuBackend::sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  if (x.numel() == 0) return;
  const int64_t n = x.size(dim);
  const int64_t sx = x.stride(dim), sv = values.stride(dim), si = indices.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_line<3>({&x, &values, &indices}, dim, n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                       LineBuffer<T> buf;
                       for (int64_t l = 0; l < count; ++l) {
                         buf.load(reinterpret_cast<const T*>(p[0] + l * step[0]), sx, n);
                         const std::vector<T>& v = buf.vals;
                         if (descending) {
                           std::stable_sort(buf.perm.begin(), buf.perm.end(),
                                            [&](int64_t a, int64_t b) { return nan_last_less(v[b], v[a]); });
                         } else {
                           std::stable_sort(buf.perm.begin(), buf.perm.end(),
                                            [&](int64_t a, int64_t b) { return nan_last_less(v[a], v[b]); });
                         }
                         buf.store(n, reinterpret_cast<T*>(p[1] + l * step[1]), sv,
                                   reinterpret_cast<int64_t*>(p[2] + l * step[2]), si);
                       }
                     });
  });
}

// x (.., N, ..) -> values, indices (.., k, ..): the k best along dim, best first.
void CpuBackend::topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
                      const Tensor& indices) {
  if (values.numel() == 0) return;
  const int64_t n = x.size(dim);
  const int64_t sx = x.stride(dim), sv = values.stride(dim), si = indices.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_line<3>({&x, &values, &indices}, dim, n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                       LineBuffer<T> buf;
                       for (int64_t l = 0; l < count; ++l) {
                         buf.load(reinterpret_cast<const T*>(p[0] + l * step[0]), sx, n);
                         const std::vector<T>& v = buf.vals;
                         // Better value first; equal values by index.
                         auto better = [&](int64_t a, int64_t b) {
                           if (largest ? nan_last_less(v[b], v[a]) : nan_last_less(v[a], v[b])) return true;
                           if (largest ? nan_last_less(v[a], v[b]) : nan_last_less(v[b], v[a])) return false;
                           return a < b;
                         };
                         std::partial_sort(buf.perm.begin(), buf.perm.begin() + k, buf.perm.end(), better);
                         buf.store(k, reinterpret_cast<T*>(p[1] + l * step[1]), sv,
                                   reinterpret_cast<int64_t*>(p[2] + l * step[2]), si);
                       }
                     });
  });
}

}  // namespace kiln::cpu
