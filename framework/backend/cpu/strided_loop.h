#pragma once
// Walks N same-shaped strided operands element by element, the innermost dimension
// handed to a callback as one run: inner(ptrs, strides_in_bytes, n). Dimensions that
// are contiguous for every operand are merged first, so the common cases (all
// contiguous; a row vector broadcast over rows) become long runs the compiler can
// vectorise. Work is split across threads by linear element index.
#include <array>
#include <cstdint>
#include <vector>

#include "parallel.h"
#include "../../core/tensor.h"

namespace kiln::cpu {

template <size_t N>
struct StridedLayout {
  std::vector<int64_t> sizes;                      // innermost last
  std::array<std::vector<int64_t>, N> strides;     // bytes
  std::array<char*, N> base;
};

template <size_t N>
StridedLayout<N> make_layout(const std::array<const Tensor*, N>& ops) {
  StridedLayout<N> L;
  const Shape& shape = ops[0]->shape();
  const size_t nd = shape.size();
  for (size_t k = 0; k < N; ++k) L.base[k] = static_cast<char*>(ops[k]->data_ptr());
  // Collect dims (dropping size-1), then merge neighbours that are contiguous for all.
  for (size_t d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    bool merge = !L.sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) {
      int64_t es = static_cast<int64_t>(ops[k]->element_size());
      merge = L.strides[k].back() == ops[k]->strides()[d] * es * shape[d];
    }
    if (merge) {
      L.sizes.back() *= shape[d];
      for (size_t k = 0; k < N; ++k)
        L.strides[k].back() = ops[k]->strides()[d] * static_cast<int64_t>(ops[k]->element_size());
    } else {
      L.sizes.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k)
        L.strides[k].push_back(ops[k]->strides()[d] * static_cast<int64_t>(ops[k]->element_size()));
    }
  }
  if (L.sizes.empty()) {  // a single element
    L.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) L.strides[k].push_back(0);
  }
  return L;
}

// Runs inner() over elements [begin, end) of the layout.
template <size_t N, class Inner>
void run_strided_range(const StridedLayout<N>& L, int64_t begin, int64_t end, Inner& inner) {
  const int nd = static_cast<int>(L.sizes.size());
  std::vector<int64_t> idx(nd, 0);
  std::array<char*, N> ptr = L.base;
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    idx[d] = rem % L.sizes[d];
    rem /= L.sizes[d];
    for (size_t k = 0; k < N; ++k) ptr[k] += idx[d] * L.strides[k][d];
  }
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = L.strides[k][nd - 1];
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(L.sizes[nd - 1] - idx[nd - 1], end - pos);
    inner(ptr, inner_stride, n);
    pos += n;
    if (pos >= end) break;
    // The run ended at the end of a row: rewind to its start, carry into outer dims.
    for (size_t k = 0; k < N; ++k) ptr[k] -= idx[nd - 1] * inner_stride[k];
    idx[nd - 1] = 0;
    for (int d = nd - 2; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) ptr[k] += L.strides[k][d];
      if (++idx[d] < L.sizes[d]) break;
      for (size_t k = 0; k < N; ++k) ptr[k] -= idx[d] * L.strides[k][d];
      idx[d] = 0;
    }
  }
}

// inner(std::array<char*, N> ptrs, const std::array<int64_t, N>& strides, int64_t n)
template <size_t N, class Inner>
void for_each_strided(const std::array<const Tensor*, N>& ops, Inner inner,
                      int64_t grain = kGrainElements) {
  int64_t total = ops[0]->numel();
  if (total == 0) return;
  StridedLayout<N> L = make_layout(ops);
  parallel_for(total, grain, [&](int64_t b, int64_t e) {
    Inner local = inner;
    run_strided_range(L, b, e, local);
  });
}

}  // namespace kiln::cpu
