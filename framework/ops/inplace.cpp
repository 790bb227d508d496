// In-place ops, for optimizers and initialisers. They bump the storage's version so
// that a backward needing the old values fails loudly instead of computing garbage.
#include <cmath>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {

void detail::check_inplace(const char* op, const Tensor& self) {
  detail::check_defined(op, self);
  KILN_CHECK(!(is_grad_enabled() && self.requires_grad()), op,
             self.is_leaf() ? "a leaf tensor that requires grad" : "a tensor that is part of the graph",
             " cannot be modified in place while grad mode is on; wrap the update in NoGradGuard");
}

namespace {

// `other` broadcast to self's shape and cast to self's dtype, for an in-place update.
Tensor operand_for(const char* op, const Tensor& self, const Tensor& other) {
  detail::check_defined(op, other, "operand");
  Shape s = broadcast_shapes(op, self.shape(), other.shape());
  KILN_CHECK(s == self.shape(), op, "output of shape ", shape_str(self.shape()),
             " doesn't match the broadcast shape ", shape_str(s));
  KILN_CHECK(is_floating(self.dtype()) || !is_floating(other.dtype()), op, "result type ",
             dtype_name(other.dtype()), " can't be cast to the desired output type ", dtype_name(self.dtype()));
  Tensor o = other.detach();
  if (o.dtype() != self.dtype()) o = o.to(self.dtype());
  return o.shape() == s ? o : o.expand(s);
}

Tensor& binary_inplace(const char* op, BinaryOp kind, Tensor& self, const Tensor& other) {
  detail::check_inplace(op, self);
  Tensor o = operand_for(op, self, other);
  backend_of(op, {&self, &other}).binary(kind, self, o, self);
  self.bump_version();
  return self;
}

Tensor& unary_inplace(const char* op, UnaryOp kind, Tensor& self, double a, double b = 0) {
  detail::check_inplace(op, self);
  KILN_CHECK(self.dtype() != kBool, op, "not defined for bool tensors");
  backend_of(op, {&self}).unary(kind, self, self, a, b);
  self.bump_version();
  return self;
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  if (alpha == 1.0) return binary_inplace("add_", BinaryOp::Add, *this, o);
  NoGradGuard no_grad;
  return binary_inplace("add_", BinaryOp::Add, *this, kiln::mul(o.detach(), alpha));
}
Tensor& Tensor::sub_(const Tensor& o, double alpha) { return add_(o, -alpha); }
Tensor& Tensor::mul_(const Tensor& o) { return binary_inplace("mul_", BinaryOp::Mul, *this, o); }
Tensor& Tensor::div_(const Tensor& o) {
  KILN_CHECK(is_floating(dtype()), "div_", "true division into a ", dtype_name(dtype()), " tensor is not supported");
  return binary_inplace("div_", BinaryOp::Div, *this, o);
}
Tensor& Tensor::add_(double v) { return unary_inplace("add_", UnaryOp::AddScalar, *this, v); }
Tensor& Tensor::mul_(double v) { return unary_inplace("mul_", UnaryOp::MulScalar, *this, v); }
Tensor& Tensor::div_(double v) {
  KILN_CHECK(is_floating(dtype()), "div_", "true division into a ", dtype_name(dtype()), " tensor is not supported");
  return unary_inplace("div_", UnaryOp::MulScalar, *this, 1.0 / v);
}
Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  KILN_CHECK(lo || hi, "clamp_", "at least one of min and max must be given");
  constexpr double inf = std::numeric_limits<double>::infinity();
  return unary_inplace("clamp_", UnaryOp::Clamp, *this, lo.value_or(-inf), hi.value_or(inf));
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_inplace("copy_", *this);
  detail::check_defined("copy_", src, "source");
  Shape s = broadcast_shapes("copy_", shape(), src.shape());
  KILN_CHECK(s == shape(), "copy_", "source of shape ", shape_str(src.shape()),
             " cannot be broadcast to the destination's shape ", shape_str(shape()));
  Tensor sv = src.detach();
  if (sv.shape() != s) sv = sv.expand(s);
  Backend& be = backend_for(device().is_cpu() ? sv.device() : device());
  be.copy(sv, *this);
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double v) {
  detail::check_inplace("fill_", *this);
  backend_for(device()).fill(*this, v);
  bump_version();
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  detail::check_inplace("masked_fill_", *this);
  Tensor filled;
  {
    NoGradGuard no_grad;
    filled = kiln::masked_fill(detach(), mask, value);
  }
  backend_for(device()).copy(filled, *this);
  bump_version();
  return *this;
}

namespace {
// Fills self from a generator: directly if contiguous, else through a temporary.
template <class F>
Tensor& random_inplace(const char* op, Tensor& self, F fill) {
  detail::check_inplace(op, self);
  detail::check_floating(op, self);
  Generator& g = default_generator();
  uint64_t seed = g.seed();
  uint64_t block = g.reserve(static_cast<uint64_t>(self.numel()));
  Backend& be = backend_for(self.device());
  if (self.is_contiguous()) {
    fill(be, self, seed, block);
  } else {
    Tensor tmp = Tensor::empty(self.shape(), TensorOptions(self.dtype()).device(self.device()));
    fill(be, tmp, seed, block);
    be.copy(tmp, self);
  }
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::uniform_(double from, double to) {
  KILN_CHECK(from <= to, "uniform_", "expects from <= to, got from=", from, " to=", to);
  return random_inplace("uniform_", *this, [=](Backend& b, const Tensor& t, uint64_t s, uint64_t k) {
    b.uniform(t, s, k, from, to);
  });
}

Tensor& Tensor::normal_(double mean, double std) {
  KILN_CHECK(std >= 0, "normal_", "expects std >= 0, got ", std);
  return random_inplace("normal_", *this, [=](Backend& b, const Tensor& t, uint64_t s, uint64_t k) {
    b.normal(t, s, k, mean, std);
  });
}

}  // namespace kiln
