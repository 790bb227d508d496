// Unary elementwise ops and their derivatives. The pointwise math ones at the end (with
// the Tensor methods of sin … expm1; the others' are in core/tensor.cpp):
//   sin … expm1: integer and bool inputs give float32, as torch; float32/float64 kept.
//   silu, softplus: floating inputs only (torch has no integer kernels for them).
#include <cmath>
#include <limits>
#include <numbers>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

Tensor run_unary(const char* op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  Tensor out = detail::new_tensor(x.shape(), x.dtype(), x, op);
  backend_of(op, {&x}).unary(kind, x, out, a, b);
  return out;
}

Tensor float_unary(const char* op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  detail::check_floating(op, x);
  return run_unary(op, kind, x, a, b);
}

Tensor run_binary_same(BinaryOp kind, const Tensor& g, const Tensor& saved) {
  Tensor gg = g.shape() == saved.shape() ? g : g.expand(saved.shape());
  Tensor out = detail::new_tensor(saved.shape(), saved.dtype(), saved);
  backend_of("backward", {&gg, &saved}).binary(kind, gg, saved, out);
  return out;
}

// x as a floating tensor: int64 and bool become float32 (torch's promotion for sin …
// expm1); float32/float64 stay.
Tensor as_floating(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  return is_floating(x.dtype()) ? x : x.to(kFloat32);
}

}  // namespace

Tensor neg(const Tensor& x) {
  detail::check_defined("neg", x);
  KILN_CHECK(x.dtype() != kBool, "neg", "negation of a bool tensor is not supported; use logical_not");
  Tensor y = run_unary("neg", UnaryOp::Neg, x);
  return record("neg", y, {x}, [](const Tensor& g) -> TensorList { return {neg(g)}; });
}

Tensor pow(const Tensor& x, double e) {
  Tensor y = float_unary("pow", UnaryOp::Pow, x, e);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "pow");
  return record("pow", y, {x}, [sx, e](const Tensor& g) -> TensorList {
    if (e == 0.0) return {zeros_like(g)};
    return {mul(g, mul(pow(sx.get(), e - 1.0), e))};
  });
}

Tensor exp(const Tensor& x) {
  Tensor y = float_unary("exp", UnaryOp::Exp, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "exp");
  return record("exp", y, {x}, [sy](const Tensor& g) -> TensorList { return {mul(g, sy.get())}; });
}

Tensor log(const Tensor& x) {
  Tensor y = float_unary("log", UnaryOp::Log, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "log");
  return record("log", y, {x}, [sx](const Tensor& g) -> TensorList { return {div(g, sx.get())}; });
}

Tensor sqrt(const Tensor& x) {
  Tensor y = float_unary("sqrt", UnaryOp::Sqrt, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "sqrt");
  return record("sqrt", y, {x}, [sy](const Tensor& g) -> TensorList {
    return {div(mul(g, 0.5), sy.get())};
  });
}

Tensor rsqrt(const Tensor& x) {
  Tensor y = float_unary("rsqrt", UnaryOp::Rsqrt, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "rsqrt");
  return record("rsqrt", y, {x}, [sy](const Tensor& g) -> TensorList {
    const Tensor& r = sy.get();  // d x^-1/2 = -1/2 x^-3/2 = -1/2 r^3
    return {mul(g, mul(pow(r, 3.0), -0.5))};
  });
}

Tensor abs(const Tensor& x) {
  detail::check_defined("abs", x);
  KILN_CHECK(x.dtype() != kBool, "abs", "not defined for bool tensors");
  Tensor y = run_unary("abs", UnaryOp::Abs, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "abs");
  return record("abs", y, {x}, [sx](const Tensor& g) -> TensorList { return {mul(g, sign(sx.get()))}; });
}

Tensor sign(const Tensor& x) {
  detail::check_defined("sign", x);
  KILN_CHECK(x.dtype() != kBool, "sign", "not defined for bool tensors");
  Tensor y = run_unary("sign", UnaryOp::Sign, x);
  return record("sign", y, {x}, [](const Tensor& g) -> TensorList { return {zeros_like(g)}; });
}

Tensor tanh(const Tensor& x) {
  Tensor y = float_unary("tanh", UnaryOp::Tanh, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "tanh");
  return record("tanh", y, {x}, [sy](const Tensor& g) -> TensorList {
    return {run_binary_same(BinaryOp::TanhBackward, g, sy.get())};
  });
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = float_unary("sigmoid", UnaryOp::Sigmoid, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "sigmoid");
  return record("sigmoid", y, {x}, [sy](const Tensor& g) -> TensorList {
    return {run_binary_same(BinaryOp::SigmoidBackward, g, sy.get())};
  });
}

Tensor relu(const Tensor& x) {
  detail::check_defined("relu", x);
  KILN_CHECK(x.dtype() != kBool, "relu", "not defined for bool tensors");
  Tensor y = run_unary("relu", UnaryOp::Relu, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "relu");  // y > 0 exactly where x > 0
  return record("relu", y, {x}, [sy](const Tensor& g) -> TensorList {
    return {run_binary_same(BinaryOp::ReluBackward, g, sy.get())};
  });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu",
             "approximate must be 'none' or 'tanh', got '", approximate, "'");
  bool tanh_form = approximate == "tanh";
  Tensor y = float_unary("gelu", tanh_form ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "gelu");
  return record("gelu", y, {x}, [sx, tanh_form](const Tensor& g) -> TensorList {
    return {run_binary_same(tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluErfBackward, g, sx.get())};
  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  detail::check_defined("clamp", x);
  KILN_CHECK(min || max, "clamp", "at least one of min and max must be given");
  KILN_CHECK(x.dtype() != kBool, "clamp", "not defined for bool tensors");
  constexpr double inf = std::numeric_limits<double>::infinity();
  double lo = min.value_or(-inf), hi = max.value_or(inf);
  // A fractional bound makes an int64 input float32, as a float scalar does in torch.
  bool to_float = !is_floating(x.dtype()) && (lo != std::floor(lo) || hi != std::floor(hi));
  Tensor y = run_unary("clamp", UnaryOp::Clamp, to_float ? x.to(kFloat32) : x, lo, hi);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "clamp");
  return record("clamp", y, {x}, [sx, lo, hi](const Tensor& g) -> TensorList {
    const Tensor& v = sx.get();
    Tensor inside = logical_and(ge(v, lo), le(v, hi));
    return {where(inside, g, 0.0)};
  });
}

// ---------------------------------------------------------------- pointwise math
Tensor sin(const Tensor& x_in) {
  Tensor x = as_floating("sin", x_in);
  Tensor y = run_unary("sin", UnaryOp::Sin, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "sin");
  return record("sin", y, {x}, [sx](const Tensor& g) -> TensorList { return {mul(g, cos(sx.get()))}; });
}

Tensor cos(const Tensor& x_in) {
  Tensor x = as_floating("cos", x_in);
  Tensor y = run_unary("cos", UnaryOp::Cos, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "cos");
  return record("cos", y, {x}, [sx](const Tensor& g) -> TensorList { return {mul(mul(g, sin(sx.get())), -1.0)}; });
}

Tensor tan(const Tensor& x_in) {
  Tensor x = as_floating("tan", x_in);
  Tensor y = run_unary("tan", UnaryOp::Tan, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "tan");  // tan' = 1 + tan², from the output as torch
  return record("tan", y, {x}, [sy](const Tensor& g) -> TensorList {
    const Tensor& t = sy.get();
    return {mul(g, add(mul(t, t), 1.0))};
  });
}

Tensor erf(const Tensor& x_in) {
  Tensor x = as_floating("erf", x_in);
  Tensor y = run_unary("erf", UnaryOp::Erf, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "erf");
  return record("erf", y, {x}, [sx](const Tensor& g) -> TensorList {
    const Tensor& v = sx.get();  // erf' = 2/√π · exp(-x²)
    return {mul(g, mul(exp(mul(mul(v, v), -1.0)), 2.0 * std::numbers::inv_sqrtpi))};
  });
}

Tensor log1p(const Tensor& x_in) {
  Tensor x = as_floating("log1p", x_in);
  Tensor y = run_unary("log1p", UnaryOp::Log1p, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "log1p");
  return record("log1p", y, {x}, [sx](const Tensor& g) -> TensorList { return {div(g, add(sx.get(), 1.0))}; });
}

Tensor expm1(const Tensor& x_in) {
  Tensor x = as_floating("expm1", x_in);
  Tensor y = run_unary("expm1", UnaryOp::Expm1, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, "expm1");  // expm1' = exp(x) = y + 1
  return record("expm1", y, {x}, [sy](const Tensor& g) -> TensorList { return {mul(g, add(sy.get(), 1.0))}; });
}

Tensor silu(const Tensor& x) {
  Tensor y = float_unary("silu", UnaryOp::Silu, x);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "silu");
  return record("silu", y, {x}, [sx](const Tensor& g) -> TensorList {
    return {run_binary_same(BinaryOp::SiluBackward, g, sx.get())};  // one fused pass: g · s (1 + x (1 - s))
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  detail::check_floating("softplus", x);
  KILN_CHECK(beta != 0 && !std::isnan(beta), "softplus", "beta must be a non-zero number, got ", beta);
  Tensor y = run_unary("softplus", UnaryOp::Softplus, x, beta, threshold);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, "softplus");
  return record("softplus", y, {x}, [sx, beta, threshold](const Tensor& g) -> TensorList {
    // d/dx = sigmoid(βx), and 1 where softplus is linear (βx > threshold).
    Tensor z = mul(sx.get(), beta);
    return {where(gt(z, threshold), g, mul(g, sigmoid(z)))};
  });
}

}  // namespace kiln
