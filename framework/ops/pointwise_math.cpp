// Pointwise math: sin, cos, tan, erf, log1p, expm1, silu, softplus, their derivatives
// and their Tensor methods. Each is (…) -> (…), same shape.
//   sin … expm1: integer and bool inputs give float32, as torch; float32/float64 kept.
//   silu, softplus: floating inputs only (torch has no integer kernels for them).
#include <cmath>
#include <numbers>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

// x as a floating tensor: int64 and bool become float32 (torch's promotion for these
// functions); float32/float64 stay.
Tensor as_floating(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  return is_floating(x.dtype()) ? x : x.to(kFloat32);
}

// y (x's shape) = kind(x), x floating.
Tensor run_math(const char* op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  Tensor y = detail::new_tensor(x.shape(), x.dtype(), x);
  backend_of(op, {&x}).unary(kind, x, y, a, b);
  return y;
}

}  // namespace

Tensor sin(const Tensor& x_in) {
  Tensor x = as_floating("sin", x_in);
  Tensor y = run_math("sin", UnaryOp::Sin, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "sin");
  return record("sin", y, {x}, [sx](const Tensor& g) -> TensorList { return {mul(g, cos(sx.get()))}; });
}

Tensor cos(const Tensor& x_in) {
  Tensor x = as_floating("cos", x_in);
  Tensor y = run_math("cos", UnaryOp::Cos, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "cos");
  return record("cos", y, {x}, [sx](const Tensor& g) -> TensorList { return {mul(mul(g, sin(sx.get())), -1.0)}; });
}

Tensor tan(const Tensor& x_in) {
  Tensor x = as_floating("tan", x_in);
  Tensor y = run_math("tan", UnaryOp::Tan, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "tan");  // tan' = 1 + tan², from the output as torch
  return record("tan", y, {x}, [sy](const Tensor& g) -> TensorList {
    const Tensor& t = sy.get();
    return {mul(g, add(mul(t, t), 1.0))};
  });
}

Tensor erf(const Tensor& x_in) {
  Tensor x = as_floating("erf", x_in);
  Tensor y = run_math("erf", UnaryOp::Erf, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "erf");
  return record("erf", y, {x}, [sx](const Tensor& g) -> TensorList {
    const Tensor& v = sx.get();  // erf' = 2/√π · exp(-x²)
    return {mul(g, mul(exp(mul(mul(v, v), -1.0)), 2.0 * std::numbers::inv_sqrtpi))};
  });
}

Tensor log1p(const Tensor& x_in) {
  Tensor x = as_floating("log1p", x_in);
  Tensor y = run_math("log1p", UnaryOp::Log1p, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "log1p");
  return record("log1p", y, {x}, [sx](const Tensor& g) -> TensorList { return {div(g, add(sx.get(), 1.0))}; });
}

Tensor expm1(const Tensor& x_in) {
  Tensor x = as_floating("expm1", x_in);
  Tensor y = run_math("expm1", UnaryOp::Expm1, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "expm1");  // expm1' = exp(x) = y + 1
  return record("expm1", y, {x}, [sy](const Tensor& g) -> TensorList { return {mul(g, add(sy.get(), 1.0))}; });
}

Tensor silu(const Tensor& x) {
  detail::check_floating("silu", x);
  Tensor y = run_math("silu", UnaryOp::Silu, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "silu");
  return record("silu", y, {x}, [sx](const Tensor& g) -> TensorList {
    // One fused pass: g · s (1 + x (1 - s)).
    const Tensor& v = sx.get();
    Tensor gg = g.shape() == v.shape() ? g : g.expand(v.shape());
    Tensor gx = detail::new_tensor(v.shape(), v.dtype(), v);
    backend_of("silu", {&gg, &v}).binary(BinaryOp::SiluBackward, gg, v, gx);
    return {gx};
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  detail::check_floating("softplus", x);
  KILN_CHECK(beta != 0 && !std::isnan(beta), "softplus", "beta must be a non-zero number, got ", beta);
  Tensor y = run_math("softplus", UnaryOp::Softplus, x, beta, threshold);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "softplus");
  return record("softplus", y, {x}, [sx, beta, threshold](const Tensor& g) -> TensorList {
    // d/dx = sigmoid(βx), and 1 where softplus is linear (βx > threshold).
    Tensor z = mul(sx.get(), beta);
    return {where(gt(z, threshold), g, mul(g, sigmoid(z)))};
  });
}

Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tan() const { return kiln::tan(*this); }
Tensor Tensor::erf() const { return kiln::erf(*this); }
Tensor Tensor::log1p() const { return kiln::log1p(*this); }
Tensor Tensor::expm1() const { return kiln::expm1(*this); }

}  // namespace kiln
