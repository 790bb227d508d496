#pragma once
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// Sizes, outermost first: a std::vector<int64_t> in every respect (its constructors,
// methods and comparisons; it converts to and from a vector both ways) that prints like
// torch.Size, with Kiln's name: `std::cout << x.sizes()` shows "kiln.Size([2, 3])". Being
// a class of namespace kiln, its operator<< is found without `using namespace kiln`.
class Shape : public std::vector<int64_t> {
 public:
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}             // NOLINT: implicit
  Shape(std::vector<int64_t>&& v) noexcept : std::vector<int64_t>(std::move(v)) {}  // NOLINT: implicit
};
std::ostream& operator<<(std::ostream& os, const Shape& s);  // "kiln.Size([2, 3])"

using Strides = std::vector<int64_t>;  // in elements, not bytes

// A single dim given as an integer (x.sum(-1)): any integral type but bool. Overloads
// taking one are templates so that a braced list ({0, 1}, {} or {0}) can never pick
// them: it always means the list-of-dims overload.
template <class T>
concept DimIndex = std::integral<T> && !std::same_as<T, bool>;
namespace detail {
// What such an overload passes on: sum(x, -1) is sum(x, {-1}).
template <DimIndex I>
std::vector<int64_t> dims_of(I dim) {
  return {static_cast<int64_t>(dim)};
}
}  // namespace detail

// These take any vector of sizes (a Shape, Strides or dims) without a copy.
// shape_numel throws "[numel] shape (…) has too many elements …" rather than wrap.
int64_t shape_numel(const std::vector<int64_t>& s);
Strides contiguous_strides(const std::vector<int64_t>& s);

// Sizes checked before a tensor of them exists. Every shape a tensor gets passes
// checked_numel: its sizes are non-negative and their product, zeros counted as ones,
// fits in int64, so numel, contiguous strides and element offsets never wrap.
// Throws "[op] negative dimension -1 in shape (…)" or "[op] shape (…) has too many
// elements: the product of its sizes overflows int64".
int64_t checked_numel(const char* op, const std::vector<int64_t>& s);
// checked_numel(op, s) * elem_size, at most INT64_MAX bytes, else
// "[op] shape (…) of N elements needs more than 2^63 bytes".
size_t checked_nbytes(const char* op, const std::vector<int64_t>& s, size_t elem_size);
// a * b and a + b of sizes or counts; "[op] size overflow: a * b does not fit in int64".
int64_t checked_mul(const char* op, int64_t a, int64_t b);
int64_t checked_add(const char* op, int64_t a, int64_t b);
std::string shape_str(const std::vector<int64_t>& s);  // "(2, 3)"

// NumPy/PyTorch broadcasting: align from the right, sizes must match or be 1.
// Throws "[op] shapes (…) and (…) cannot be broadcast", or checked_numel's error for a
// result too large.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// Whether broadcast_shapes would find the sizes compatible (for an op that words its
// own message).
bool can_broadcast(const Shape& a, const Shape& b);

// Wraps a possibly negative dim into [0, ndim); throws "[op] dim d out of range for a
// tensor of ndim dimensions".
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

// Sorted, unique, wrapped dims; an empty list means "all dims".
std::vector<int64_t> wrap_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim);

}  // namespace kiln
