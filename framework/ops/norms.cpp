// std and the vector p-norm. Both compute their forward from existing reductions and
// record a backward of their own: the compositions' derivatives are NaN (0 · inf) where
// the result is 0, and torch's subgradient there is 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// All dims when `dims` is empty; otherwise wrapped and sorted (repeats are an error).
std::vector<int64_t> reduce_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  if (dims.empty() || ndim == 0) {
    if (!dims.empty()) wrap_dims(op, dims, ndim);  // still reject out-of-range dims of a 0-d tensor
    std::vector<int64_t> all(ndim);
    for (int64_t i = 0; i < ndim; ++i) all[i] = i;
    return all;
  }
  return wrap_dims(op, dims, ndim);
}

// sqrt with the gradient g / (2 y), taken as 0 where y = 0.
Tensor sqrt_zero_safe(const Tensor& v) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = sqrt(v.detach());
  }
  if (!any_requires_grad({&v})) return y;
  SavedTensor sy(y, "std");
  return record("std", y, {v}, [sy](const Tensor& g) -> TensorList {
    const Tensor& r = sy.get();
    return {where(eq(r, 0.0), zeros_like(g), div(g, mul(r, 2.0)))};
  });
}

// "inf", "-inf", "0.5": p as torch prints it in the norm's messages.
std::string p_str(double p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// p < 0 and ±inf norms have no value over nothing (no identity): torch refuses them.
void check_identity(const Tensor& x, double p, const std::vector<int64_t>& dims) {
  if (p >= 0 && !std::isinf(p)) return;
  if (x.numel() != 0) return;
  KILN_CHECK(dims.size() != static_cast<size_t>(x.dim()), "norm", "cannot compute the ",
             p_str(p), " norm of an empty tensor of shape ", shape_str(x.shape()),
             " (the operation has no identity)");
  for (int64_t d : dims)
    KILN_CHECK(x.size(d) != 0, "norm", "cannot compute the ", p_str(p), " norm over dim ", d,
               ", which is empty (shape ", shape_str(x.shape()), "; the operation has no identity)");
}

// The forward value (keepdim shape), without history.
Tensor norm_value(const Tensor& x, double p, const std::vector<int64_t>& dims) {
  NoGradGuard no_grad;
  if (x.numel() == 0) return sum(abs(x), dims, true);  // 0 over empty dims, else an empty result
  if (p == 2.0) return sqrt(sum(mul(x, x), dims, true));
  if (p == 1.0) return sum(abs(x), dims, true);
  if (p == kInf) return amax(abs(x), dims, true);
  if (p == -kInf) return amin(abs(x), dims, true);
  if (p == 0.0) return sum(ne(x, 0.0), dims, true).to(x.dtype());
  return pow(sum(pow(abs(x), p), dims, true), 1.0 / p);
}

// d norm / d x times g, all in x's shape: x, g and y = norm (keepdim shape).
Tensor norm_grad(const Tensor& x, const Tensor& g, const Tensor& y, double p, const std::vector<int64_t>& dims) {
  Tensor zero = zeros({}, TensorOptions(x.dtype()).device(x.device()));
  if (p == 1.0) return mul(sign(x), g);
  if (p == 2.0) return mul(x, where(eq(y, 0.0), zero, div(g, y)));
  if (std::isinf(p)) {
    // max / min |x|: shared evenly among the elements at the extremum (or NaN).
    Tensor ax = abs(x);
    Tensor hit = logical_or(eq(ax, y), ne(ax, ax));
    Tensor share = div(g, sum(hit, dims, true).to(x.dtype()));
    return mul(sign(x), where(hit, share, zero));
  }
  Tensor ax = abs(x);
  if (p < 1.0) {
    // sgn(x) |x|^(p-1) y^(1-p) g, with |x|^(p-1) (infinite at 0) taken as 0 at x = 0.
    Tensor scaled = mul(sign(x), where(eq(x, 0.0), zero, pow(ax, p - 1.0)));
    return mul(scaled, mul(g, pow(y, 1.0 - p)));
  }
  // sgn(x) |x|^(p-1) g / y^(p-1), taken as 0 where y = 0.
  Tensor scale = where(eq(y, 0.0), zero, div(g, pow(y, p - 1.0)));
  return mul(mul(sign(x), pow(ax, p - 1.0)), scale);
}

}  // namespace

// x (…) -> x reduced over dims (kept as size 1 with keepdim)
Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  detail::check_floating("std", x);
  // One kernel in torch, which computes bfloat16 in float32 and rounds once.
  if (x.dtype() == kBFloat16) return kiln::std(x.to(kFloat32), dims, correction, keepdim).to(kBFloat16);
  return sqrt_zero_safe(var(x, reduce_dims("std", dims, x.dim()), correction, keepdim));
}

// x (…) -> x reduced over dims (all when empty; kept as size 1 with keepdim)
Tensor norm(const Tensor& x, double p, const std::vector<int64_t>& dims_in, bool keepdim) {
  const char* op = "norm";
  detail::check_floating(op, x);
  KILN_CHECK(!std::isnan(p), op, "p must be a number, got nan");
  // One kernel in torch, which computes bfloat16 in float32 and rounds once.
  if (x.dtype() == kBFloat16) return norm(x.to(kFloat32), p, dims_in, keepdim).to(kBFloat16);
  const std::vector<int64_t> dims = reduce_dims(op, dims_in, x.dim());
  check_identity(x, p, dims);
  Tensor yk = norm_value(x.detach(), p, dims);  // keepdim shape
  Shape out_shape = yk.shape();
  if (!keepdim) {
    out_shape.clear();
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) out_shape.push_back(x.size(d));
  }
  Tensor y = yk.reshape(out_shape);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, op), sy(yk, op);
  const Shape keep_shape = yk.shape();
  return record(op, y, {x}, [sx, sy, p, dims, keep_shape](const Tensor& g) -> TensorList {
    if (p == 0.0) return {Tensor()};  // a count: no gradient, as torch
    return {norm_grad(sx.get(), g.reshape(keep_shape), sy.get(), p, dims)};
  });
}

}  // namespace kiln
