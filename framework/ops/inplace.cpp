// In-place ops, with torch's autograd rules (see apply_inplace in op_helpers.h): each
// bumps the storage's version so that a backward needing the old values fails loudly,
// and under grad mode an op on a tensor in the graph is recorded.
#include <cmath>
#include <limits>

#include "autograd/views.h"
#include "ops/op_helpers.h"

namespace kiln {

// ---------------------------------------------------------------- the in-place path
namespace {
// Whether several elements of t sit at one memory location: a dim of size > 1 with
// stride 0, as expand makes.
bool elements_share_memory(const TensorImpl& t) {
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.strides[d] == 0 && t.shape[d] > 1) return true;
  return false;
}
}  // namespace

bool detail::inplace_prologue(const char* op, const Tensor& self, std::initializer_list<const Tensor*> operands) {
  detail::check_defined(op, self);
  const TensorImpl& s = *self.impl();
  KILN_CHECK(!elements_share_memory(s), op, "unsupported operation: more than one element of the written-to tensor "
             "(shape ", shape_str(s.shape), ", strides ", shape_str(s.strides),
             ") refers to a single memory location; clone() it first");
  if (!is_grad_enabled() || !(self.requires_grad() || any_requires_grad(operands))) return false;
  KILN_CHECK(!(s.requires_grad && self.is_leaf()), op,
             "a leaf tensor that requires grad is being used in an in-place operation");
  KILN_CHECK(!s.view_no_grad, op,
             "a view made under NoGradGuard is being modified in place with grad mode on, so its base's "
             "history cannot follow; make the view with grad mode on, or clone() it");
  if (s.view_base) {
    const TensorImpl& b = *s.view_base;
    KILN_CHECK(!(b.requires_grad && !b.grad_fn), op,
               "a view of a leaf tensor that requires grad is being used in an in-place operation");
    KILN_CHECK(!elements_share_memory(b), op, "in-place on a view of a tensor whose elements share memory (shape ",
               shape_str(b.shape), ", strides ", shape_str(b.strides), ") is not supported");
  }
  return true;
}

detail::InplaceEdges detail::inplace_edges(const Tensor& self, std::initializer_list<const Tensor*> operands) {
  InplaceEdges e;
  const TensorImpl& s = *self.impl();
  e.self_edge = s.view_base ? gradient_edge(Tensor(s.view_base)) : gradient_edge(self);
  e.operands.reserve(operands.size());
  for (const Tensor* o : operands) e.operands.push_back(o ? gradient_edge(*o) : nullptr);
  return e;
}

void detail::inplace_record(const char* op, const Tensor& self, InplaceEdges edges, BackwardFn fn) {
  TensorImpl& s = *self.impl();
  if (s.view_base) {
    rebase_view(op, self, std::move(edges.self_edge), std::move(edges.operands), std::move(fn));
    return;
  }
  auto node = std::make_shared<FunctionNode>(op, std::move(fn));
  node->next.reserve(1 + edges.operands.size());
  node->next.push_back(std::move(edges.self_edge));
  for (auto& e : edges.operands) node->next.push_back(std::move(e));
  // retain_grad() follows the tensor: .grad() is the gradient of its new value.
  if (s.grad_fn && s.grad_fn->retained_output.lock().get() == &s) {
    node->retained_output = s.grad_fn->retained_output;
    s.grad_fn->retained_output.reset();
  }
  s.grad_fn = std::move(node);
}

void detail::check_inplace(const char* op, const Tensor& self) {
  detail::check_defined(op, self);
  if (!is_grad_enabled() || !self.requires_grad()) return;
  KILN_CHECK(!self.is_leaf(), op,
             "a leaf tensor that requires grad is being used in an in-place operation (under NoGradGuard, "
             "as in an optimizer step, it is allowed)");
  KILN_FAIL(op, "does not record in-place changes yet: a tensor in the graph cannot be modified by it while "
                "grad mode is on");
}

namespace {

using detail::apply_inplace;

// `other` broadcast to self's shape and cast to self's dtype, for an in-place update.
Tensor operand_for(const char* op, const Tensor& self, const Tensor& other) {
  detail::check_defined(op, self);
  detail::check_defined(op, other, "operand");
  const bool same_shape = other.shape() == self.shape();
  if (!same_shape) {
    Shape s = broadcast_shapes(op, self.shape(), other.shape());
    KILN_CHECK(s == self.shape(), op, "output of shape ", shape_str(self.shape()),
               " doesn't match the broadcast shape ", shape_str(s));
  }
  KILN_CHECK(is_floating(self.dtype()) || !is_floating(other.dtype()), op, "result type ",
             dtype_name(other.dtype()), " can't be cast to the desired output type ", dtype_name(self.dtype()));
  // Only the write reads the result (backward keeps `other`), so an operand that fits
  // already is used as it is: no new handle, the common case of an optimizer step.
  // Into bfloat16, a wider float operand computes in float32 (rounded once on store,
  // by backend_for's wrapper), as torch computes in the promoted type.
  const DType want = self.dtype() == kBFloat16 && is_floating(other.dtype()) ? kFloat32 : self.dtype();
  if (same_shape && (other.dtype() == self.dtype() || other.dtype() == want)) return other;
  Tensor o = other.detach();  // converted without recording
  if (o.dtype() != self.dtype() && o.dtype() != want) o = o.to(want);
  return same_shape ? o : o.expand(self.shape());
}

// The gradient of an operand from one of self's shape: summed over what was broadcast,
// in the operand's dtype.
Tensor operand_grad(const Tensor& g, const Shape& shape, DType dtype) { return sum_to(g, shape).to(dtype); }

void check_not_bool(const char* op, const Tensor& self) {
  detail::check_defined(op, self);
  KILN_CHECK(self.dtype() != kBool, op, "not defined for bool tensors");
}

void check_true_division(const Tensor& self) {
  detail::check_defined("div_", self);
  KILN_CHECK(is_floating(self.dtype()), "div_", "true division into a ", dtype_name(self.dtype()),
             " tensor is not supported");
}

// self = self <kind> (scale * other), other broadcast to self's shape and cast to its
// dtype (operand_for); recorded as `op` with make_backward (apply_inplace).
template <class MakeBackward>
Tensor& binary_inplace(const char* op, BinaryOp kind, Tensor& self, const Tensor& other, double scale,
                       MakeBackward&& make_backward) {
  Tensor o = operand_for(op, self, other);
  if (scale != 1.0) {
    NoGradGuard no_grad;
    if (o.dtype() == kBFloat16) {
      // Into bfloat16 (add_, sub_ with alpha), as add: self + alpha·other in float32 with
      // alpha rounded to bfloat16, rounded once.
      o = kiln::mul(o.to(kFloat32), static_cast<double>(static_cast<float>(bfloat16(scale))));
    } else {
      o = kiln::mul(o, scale);
    }
  }
  return apply_inplace(
      op, self, {&other}, [&] { backend_of(op, {&self, &o}).binary(kind, self, o, self); },
      std::forward<MakeBackward>(make_backward));
}

// self += alpha * other, recorded as `op` (add_ or sub_).
Tensor& add_scaled(const char* op, Tensor& self, const Tensor& other, double alpha) {
  return binary_inplace(op, BinaryOp::Add, self, other, alpha, [&]() -> BackwardFn {
    Shape so = other.shape();
    DType dt = other.dtype();
    bool go = detail::needs_grad(other);
    return [=](const Tensor& g) -> TensorList {
      return {g, go ? operand_grad(alpha == 1.0 ? g : mul(g, alpha), so, dt) : Tensor()};
    };
  });
}

// self = self <op> v for a scalar v through a unary kernel; the gradient is g * slope.
Tensor& scalar_inplace(const char* op, UnaryOp kind, Tensor& self, double v, double slope) {
  check_not_bool(op, self);
  return apply_inplace(
      op, self, {},
      [&] { backend_of(op, {&self}).unary(kind, self, self, detail::kernel_scalar(kind, self.dtype(), v), 0); },
      [&]() -> BackwardFn {
        return [slope](const Tensor& g) -> TensorList { return {slope == 1.0 ? g : mul(g, slope)}; };
      });
}

// The gradient of self's old value for ops that overwrite it entirely: zero.
BackwardFn zero_grad_fn() {
  return [](const Tensor& g) -> TensorList { return {zeros_like(g)}; };
}

}  // namespace

// ---------------------------------------------------------------- arithmetic
// self (S) op other (broadcastable to S) -> self (S)
Tensor& Tensor::add_(const Tensor& o, double alpha) { return add_scaled("add_", *this, o, alpha); }
Tensor& Tensor::sub_(const Tensor& o, double alpha) { return add_scaled("sub_", *this, o, -alpha); }
Tensor& Tensor::add_(double v) { return scalar_inplace("add_", UnaryOp::AddScalar, *this, v, 1.0); }
Tensor& Tensor::sub_(double v) { return scalar_inplace("sub_", UnaryOp::AddScalar, *this, -v, 1.0); }
Tensor& Tensor::mul_(double v) { return scalar_inplace("mul_", UnaryOp::MulScalar, *this, v, v); }
Tensor& Tensor::div_(double v) {
  check_true_division(*this);
  // bfloat16: a true division in float32, as div (not a multiplication by 1/v).
  if (dtype() == kBFloat16) return div_(full({}, v, TensorOptions(kFloat32).device(device())));
  return scalar_inplace("div_", UnaryOp::MulScalar, *this, 1.0 / v, 1.0 / v);
}

Tensor& Tensor::mul_(const Tensor& other) {
  Tensor& self = *this;
  return binary_inplace("mul_", BinaryOp::Mul, self, other, 1.0, [&]() -> BackwardFn {
    // d self = g * other; d other = g * (self's old value), kept as a clone.
    bool gs = self.requires_grad(), go = detail::needs_grad(other);
    SavedTensor so(gs ? other : Tensor(), "mul_"), old(go ? self.detach().clone() : Tensor(), "mul_");
    Shape sh = other.shape();
    DType ds = self.dtype(), dt = other.dtype();
    return [=](const Tensor& g) -> TensorList {
      return {gs ? kiln::mul(g, so.get()).to(ds) : Tensor(),
              go ? operand_grad(kiln::mul(g, old.get()), sh, dt) : Tensor()};
    };
  });
}

Tensor& Tensor::div_(const Tensor& other) {
  check_true_division(*this);
  Tensor& self = *this;
  return binary_inplace("div_", BinaryOp::Div, self, other, 1.0, [&]() -> BackwardFn {
    // d self = g / other; d other = -g * old / other^2.
    bool go = detail::needs_grad(other);
    SavedTensor so(other, "div_"), old(go ? self.detach().clone() : Tensor(), "div_");
    Shape sh = other.shape();
    DType ds = self.dtype(), dt = other.dtype();
    return [=](const Tensor& g) -> TensorList {
      Tensor g_over = kiln::div(g, so.get());
      if (!go) return {g_over.to(ds), Tensor()};
      return {g_over.to(ds), operand_grad(kiln::neg(kiln::mul(g_over, kiln::div(old.get(), so.get()))), sh, dt)};
    };
  });
}

Tensor& Tensor::clamp_(std::optional<double> lo, std::optional<double> hi) {
  check_not_bool("clamp_", *this);
  KILN_CHECK(lo || hi, "clamp_", "at least one of min and max must be given");
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double a = lo.value_or(-inf), b = hi.value_or(inf);
  Tensor& self = *this;
  return apply_inplace(
      "clamp_", self, {}, [&] { backend_of("clamp_", {&self}).unary(UnaryOp::Clamp, self, self, a, b); },
      [&]() -> BackwardFn {
        // The gradient passes where the old value was inside [a, b] (as clamp's).
        SavedTensor inside(kiln::logical_and(kiln::ge(self, a), kiln::le(self, b)), "clamp_");
        return [inside](const Tensor& g) -> TensorList { return {where(inside.get(), g, 0.0)}; };
      });
}

// ---------------------------------------------------------------- copies and fills
// self (S) <- src (broadcastable to S, any dtype, any device) -> self (S)
Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined("copy_", *this);
  detail::check_defined("copy_", src, "source");
  Shape s = broadcast_shapes("copy_", shape(), src.shape());
  KILN_CHECK(s == shape(), "copy_", "source of shape ", shape_str(src.shape()),
             " cannot be broadcast to the destination's shape ", shape_str(shape()));
  Tensor sv = src.detach();
  if (sv.shape() != s) sv = sv.expand(s);
  Tensor& self = *this;
  return apply_inplace(
      "copy_", self, {&src},
      [&] { backend_for(device().is_cpu() ? sv.device() : device()).copy(sv, self); },
      [&]() -> BackwardFn {
        // Self's old value is gone (zero gradient); src's is g, back in its shape, dtype and device.
        bool gsrc = detail::needs_grad(src);
        Shape sh = src.shape();
        DType dt = src.dtype();
        Device dev = src.device();
        return [=](const Tensor& g) -> TensorList {
          return {zeros_like(g), gsrc ? operand_grad(g, sh, dt).to(dev) : Tensor()};
        };
      });
}

namespace {
// self <- v everywhere, recorded as `op` (fill_ or zero_).
Tensor& fill_inplace(const char* op, Tensor& self, double v) {
  detail::check_defined(op, self);
  KILN_CHECK(self.dtype() != kInt64 || fits_int64(v), op, "value ", v, " cannot be converted to int64");
  return apply_inplace(op, self, {}, [&] { backend_for(self.device()).fill(self, v); }, zero_grad_fn);
}
}  // namespace

Tensor& Tensor::fill_(double v) { return fill_inplace("fill_", *this, v); }
Tensor& Tensor::zero_() { return fill_inplace("zero_", *this, 0.0); }

// self (S), mask (bool, broadcastable to S) -> self (S) with `value` where mask is true
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  detail::check_defined("masked_fill_", *this);
  Tensor filled;
  {
    NoGradGuard no_grad;
    filled = kiln::masked_fill(detach(), mask, value);  // validates the mask
  }
  Tensor& self = *this;
  return apply_inplace(
      "masked_fill_", self, {&mask}, [&] { backend_for(device()).copy(filled, self); },
      [&]() -> BackwardFn {
        SavedTensor sm(mask, "masked_fill_");
        return [sm](const Tensor& g) -> TensorList {
          return {where(sm.get(), zeros({}, TensorOptions(g.dtype()).device(g.device())), g), Tensor()};
        };
      });
}

// ---------------------------------------------------------------- random fills
namespace {
// Fills self from a generator: directly if contiguous, else through a temporary.
template <class F>
Tensor& random_inplace(const char* op, Tensor& self, F fill) {
  detail::check_floating(op, self);
  return apply_inplace(
      op, self, {},
      [&] {
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
      },
      zero_grad_fn);
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
