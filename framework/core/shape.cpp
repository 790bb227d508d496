#include "core/shape.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "core/error.h"

namespace kiln {

int64_t shape_numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    // A tensor's shape was checked when it was made; this catches a shape that never was.
    if (__builtin_mul_overflow(n, d, &n)) checked_numel("numel", s);
  }
  return n;
}

Strides contiguous_strides(const std::vector<int64_t>& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    if (__builtin_mul_overflow(acc, std::max<int64_t>(s[i], 1), &acc)) checked_numel("contiguous", s);
  }
  return st;
}

int64_t checked_numel(const char* op, const std::vector<int64_t>& s) {
  // The product with zeros counted as ones bounds every contiguous stride too: a shape
  // (0, 2^40, 2^40) has no elements but strides that would not fit.
  int64_t span = 1;
  bool empty = false;
  for (int64_t d : s) {
    KILN_CHECK(d >= 0, op, "negative dimension ", d, " in shape ", shape_str(s));
    empty = empty || d == 0;
    KILN_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span), op, "shape ", shape_str(s),
               " has too many elements: the product of its sizes overflows int64");
  }
  return empty ? 0 : span;
}

size_t checked_nbytes(const char* op, const std::vector<int64_t>& s, size_t elem_size) {
  const int64_t n = checked_numel(op, s);
  int64_t bytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(n, static_cast<int64_t>(elem_size), &bytes), op, "shape ", shape_str(s),
             " of ", n, " elements of ", elem_size, " bytes needs more than 2^63 bytes");
  return static_cast<size_t>(bytes);
}

int64_t checked_mul(const char* op, int64_t a, int64_t b) {
  int64_t r = 0;
  KILN_CHECK(!__builtin_mul_overflow(a, b, &r), op, "size overflow: ", a, " * ", b, " does not fit in int64");
  return r;
}

int64_t checked_add(const char* op, int64_t a, int64_t b) {
  int64_t r = 0;
  KILN_CHECK(!__builtin_add_overflow(a, b, &r), op, "size overflow: ", a, " + ", b, " does not fit in int64");
  return r;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << '(';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  if (s.size() == 1) os << ',';
  os << ')';
  return os.str();
}

// Like torch.Size's repr, under Kiln's name: "kiln.Size([2, 3])", "kiln.Size([])".
std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << "kiln.Size([";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << "])";
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, "shapes ", shape_str(a), " and ",
               shape_str(b), " cannot be broadcast");
    out[i] = da == 1 ? db : da;
  }
  // (2^32, 1) and (1, 2^32) are each fine; their broadcast is not.
  checked_numel(op, out);
  return out;
}

bool can_broadcast(const Shape& a, const Shape& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 1; i <= n; ++i) {
    const int64_t da = a[a.size() - i], db = b[b.size() - i];
    if (da != db && da != 1 && db != 1) return false;
  }
  return true;
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1, as PyTorch
  KILN_CHECK(dim >= -n && dim < n, op, "dim ", dim, " out of range for a tensor of ", ndim,
             " dimension", ndim == 1 ? "" : "s");
  return dim < 0 ? dim + n : dim;
}

std::vector<int64_t> wrap_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (int64_t d : dims) out.push_back(wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, "dim ",
             *std::adjacent_find(out.begin(), out.end()), " appears more than once");
  return out;
}

}  // namespace kiln
