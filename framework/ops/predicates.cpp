// Predicates: isnan, isinf, isfinite (elementwise, bool results) and all, any (bool
// reductions), composed from comparisons and integer sums. None has a gradient.
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {

namespace {
// A bool tensor of x's shape filled with `value` (integers are never NaN or infinite).
Tensor constant_mask(const Tensor& x, bool value) {
  return full(x.shape(), value ? 1.0 : 0.0, TensorOptions(kBool).device(x.device()));
}
}  // namespace

Tensor isnan(const Tensor& x) {
  detail::check_defined("isnan", x);
  NoGradGuard no_grad;
  return is_floating(x.dtype()) ? ne(x.detach(), x.detach()) : constant_mask(x, false);
}

Tensor isinf(const Tensor& x) {
  detail::check_defined("isinf", x);
  NoGradGuard no_grad;
  return is_floating(x.dtype()) ? eq(abs(x.detach()), std::numeric_limits<double>::infinity())
                                : constant_mask(x, false);
}

Tensor isfinite(const Tensor& x) {
  detail::check_defined("isfinite", x);
  NoGradGuard no_grad;
  // |x| < inf: false for ±inf and for NaN (every comparison with NaN is false).
  return is_floating(x.dtype()) ? lt(abs(x.detach()), std::numeric_limits<double>::infinity())
                                : constant_mask(x, true);
}

// A nonzero element (NaN included) counts as true, as in torch.all / torch.any.
Tensor all(const Tensor& x) {
  detail::check_defined("all", x);
  NoGradGuard no_grad;
  return eq(sum(ne(x.detach(), 0.0)), static_cast<double>(x.numel()));
}

Tensor all(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("all", x);
  NoGradGuard no_grad;
  const int64_t d = wrap_dim("all", dim, x.dim() == 0 ? 1 : x.dim());
  const double n = x.dim() == 0 ? 1.0 : static_cast<double>(x.size(d));
  return eq(sum(ne(x.detach(), 0.0), {dim}, keepdim), n);
}

Tensor any(const Tensor& x) {
  detail::check_defined("any", x);
  NoGradGuard no_grad;
  return gt(sum(ne(x.detach(), 0.0)), 0.0);
}

Tensor any(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("any", x);
  NoGradGuard no_grad;
  return gt(sum(ne(x.detach(), 0.0), {dim}, keepdim), 0.0);
}

}  // namespace kiln
