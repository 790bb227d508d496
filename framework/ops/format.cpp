// Printing tensors the way PyTorch does: tensor([[ 1.5000, -2.0000], ...], dtype=…).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "ops/ops.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;  // more elements: show 3 at each edge
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

struct Style {
  enum Kind { Int, Bool, FloatInt, Fixed, Sci } kind = Fixed;
  int width = 0;
};

std::string format_value(double v, const Style& s) {
  char buf[64];
  switch (s.kind) {
    case Style::Bool: return v != 0 ? "True" : "False";
    case Style::Int: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v)); break;
    case Style::FloatInt:
      if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.0f.", v);
      else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
      break;
    case Style::Fixed:
      if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.4f", v);
      else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
      break;
    case Style::Sci:
      if (std::isfinite(v)) std::snprintf(buf, sizeof buf, "%.4e", v);
      else std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
      break;
  }
  return buf;
}

// As torch's _Formatter: for floats only the nonzero finite values choose the mode and
// the width (nan, inf and zeros are padded to it, never widen it).
Style choose_style(const std::vector<double>& vals, DType dtype) {
  Style s;
  s.width = 1;
  if (dtype == kBool || dtype == kInt64) {
    s.kind = dtype == kBool ? Style::Bool : Style::Int;
    for (double v : vals) s.width = std::max<int>(s.width, static_cast<int>(format_value(v, s).size()));
    return s;
  }
  s.kind = Style::FloatInt;
  bool all_int = true, any = false;
  double lo = INFINITY, hi = 0;
  for (double v : vals) {
    if (!std::isfinite(v) || v == 0) continue;
    any = true;
    if (v != std::ceil(v)) all_int = false;
    double a = std::abs(v);
    lo = std::min(lo, a), hi = std::max(hi, a);
  }
  if (!any) return s;
  if (hi / lo > 1000 || hi > 1e8 || (!all_int && lo < 1e-4)) s.kind = Style::Sci;
  else s.kind = all_int ? Style::FloatInt : Style::Fixed;
  for (double v : vals) {
    if (!std::isfinite(v) || v == 0) continue;
    s.width = std::max<int>(s.width, static_cast<int>(format_value(v, s).size()));
  }
  return s;
}

// A value right-aligned to the style's width.
std::string padded(double v, const Style& s) {
  std::string str = format_value(v, s);
  return std::string(std::max<int>(0, s.width - static_cast<int>(str.size())), ' ') + str;
}

// Indices shown along a dim of size n: all, or the edges when summarising.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);  // the ellipsis
    for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
  }
  return idx;
}

void collect(const Tensor& t, bool summarize, std::vector<double>& out) {
  if (t.dim() == 0) {
    out.push_back(t.item());
    return;
  }
  for (int64_t i : shown(t.size(0), summarize))
    if (i >= 0) collect(t.select(0, i), summarize, out);
}

void render(std::ostream& os, const Tensor& t, const Style& s, bool summarize, int indent) {
  if (t.dim() == 0) {
    os << padded(t.item(), s);
    return;
  }
  os << '[';
  std::vector<int64_t> idx = shown(t.size(0), summarize);
  if (t.dim() == 1) {
    // As torch's _vector_str: as many elements per line as fit in kLineWidth, and the
    // ellipsis is an element of its own (" ...").
    const int per_line = std::max(1, (kLineWidth - indent) / (s.width + 2));
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) os << (k % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : std::string(", "));
      os << (idx[k] < 0 ? std::string(" ...") : padded(t.at({idx[k]}), s));
    }
    os << ']';
    return;
  }
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) os << ',' << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
    if (idx[k] < 0) {
      os << "...";
      continue;
    }
    render(os, t.select(0, idx[k]), s, summarize, indent + 1);
  }
  os << ']';
}

std::string backward_name(const char* op) {
  std::string out;
  bool upper = true;
  for (const char* c = op; *c; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(*c)) : *c;
    upper = false;
  }
  return out + "Backward";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard no_grad;
  Tensor t = device().is_cpu() ? detach() : to(kCPU).detach();
  std::ostringstream os;
  os << "tensor(";
  const int indent = 7;  // strlen("tensor(")
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  if (t.numel() == 0) {
    os << "[]";
    // An empty tensor shows its shape unless (0,), and its dtype: nothing to infer it from.
    if (t.dim() != 1) suffixes.push_back("size=" + shape_str(t.shape()));
    if (dtype() != kFloat32) suffixes.push_back(std::string("dtype=kiln.") + dtype_name(dtype()));
  } else {
    bool summarize = t.numel() > kSummarizeThreshold;
    std::vector<double> vals;
    collect(t, summarize, vals);
    render(os, t, choose_style(vals, t.dtype()), summarize, indent);
    // As torch: float32, int64 and bool values show their dtype; the others name it.
    if (dtype() == kFloat64 || dtype() == kBFloat16)
      suffixes.push_back(std::string("dtype=kiln.") + dtype_name(dtype()));
  }
  if (grad_fn()) suffixes.push_back("grad_fn=<" + backward_name(grad_fn()->name()) + ">");
  else if (requires_grad()) suffixes.push_back("requires_grad=True");
  // As torch's _add_suffixes: a suffix that would pass kLineWidth starts a new line.
  std::string out = os.str();
  size_t nl = out.rfind('\n');
  int64_t last_line = static_cast<int64_t>(out.size()) - (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& suffix : suffixes) {
    const auto len = static_cast<int64_t>(suffix.size());
    if (last_line + len + 2 > kLineWidth) {
      out += ",\n" + std::string(indent, ' ') + suffix;
      last_line = indent + len;
    } else {
      out += ", " + suffix;
      last_line += len + 2;
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
