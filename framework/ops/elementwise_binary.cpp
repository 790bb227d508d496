// Binary elementwise ops with broadcasting and type promotion, comparisons, where,
// masked_fill, and the operators.
#include <cmath>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

using detail::grad_for;
using detail::needs_grad;

// Broadcasts a and b, casts both to `compute`, runs `kind` into a new tensor of `out_dtype`
// (bfloat16 out of a float32 computation: rounded once on store, by backend_for's wrapper).
Tensor run_binary(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, DType compute,
                  DType out_dtype) {
  Backend& be = backend_of(op, {&a, &b});
  Shape shape = broadcast_shapes(op, a.shape(), b.shape());
  Tensor ac = a.dtype() == compute ? a : a.to(compute);
  Tensor bc = b.dtype() == compute ? b : b.to(compute);
  Tensor out = detail::new_tensor(shape, out_dtype, a, op);
  be.binary(kind, ac.shape() == shape ? ac : ac.detach().expand(shape),
            bc.shape() == shape ? bc : bc.detach().expand(shape), out);
  return out;
}

// The dtype arithmetic on a and b computes in; bool with bool has no arithmetic.
DType arithmetic_type(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  DType t = promote_types(a.dtype(), b.dtype());
  KILN_CHECK(t != kBool, op, "arithmetic is not defined for bool tensors (got ", dtype_name(a.dtype()),
             " and ", dtype_name(b.dtype()), "); convert with .to(kInt64) or .to(kFloat32) first");
  return t;
}

// A 0-d tensor holding `v`, for scalar operands of a tensor op (dtype follows x unless
// x is integral and v is not).
Tensor scalar_for(const Tensor& x, double v) {
  DType t = x.dtype();
  // A fraction, an infinity or NaN, or a value past int64 makes it float (as a Python float would).
  if (!is_floating(t) && (v != std::floor(v) || !fits_int64(v))) t = kFloat32;
  if (t == kBool) t = kInt64;
  return full({}, v, TensorOptions(t).device(x.device()));
}

Tensor scalar_unary(const char* op, UnaryOp kind, const Tensor& x, double v) {
  detail::check_defined(op, x);
  DType t = x.dtype();
  if (t == kBool || (!is_floating(t) && (v != std::floor(v) || !fits_int64(v)))) t = kFloat32;
  Tensor xc = x.to(t);
  Tensor out = detail::new_tensor(x.shape(), t, x, op);
  backend_of(op, {&x}).unary(kind, xc, out, detail::kernel_scalar(kind, t, v), 0);
  return out;
}

}  // namespace

namespace {
// a + alpha·b, for add and for sub (alpha negated), which report and record as `op`.
Tensor add_as(const char* op, const Tensor& a, const Tensor& b, double alpha) {
  DType t = arithmetic_type(op, a, b);
  Tensor y;
  if (alpha == 1.0 || alpha == -1.0) {
    // a ± b in one pass (a - b has the bits of a + (-b): negation is exact).
    y = run_binary(op, alpha == 1.0 ? BinaryOp::Add : BinaryOp::Sub, a, b.detach(), t, t);
  } else {
    // A scaled copy of b is an operand: shapes first, so that none is made for operands
    // that cannot broadcast (an expanded b would be materialised in full).
    broadcast_shapes(op, a.shape(), b.shape());
    NoGradGuard no_grad;  // the operands only; add's own node covers a and b
    if (t == kBFloat16) {
      // As torch's bfloat16 add: a + alpha·b in float32 with alpha rounded to bfloat16
      // (so alpha·b is exact), rounded once; not alpha·b rounded first.
      Tensor bb = mul(b.to(t).to(kFloat32), static_cast<double>(static_cast<float>(bfloat16(alpha))));
      y = run_binary(op, BinaryOp::Add, a.to(t), bb, kFloat32, t);
    } else {
      y = run_binary(op, BinaryOp::Add, a, mul(b, alpha), t, t);
    }
  }
  if (!any_requires_grad({&a, &b})) return y;
  Shape sa = a.shape(), sb = b.shape();
  bool ga = needs_grad(a), gb = needs_grad(b);
  DType da = a.dtype(), db = b.dtype();
  return record(op, y, {a, b}, [=](const Tensor& g) -> TensorList {
    return {ga ? sum_to(g, sa).to(da) : Tensor(),
            gb ? sum_to(alpha == 1.0 ? g : mul(g, alpha), sb).to(db) : Tensor()};
  });
}

Tensor add_scalar_as(const char* op, const Tensor& a, double b) {
  Tensor y = scalar_unary(op, UnaryOp::AddScalar, a, b);
  return record(op, y, {a}, [](const Tensor& g) -> TensorList { return {g}; });
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) { return add_as("add", a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, double alpha) { return add_as("sub", a, b, -alpha); }

Tensor mul(const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type("mul", a, b);
  Tensor y = run_binary("mul", BinaryOp::Mul, a, b, t, t);
  if (!any_requires_grad({&a, &b})) return y;
  SavedTensor sa(needs_grad(b) ? a : Tensor(), "mul"), sb(needs_grad(a) ? b : Tensor(), "mul");
  bool ga = needs_grad(a), gb = needs_grad(b);
  Shape sha = a.shape(), shb = b.shape();
  DType da = a.dtype(), db = b.dtype();
  return record("mul", y, {a, b}, [=](const Tensor& g) -> TensorList {
    return {ga ? sum_to(mul(g, sb.get()), sha).to(da) : Tensor(),
            gb ? sum_to(mul(g, sa.get()), shb).to(db) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type("div", a, b);
  if (!is_floating(t)) t = kFloat32;  // true division, as torch.div
  Tensor y = run_binary("div", BinaryOp::Div, a, b, t, t);
  if (!any_requires_grad({&a, &b})) return y;
  bool ga = needs_grad(a), gb = needs_grad(b);
  SavedTensor sb(b, "div"), sy(gb ? y : Tensor(), "div");
  Shape sha = a.shape(), shb = b.shape();
  DType da = a.dtype(), db = b.dtype();
  return record("div", y, {a, b}, [=](const Tensor& g) -> TensorList {
    Tensor g_over_b = div(g, sb.get());
    return {ga ? sum_to(g_over_b, sha).to(da) : Tensor(),
            gb ? sum_to(neg(mul(g_over_b, sy.get())), shb).to(db) : Tensor()};
  });
}

namespace {
// maximum / minimum: the gradient goes to the chosen side, split in half on ties.
Tensor extremum(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  DType t = arithmetic_type(op, a, b);
  Tensor y = run_binary(op, kind, a, b, t, t);
  if (!any_requires_grad({&a, &b})) return y;
  SavedTensor sa(a, op), sb(b, op);
  bool ga = needs_grad(a), gb = needs_grad(b);
  bool is_max = kind == BinaryOp::Maximum;
  return record(op, y, {a, b}, [=](const Tensor& g) -> TensorList {
    const Tensor& av = sa.get();
    const Tensor& bv = sb.get();
    Tensor half = mul(g, 0.5);
    Tensor a_wins = is_max ? gt(av, bv) : lt(av, bv);
    Tensor tie = eq(av, bv);
    Tensor g_a = where(a_wins, g, where(tie, half, 0.0));
    Tensor g_b = where(logical_or(a_wins, tie), where(tie, half, 0.0), g);
    return {ga ? sum_to(g_a, av.shape()).to(av.dtype()) : Tensor(),
            gb ? sum_to(g_b, bv.shape()).to(bv.dtype()) : Tensor()};
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", BinaryOp::Minimum, a, b); }

// Scalar forms run as unary kernels (no broadcast, no second buffer).
Tensor add(const Tensor& a, double b) { return add_scalar_as("add", a, b); }
Tensor sub(const Tensor& a, double b) { return add_scalar_as("sub", a, -b); }
Tensor mul(const Tensor& a, double b) {
  Tensor y = scalar_unary("mul", UnaryOp::MulScalar, a, b);
  return record("mul", y, {a}, [b](const Tensor& g) -> TensorList { return {mul(g, b)}; });
}
Tensor div(const Tensor& a, double b) {
  detail::check_defined("div", a);
  if (a.dtype() == kBFloat16) {
    // As torch's bfloat16 div: a / b in float32 (not a · (1/b)), rounded once.
    const Tensor divisor = full({}, b, TensorOptions(kFloat32).device(a.device()));
    Tensor y = run_binary("div", BinaryOp::Div, a, divisor, kFloat32, kBFloat16);
    return record("div", y, {a}, [b](const Tensor& g) -> TensorList { return {div(g, b)}; });
  }
  Tensor af = is_floating(a.dtype()) ? a : a.to(kFloat32);
  return mul(af, 1.0 / b);
}
Tensor rsub(const Tensor& a, double b) {
  Tensor y = scalar_unary("rsub", UnaryOp::RsubScalar, a, b);
  return record("rsub", y, {a}, [](const Tensor& g) -> TensorList { return {neg(g)}; });
}
Tensor rdiv(const Tensor& a, double b) {
  detail::check_defined("rdiv", a);
  Tensor af = is_floating(a.dtype()) ? a : a.to(kFloat32);
  Tensor y = scalar_unary("rdiv", UnaryOp::RdivScalar, af, b);
  if (!any_requires_grad({&a})) return y;
  SavedTensor sx(af, "rdiv"), sy(y, "rdiv");
  return record("rdiv", y, {a}, [sx, sy](const Tensor& g) -> TensorList {
    return {neg(div(mul(g, sy.get()), sx.get()))};  // d(b/x) = -b/x^2 = -y/x
  });
}

// ---------------------------------------------------------------- comparisons
namespace {
Tensor compare(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  return run_binary(op, kind, a, b, promote_types(a.dtype(), b.dtype()), kBool);
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", BinaryOp::Ge, a, b); }
namespace {
// a compared with a scalar; an undefined `a` is "[op] first operand is an undefined tensor".
Tensor compare_scalar(const char* op, BinaryOp kind, const Tensor& a, double b) {
  detail::check_defined(op, a, "first operand");
  return compare(op, kind, a, scalar_for(a, b));
}
}  // namespace
Tensor eq(const Tensor& a, double b) { return compare_scalar("eq", BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, double b) { return compare_scalar("ne", BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar("lt", BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, double b) { return compare_scalar("le", BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, double b) { return compare_scalar("gt", BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, double b) { return compare_scalar("ge", BinaryOp::Ge, a, b); }

namespace {
void check_bool(const char* op, const Tensor& t) {
  detail::check_defined(op, t);
  KILN_CHECK(t.dtype() == kBool, op, "expected a bool tensor, got ", dtype_name(t.dtype()));
}
}  // namespace

Tensor logical_not(const Tensor& x) {
  check_bool("logical_not", x);
  return eq(x, full({}, 0.0, TensorOptions(kBool).device(x.device())));
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  check_bool("logical_and", a);
  check_bool("logical_and", b);
  return run_binary("logical_and", BinaryOp::Minimum, a, b, kBool, kBool);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  check_bool("logical_or", a);
  check_bool("logical_or", b);
  return run_binary("logical_or", BinaryOp::Maximum, a, b, kBool, kBool);
}

// ---------------------------------------------------------------- where / masked_fill
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined("where", cond, "condition");
  detail::check_defined("where", a, "first value");
  detail::check_defined("where", b, "second value");
  KILN_CHECK(cond.dtype() == kBool, "where", "condition must be a bool tensor, got ",
             dtype_name(cond.dtype()));
  Backend& be = backend_of("where", {&cond, &a, &b});
  Shape shape = broadcast_shapes("where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  DType t = promote_types(a.dtype(), b.dtype());
  Tensor out = detail::new_tensor(shape, t, a, "where");
  be.where(cond.detach().expand(shape), a.to(t).detach().expand(shape), b.to(t).detach().expand(shape), out);
  if (!any_requires_grad({&a, &b})) return out;
  SavedTensor sc(cond, "where");
  bool ga = needs_grad(a), gb = needs_grad(b);
  Shape sa = a.shape(), sb = b.shape();
  DType da = a.dtype(), db = b.dtype();
  return record("where", out, {a, b}, [=](const Tensor& g) -> TensorList {
    Tensor zero = zeros({}, TensorOptions(g.dtype()).device(g.device()));
    return {ga ? sum_to(where(sc.get(), g, zero), sa).to(da) : Tensor(),
            gb ? sum_to(where(sc.get(), zero, g), sb).to(db) : Tensor()};
  });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  detail::check_defined("where", a, "first value");
  return where(cond, a, scalar_for(a, b));  // an int64 `a` with a fractional b gives float32
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_defined("masked_fill", x);
  detail::check_defined("masked_fill", mask, "mask");
  KILN_CHECK(mask.dtype() == kBool, "masked_fill", "mask must be a bool tensor, got ",
             dtype_name(mask.dtype()));
  Shape shape = broadcast_shapes("masked_fill", x.shape(), mask.shape());
  KILN_CHECK(shape == x.shape(), "masked_fill", "mask of shape ", shape_str(mask.shape()),
             " cannot be broadcast to the input's shape ", shape_str(x.shape()));
  KILN_CHECK(x.dtype() != kInt64 || fits_int64(value), "masked_fill", "value ", value,
             " cannot be converted to int64");
  return where(mask, full({}, value, TensorOptions(x.dtype()).device(x.device())), x);
}

// ---------------------------------------------------------------- operators
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
Tensor operator~(const Tensor& a) { return logical_not(a); }
Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  KILN_CHECK(a.shape() == b.shape(), "allclose", "shapes ", shape_str(a.shape()), " and ",
             shape_str(b.shape()), " differ");
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (std::abs(x[i] - y[i]) > atol + rtol * std::abs(y[i])) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace kiln
