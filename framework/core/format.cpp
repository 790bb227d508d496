// Printing tensors the way PyTorch does: tensor([[ 1.5000, -2.0000], ...], dtype=…).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "autograd/node.h"
#include "ops/ops.h"

namespace kiln {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;  // more elements: show 3 at each edge
constexpr int64_t kEdgeItems = 3;

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

Style choose_style(const std::vector<double>& vals, DType dtype) {
  Style s;
  if (dtype == kBool) s.kind = Style::Bool;
  else if (dtype == kInt64) s.kind = Style::Int;
  else {
    bool all_int = true;
    double lo = INFINITY, hi = 0;
    for (double v : vals) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) all_int = false;
      double a = std::abs(v);
      if (a != 0) lo = std::min(lo, a), hi = std::max(hi, a);
    }
    if (all_int) s.kind = hi > 1e8 ? Style::Sci : Style::FloatInt;
    else s.kind = (hi > 1e8 || (lo != INFINITY && (hi / lo > 1000 || lo < 1e-4))) ? Style::Sci : Style::Fixed;
  }
  for (double v : vals) s.width = std::max<int>(s.width, static_cast<int>(format_value(v, s).size()));
  return s;
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
    std::string v = format_value(t.item(), s);
    os << std::string(s.width - v.size(), ' ') << v;
    return;
  }
  os << '[';
  std::vector<int64_t> idx = shown(t.size(0), summarize);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      os << ',';
      if (t.dim() == 1) os << ' ';
      else os << std::string(t.dim() - 1, '\n') << std::string(indent + 1, ' ');
    }
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
  bool summarize = t.numel() > kSummarizeThreshold;
  if (t.numel() == 0) {
    os << "[]";
    if (t.dim() != 1) os << ", size=" << shape_str(t.shape());
  } else {
    std::vector<double> vals;
    collect(t, summarize, vals);
    render(os, t, choose_style(vals, t.dtype()), summarize, 7);
  }
  if (dtype() == kFloat64) os << ", dtype=kiln.float64";
  if (!device().is_cpu()) os << ", device='" << device().str() << "'";
  if (grad_fn()) os << ", grad_fn=<" << backward_name(grad_fn()->name()) << '>';
  else if (requires_grad()) os << ", requires_grad=True";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
