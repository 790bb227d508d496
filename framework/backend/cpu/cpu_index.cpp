// gather, scatter / scatter_add and index_add: element moves along one dim chosen by an
// int64 index tensor. Parallel over lines (dim_lines.h), in index order along each, so
// repeated indices give the same result whatever the thread count.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dim_lines.h"
#include "backend/cpu/wrapping_sum.h"

namespace kiln::cpu {
namespace {

template <class T>
T* at(char* p, int64_t elements) {
  return reinterpret_cast<T*>(p) + elements;
}

// A double as T (the caller has checked that it is representable).
template <class T>
T scalar_as(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace

// x (.., N, ..), index (.., n, ..) -> out (.., n, ..): out[.., j, ..] = x[.., index[.., j, ..], ..]
void CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  check_index_range("gather", index, dim, x.size(dim));
  const int64_t n = index.size(dim);
  if (index.numel() == 0) return;
  const int64_t so = out.stride(dim), si = index.stride(dim), sx = x.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_line<3>({&out, &index, &x}, dim, n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                       for (int64_t j = 0; j < n; ++j) {
                         for (int64_t l = 0; l < count; ++l) {
                           const int64_t i = *at<int64_t>(p[1] + l * step[1], j * si);
                           *at<T>(p[0] + l * step[0], j * so) = *at<T>(p[2] + l * step[2], i * sx);
                         }
                       }
                     });
  });
}

// self (.., N, ..), index and src (.., n, ..): self[.., index[.., j, ..], ..] (+)= src[.., j, ..],
// in place, j ascending along each line (the last of repeated indices wins a plain scatter).
void CpuBackend::scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) {
  check_index_range(accumulate ? "scatter_add" : "scatter", index, dim, self.size(dim));
  const int64_t n = index.size(dim);
  if (index.numel() == 0) return;
  const int64_t ss = self.stride(dim), si = index.stride(dim), sv = src.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_line<3>({&index, &self, &src}, dim, n,
                     [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                       for (int64_t j = 0; j < n; ++j) {
                         for (int64_t l = 0; l < count; ++l) {
                           const int64_t i = *at<int64_t>(p[0] + l * step[0], j * si);
                           T& dst = *at<T>(p[1] + l * step[1], i * ss);
                           const T v = *at<T>(p[2] + l * step[2], j * sv);
                           dst = accumulate ? wrapping_add(dst, v) : v;
                         }
                       }
                     });
  });
}

// self (.., N, ..), index (K), source (.., K, ..): self.select(dim, index[i]) += alpha *
// source.select(dim, i), in place, i ascending.
void CpuBackend::index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                           double alpha) {
  check_index_range("index_add", index, dim, self.size(dim));
  const int64_t K = index.numel();
  if (K == 0 || self.numel() == 0) return;
  std::vector<int64_t> ids(static_cast<size_t>(K));
  for (int64_t i = 0; i < K; ++i) ids[i] = index.data<int64_t>()[i * index.stride(0)];
  const int64_t ss = self.stride(dim), sv = source.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = scalar_as<T>(alpha);
    const bool scaled = alpha != 1.0;
    for_each_line<2>({&self, &source}, dim, K,
                     [&](std::array<char*, 2> p, const std::array<int64_t, 2>& step, int64_t count) {
                       for (int64_t i = 0; i < K; ++i) {
                         for (int64_t l = 0; l < count; ++l) {
                           T& dst = *at<T>(p[0] + l * step[0], ids[i] * ss);
                           const T v = *at<T>(p[1] + l * step[1], i * sv);
                           dst = wrapping_add(dst, scaled ? wrapping_mul(v, a) : v);
                         }
                       }
                     });
  });
}

}  // namespace kiln::cpu
