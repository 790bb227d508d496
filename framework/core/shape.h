#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;    // sizes, outermost first
using Strides = std::vector<int64_t>;  // in elements, not bytes

int64_t shape_numel(const Shape& s);
Strides contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "(2, 3)"

// NumPy/PyTorch broadcasting: align from the right, sizes must match or be 1.
// Throws "[op] shapes (…) and (…) cannot be broadcast".
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Wraps a possibly negative dim into [0, ndim); throws "[op] dim d out of range for a
// tensor of ndim dimensions".
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

// Sorted, unique, wrapped dims; an empty list means "all dims".
std::vector<int64_t> wrap_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim);

}  // namespace kiln
