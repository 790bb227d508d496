#include "core/shape.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "core/error.h"

namespace kiln {

int64_t shape_numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const std::vector<int64_t>& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
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
  return out;
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
