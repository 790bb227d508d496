// gather, scatter / scatter_add and index_add: element moves along one dim chosen by an
// int64 index tensor. Parallel over lines (dim_lines.h), in index order along each, so
// repeated indices give the same result whatever the thread count.
#include <cstdlib>

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
    return convert_float<T>(v);
  }
}

// Every element of index (any strides), in index order along each line of dim, lines in
// parallel: f(a_line, b_line, j, i) with a_line and b_line the starts of a's and b's
// lines matching index's line, j the position along it and i the index there. a and b
// are at least index's size in the dims other than dim.
template <class F>
void for_each_index(const Tensor& index, int64_t dim, const Tensor& a, const Tensor& b, F f) {
  if (index.numel() == 0) return;
  const int64_t n = index.size(dim), si = index.stride(dim);
  const int64_t a_along = a.stride(dim) * static_cast<int64_t>(a.element_size());  // bytes
  for_each_line<3>({&index, &a, &b}, dim, n,
                   [&](std::array<char*, 3> p, const std::array<int64_t, 3>& step, int64_t count) {
                     auto line = [&](int64_t k, int64_t l) { return p[k] + l * step[k]; };
                     auto index_at = [&](int64_t l, int64_t j) { return *at<int64_t>(line(0, l), j * si); };
                     // Walk a in its memory order: along each line first when a's neighbours
                     // along a line are nearest (dim innermost), else across the lines.
                     if (std::abs(step[1]) >= std::abs(a_along)) {
                       for (int64_t l = 0; l < count; ++l) {
                         for (int64_t j = 0; j < n; ++j) f(line(1, l), line(2, l), j, index_at(l, j));
                       }
                     } else if (step[0] != 0) {
                       for (int64_t j = 0; j < n; ++j) {
                         for (int64_t l = 0; l < count; ++l) f(line(1, l), line(2, l), j, index_at(l, j));
                       }
                     } else {  // one index for all these lines (index_add's): read once per j
                       for (int64_t j = 0; j < n; ++j) {
                         const int64_t i = index_at(0, j);
                         for (int64_t l = 0; l < count; ++l) f(line(1, l), line(2, l), j, i);
                       }
                     }
                   });
}

}  // namespace

// x (.., N, ..), index (.., n, ..) -> out (.., n, ..): out[.., j, ..] = x[.., index[.., j, ..], ..]
void CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  check_index_range("gather", index, dim, x.size(dim));
  const int64_t so = out.stride(dim), sx = x.stride(dim);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(index, dim, out, x, [&](char* o, char* xl, int64_t j, int64_t i) {
      *at<T>(o, j * so) = *at<T>(xl, i * sx);
    });
  });
}

// self (.., N, ..), index and src (.., n, ..): self[.., index[.., j, ..], ..] (+)= src[.., j, ..],
// in place, j ascending along each line (the last of repeated indices wins a plain scatter).
void CpuBackend::scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) {
  check_index_range(accumulate ? "scatter_add" : "scatter", index, dim, self.size(dim));
  const int64_t ss = self.stride(dim), sv = src.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(index, dim, self, src, [&](char* s, char* v, int64_t j, int64_t i) {
      T& dst = *at<T>(s, i * ss);
      const T x = *at<T>(v, j * sv);
      dst = accumulate ? wrapping_add(dst, x) : x;
    });
  });
}

// self (.., N, ..), index (K), source (.., K, ..): self.select(dim, index[i]) += alpha *
// source.select(dim, i), in place, i ascending: a scatter_add whose index is index[i]
// all over source's slice i.
void CpuBackend::index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                           double alpha) {
  check_index_range("index_add", index, dim, self.size(dim));
  Strides spread(source.shape().size(), 0);
  spread[dim] = index.stride(0);
  const Tensor index_at = strided_view(index, source.shape(), spread);
  const int64_t ss = self.stride(dim), sv = source.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = scalar_as<T>(alpha);
    const bool scaled = alpha != 1.0;
    for_each_index(index_at, dim, self, source, [&](char* s, char* v, int64_t j, int64_t i) {
      T& dst = *at<T>(s, i * ss);
      const T x = *at<T>(v, j * sv);
      dst = wrapping_add(dst, scaled ? wrapping_mul(x, a) : x);
    });
  });
}

}  // namespace kiln::cpu
