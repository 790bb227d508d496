#pragma once
// Views and scratch tensors for code below ops/ (the composed kernels, the bfloat16
// wrapper): a view shares t's storage with another geometry and has no history.
#include <utility>

#include "../core/tensor.h"

namespace kiln::kernel_views {

// t's storage seen with the given geometry and dtype.
inline Tensor view(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
inline Tensor view(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  return view(t, shape, strides, offset, t.dtype());
}

// A contiguous t seen with another shape of the same numel.
inline Tensor reshaped(const Tensor& t, const Shape& shape) {
  return view(t, shape, contiguous_strides(shape), t.offset());
}

// t, whose dims are each 1 or shape's, expanded to shape (stride 0 where it was 1).
inline Tensor expanded(const Tensor& t, const Shape& shape) {
  Strides strides(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) strides[d] = t.size(static_cast<int64_t>(d)) == 1 ? 0 : t.stride(static_cast<int64_t>(d));
  return view(t, shape, strides, t.offset());
}

// t with its last two dims swapped.
inline Tensor transposed(const Tensor& t) {
  Shape shape = t.shape();
  Strides strides = t.strides();
  std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return view(t, shape, strides, t.offset());
}

}  // namespace kiln::kernel_views
