#pragma once
// Kernels that work along one dim (gather, scatter, index_add, cumsum, sort, topk) see
// each operand as a grid of "lines": the operand with `dim` taken out, each grid point
// the start of a line that runs along dim. for_each_line walks the grids of N operands
// together (any strides), in parallel over whole lines: one thread handles a line from
// its start to its end, so work along a line is ordered and never races with another
// thread's, and results do not depend on the thread count.
#include <array>
#include <memory>

#include "strided_loop.h"

namespace kiln::cpu {

// A view of t's storage with the given shape and strides at t's offset (no history).
inline Tensor strided_view(const Tensor& t, Shape shape, Strides strides) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

// t's grid of lines along dim: shape `grid` (t's shape without dim, or a window of it
// starting at 0), t's strides without dim's. Reads nothing itself, so t.size(dim) may be 0.
inline Tensor line_grid(const Tensor& t, int64_t dim, const Shape& grid) {
  Strides strides = t.strides();
  strides.erase(strides.begin() + dim);
  return strided_view(t, grid, std::move(strides));
}

// f(std::array<char*, N> first, const std::array<int64_t, N>& step, int64_t count): `count`
// neighbouring lines, the first of operand k at first[k], each next one step[k] bytes
// further. The lines are those of ops[0] (its shape without dim); every other operand is
// at least as large in the dims other than dim. line_len (the length of a line) sets the
// grain.
template <size_t N, class F>
void for_each_line(const std::array<const Tensor*, N>& ops, int64_t dim, int64_t line_len, F f) {
  Shape grid = ops[0]->shape();
  grid.erase(grid.begin() + dim);
  std::array<Tensor, N> grids;
  std::array<const Tensor*, N> ptrs;
  for (size_t k = 0; k < N; ++k) {
    grids[k] = line_grid(*ops[k], dim, grid);
    ptrs[k] = &grids[k];
  }
  for_each_strided<N>(ptrs, f, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, line_len)));
}

// Throws "[op] index 7 is out of bounds for dim 1 with size 4" for the first element of
// index (int64, any strides, row-major order) outside [0, size).
inline void check_index_range(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  if (index.numel() == 0) return;
  StridedLayout<1> L = make_layout<1>({&index});
  auto check = [&](std::array<char*, 1> p, const std::array<int64_t, 1>& step, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = *reinterpret_cast<const int64_t*>(p[0] + i * step[0]);
      KILN_CHECK(v >= 0 && v < size, op, "index ", v, " is out of bounds for dim ", dim, " with size ", size);
    }
  };
  run_strided_range(L, 0, index.numel(), check);
}

}  // namespace kiln::cpu
