// Unary elementwise ops and their derivatives.
#include <cmath>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

Tensor run_unary(const char* op, UnaryOp kind, const Tensor& x, double a = 0, double b = 0) {
  Tensor out = detail::new_tensor(x.shape(), x.dtype(), x);
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

}  // namespace kiln
