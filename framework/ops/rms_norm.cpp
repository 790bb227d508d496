// rms_norm: x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape dims,
// torch.nn.functional.rms_norm. Composed from the differentiable ops, so it runs and
// differentiates on every backend; bfloat16 inputs are normalised in float32 and rounded
// back before the weight, as Llama's RMSNorm does.
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

// torch.finfo(dtype).eps: what eps=None means.
double machine_epsilon(DType dtype) {
  if (dtype == kFloat64) return std::numeric_limits<double>::epsilon();
  if (dtype == kBFloat16) return 0.0078125;  // 2^-7
  return std::numeric_limits<float>::epsilon();
}

void check_rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  detail::check_floating("rms_norm", x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim(), "rms_norm", "normalized_shape ", shape_str(normalized_shape),
             " does not fit an input of shape ", shape_str(x.shape()));
  KILN_CHECK(Shape(x.shape().end() - k, x.shape().end()) == normalized_shape, "rms_norm", "input of shape ",
             shape_str(x.shape()), " does not end with normalized_shape ", shape_str(normalized_shape));
  if (weight.defined()) {
    KILN_CHECK(weight.shape() == normalized_shape, "rms_norm", "weight of shape ", shape_str(weight.shape()),
               " does not match normalized_shape ", shape_str(normalized_shape));
    KILN_CHECK(weight.dtype() == x.dtype(), "rms_norm", "weight has dtype ", dtype_name(weight.dtype()),
               ", input has ", dtype_name(x.dtype()));
    KILN_CHECK(weight.device() == x.device(), "rms_norm", "weight is on ", weight.device().str(),
               ", input on ", x.device().str());
  }
  KILN_CHECK(eps >= 0, "rms_norm", "eps must be non-negative, got ", eps);
}

}  // namespace

// x (..., *normalized_shape), weight normalized_shape or undefined -> x's shape.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  const double e = eps.value_or(machine_epsilon(x.defined() ? x.dtype() : kFloat32));
  check_rms_norm(x, normalized_shape, weight, e);
  // Inference (nothing needs a gradient): the backend's one-pass kernel. Otherwise the
  // composition below, which autograd differentiates.
  if (!any_requires_grad({&x, &weight}) && (x.dtype() == kFloat32 || x.dtype() == kFloat64)) {
    Backend& be = backend_of("rms_norm", {&x, &weight});
    const int64_t n = shape_numel(normalized_shape), rows = n == 0 ? 0 : x.numel() / n;
    const Tensor y = Tensor::empty({rows, n}, TensorOptions(x.dtype()).device(x.device()));
    be.rms_norm(x.contiguous().detach().reshape({rows, n}), weight.defined() ? weight.contiguous().detach().reshape({n}) : Tensor(), e, y);
    return y.reshape(x.shape());
  }
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - static_cast<int64_t>(normalized_shape.size()); d < x.dim(); ++d) dims.push_back(d);
  const Tensor xf = x.dtype() == kBFloat16 ? x.to(kFloat32) : x;
  Tensor y = mul(xf, rsqrt(add(mean(mul(xf, xf), dims, /*keepdim=*/true), e)));
  if (y.dtype() != x.dtype()) y = y.to(x.dtype());
  return weight.defined() ? mul(y, weight) : y;
}

}  // namespace kiln
