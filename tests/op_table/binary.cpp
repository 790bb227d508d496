// Rows of the binary ops with broadcasting (arithmetic, maximum and minimum, their
// operators and scalar forms), comparisons and logical ops, where and masked_fill: forward
// values against PyTorch (ops_forward.txt, made by make_op_fixtures.py; bf16.txt, made by
// make_bf16_fixtures.py), integer arithmetic and type promotion, and generated inputs in
// every layout for gradcheck and the CUDA backend.
#include <limits>
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


constexpr double kInf = std::numeric_limits<double>::infinity();

// A row of ops_forward.txt.
OpTest fwd(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> inputs,
           const std::string& expected) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(inputs),
          .expected = expected,
          .file = "ops_forward.txt"};
}

// A constant of ops_forward.txt on the inputs' device.
Tensor constant(const std::string& name, const Tensor& like) { return fixture("ops_forward.txt", name).to(like.device()); }

// A bool mask on the inputs' device.
Tensor mask_of(const std::vector<double>& v, const Shape& shape, const Tensor& like) {
  return ne(from_vector<double>(v, shape), 0.0).to(like.device());
}

std::vector<OpTest> arithmetic_rows() {
  const std::vector<std::string> ab = {"bin.{t}.a", "bin.{t}.b"}, ba = {"bin.{t}.b", "bin.{t}.a"};
  std::vector<OpTest> rows = {
      // (2, 3, 4) with (3, 1)
      fwd("add", "(2, 3, 4) + (3, 1)", [](V x) { return add(x[0], x[1]); }, ab, "bin.{t}.add"),
      fwd("operator+", "(2, 3, 4) + (3, 1)", [](V x) { return x[0] + x[1]; }, ab, "bin.{t}.add"),
      fwd("add", "alpha 2.5", [](V x) { return add(x[0], x[1], 2.5); }, ab, "bin.{t}.add_alpha"),
      fwd("sub", "(2, 3, 4) - (3, 1)", [](V x) { return sub(x[0], x[1]); }, ab, "bin.{t}.sub"),
      fwd("operator-", "(2, 3, 4) - (3, 1)", [](V x) { return x[0] - x[1]; }, ab, "bin.{t}.sub"),
      fwd("sub", "alpha 0.5", [](V x) { return sub(x[0], x[1], 0.5); }, ab, "bin.{t}.sub_alpha"),
      fwd("mul", "(2, 3, 4) * (3, 1)", [](V x) { return mul(x[0], x[1]); }, ab, "bin.{t}.mul"),
      fwd("operator*", "(2, 3, 4) * (3, 1)", [](V x) { return x[0] * x[1]; }, ab, "bin.{t}.mul"),
      fwd("div", "(2, 3, 4) / (3, 1)", [](V x) { return div(x[0], x[1]); }, ab, "bin.{t}.div"),
      fwd("operator/", "(2, 3, 4) / (3, 1)", [](V x) { return x[0] / x[1]; }, ab, "bin.{t}.div"),
      fwd("maximum", "(2, 3, 4), (3, 1)", [](V x) { return maximum(x[0], x[1]); }, ab, "bin.{t}.maximum"),
      fwd("minimum", "(2, 3, 4), (3, 1)", [](V x) { return minimum(x[0], x[1]); }, ab, "bin.{t}.minimum"),
      // b on the left broadcasts the same way.
      fwd("add", "(3, 1) + (2, 3, 4)", [](V x) { return add(x[0], x[1]); }, ba, "bin.{t}.add"),
      fwd("maximum", "(3, 1), (2, 3, 4)", [](V x) { return maximum(x[0], x[1]); }, ba, "bin.{t}.maximum"),
      // (1, 4) with (3, 1) -> (3, 4)
      fwd("add", "(1, 4) + (3, 1)", [](V x) { return add(x[0], x[1]); }, {"outer.{t}.a", "outer.{t}.b"},
          "outer.{t}.add"),
      fwd("mul", "(1, 4) * (3, 1)", [](V x) { return mul(x[0], x[1]); }, {"outer.{t}.a", "outer.{t}.b"},
          "outer.{t}.mul"),
      fwd("div", "(1, 4) / (3, 1)", [](V x) { return div(x[0], x[1]); }, {"outer.{t}.a", "outer.{t}.b"},
          "outer.{t}.div"),
      // with a double
      fwd("operator+", "x + 1.5", [](V x) { return x[0] + 1.5; }, {"bin.{t}.a"}, "scal.{t}.add"),
      fwd("operator-", "x - 1.5", [](V x) { return x[0] - 1.5; }, {"bin.{t}.a"}, "scal.{t}.sub"),
      fwd("operator*", "x * -2.25", [](V x) { return x[0] * -2.25; }, {"bin.{t}.a"}, "scal.{t}.mul"),
      fwd("operator/", "x / 3", [](V x) { return x[0] / 3.0; }, {"bin.{t}.a"}, "scal.{t}.div"),
      fwd("operator-", "2 - x", [](V x) { return 2.0 - x[0]; }, {"bin.{t}.a"}, "scal.{t}.rsub"),
      fwd("operator/", "2 / x", [](V x) { return 2.0 / x[0]; }, {"bin.{t}.a"}, "scal.{t}.rdiv"),
      fwd("operator-", "-x of (2, 3, 4)", [](V x) { return -x[0]; }, {"bin.{t}.a"}, "scal.{t}.neg"),
      fwd("operator+", "1.5 + x", [](V x) { return 1.5 + x[0]; }, {"bin.{t}.a"}, "scal.{t}.add"),
      fwd("operator*", "-2.25 * x", [](V x) { return -2.25 * x[0]; }, {"bin.{t}.a"}, "scal.{t}.mul"),
  };
  // NaN on either side: no derivative to check.
  for (const std::string op : {"maximum", "minimum"}) {
    OpTest t = fwd(op, "NaN on either side",
                   [op](V x) { return op == "maximum" ? maximum(x[0], x[1]) : minimum(x[0], x[1]); },
                   {"extnan.{t}.a", "extnan.{t}.b"}, "extnan.{t}." + op);
    t.gradcheck = false;
    rows.push_back(std::move(t));
  }
  return rows;
}

// Integer arithmetic and type promotion, as torch: int64 with int64 stays int64 but for
// true division; with a float tensor or a fractional scalar it becomes that float.
std::vector<OpTest> integer_rows() {
  const std::vector<std::string> ab = {"int.a", "int.b"};
  std::vector<OpTest> rows = {
      fwd("add", "int64", [](V x) { return add(x[0], x[1]); }, ab, "int.add"),
      fwd("sub", "int64", [](V x) { return sub(x[0], x[1]); }, ab, "int.sub"),
      fwd("mul", "int64", [](V x) { return mul(x[0], x[1]); }, ab, "int.mul"),
      fwd("div", "int64 (true division: float32)", [](V x) { return div(x[0], x[1]); }, ab, "int.div"),
      fwd("maximum", "int64", [](V x) { return maximum(x[0], x[1]); }, ab, "int.maximum"),
      fwd("add", "int64 + float32", [](V x) { return add(x[0], x[1]); }, {"int.a", "bin.f32.b"}, "int.add_f32"),
      fwd("mul", "int64 * float64", [](V x) { return mul(x[0], x[1]); }, {"int.a", "bin.f64.b"}, "int.mul_f64"),
      fwd("add", "float32 + float64", [](V x) { return add(x[0], x[1]); }, {"bin.f32.a", "bin.f64.b"},
          "mixed.add"),
      // an integral scalar keeps int64, a fractional one gives float32
      fwd("operator+", "int64 + 2", [](V x) { return x[0] + 2.0; }, {"int.a"}, "int.add_scalar"),
      fwd("operator*", "int64 * 3", [](V x) { return x[0] * 3.0; }, {"int.a"}, "int.mul_scalar"),
      fwd("operator*", "int64 * 0.5", [](V x) { return x[0] * 0.5; }, {"int.a"}, "int.mul_half"),
      fwd("operator/", "int64 / 4", [](V x) { return x[0] / 4.0; }, {"int.a"}, "int.div_scalar"),
      fwd("operator-", "-int64", [](V x) { return -x[0]; }, {"int.a"}, "int.neg"),
      fwd("abs", "int64", [](V x) { return abs(x[0]); }, {"int.a"}, "int.abs"),
      fwd("relu", "int64", [](V x) { return relu(x[0]); }, {"int.a"}, "int.relu"),
      // fractional bounds: float32, as torch
      fwd("clamp", "int64, fractional bounds", [](V x) { return clamp(x[0], -2.5, 3.5); }, {"int.a"}, "int.clamp"),
  };
  for (OpTest& t : rows) {
    t.tags = {"fixed"};     // the fixtures' own dtypes
    t.gradcheck = false;    // integer inputs (and the mixed row is checked in float64 below)
  }
  return rows;
}

std::vector<OpTest> comparison_rows() {
  const std::vector<std::string> ab = {"cmp.{t}.a", "cmp.{t}.b"}, a = {"cmp.{t}.a"};
  // (3, 4) and (4), halves: many ties
  std::vector<OpTest> rows = {
      fwd("eq", "(3, 4), (4)", [](V x) { return eq(x[0], x[1]); }, ab, "cmp.{t}.eq"),
      fwd("ne", "(3, 4), (4)", [](V x) { return ne(x[0], x[1]); }, ab, "cmp.{t}.ne"),
      fwd("lt", "(3, 4), (4)", [](V x) { return lt(x[0], x[1]); }, ab, "cmp.{t}.lt"),
      fwd("le", "(3, 4), (4)", [](V x) { return le(x[0], x[1]); }, ab, "cmp.{t}.le"),
      fwd("gt", "(3, 4), (4)", [](V x) { return gt(x[0], x[1]); }, ab, "cmp.{t}.gt"),
      fwd("ge", "(3, 4), (4)", [](V x) { return ge(x[0], x[1]); }, ab, "cmp.{t}.ge"),
      fwd("operator<", "(3, 4), (4)", [](V x) { return x[0] < x[1]; }, ab, "cmp.{t}.lt"),
      fwd("operator<=", "(3, 4), (4)", [](V x) { return x[0] <= x[1]; }, ab, "cmp.{t}.le"),
      fwd("operator>", "(3, 4), (4)", [](V x) { return x[0] > x[1]; }, ab, "cmp.{t}.gt"),
      fwd("operator>=", "(3, 4), (4)", [](V x) { return x[0] >= x[1]; }, ab, "cmp.{t}.ge"),
      fwd("operator==", "(3, 4), (4)", [](V x) { return x[0] == x[1]; }, ab, "cmp.{t}.eq"),
      fwd("operator!=", "(3, 4), (4)", [](V x) { return x[0] != x[1]; }, ab, "cmp.{t}.ne"),
      fwd("eq", "scalar", [](V x) { return eq(x[0], 0.5); }, a, "cmp.{t}.eq_scalar"),
      fwd("ne", "scalar", [](V x) { return ne(x[0], 0.5); }, a, "cmp.{t}.ne_scalar"),
      fwd("lt", "scalar", [](V x) { return lt(x[0], 0.5); }, a, "cmp.{t}.lt_scalar"),
      fwd("le", "scalar", [](V x) { return le(x[0], 0.5); }, a, "cmp.{t}.le_scalar"),
      fwd("gt", "scalar", [](V x) { return gt(x[0], 0.5); }, a, "cmp.{t}.gt_scalar"),
      fwd("ge", "scalar", [](V x) { return ge(x[0], 0.5); }, a, "cmp.{t}.ge_scalar"),
      fwd("operator>", "scalar", [](V x) { return x[0] > 0.5; }, a, "cmp.{t}.gt_scalar"),
      fwd("operator<", "scalar on the left", [](V x) { return 0.5 < x[0]; }, a, "cmp.{t}.gt_scalar"),
      fwd("operator==", "scalar", [](V x) { return x[0] == 0.5; }, a, "cmp.{t}.eq_scalar"),
      fwd("operator!=", "scalar on the left", [](V x) { return 0.5 != x[0]; }, a, "cmp.{t}.ne_scalar"),
  };
  const std::vector<std::string> iab = {"cmpi.a", "cmpi.b"};
  std::vector<OpTest> ints = {
      fwd("eq", "int64", [](V x) { return eq(x[0], x[1]); }, iab, "cmpi.eq"),
      fwd("ne", "int64", [](V x) { return ne(x[0], x[1]); }, iab, "cmpi.ne"),
      fwd("lt", "int64", [](V x) { return lt(x[0], x[1]); }, iab, "cmpi.lt"),
      fwd("le", "int64", [](V x) { return le(x[0], x[1]); }, iab, "cmpi.le"),
      fwd("gt", "int64", [](V x) { return gt(x[0], x[1]); }, iab, "cmpi.gt"),
      fwd("ge", "int64", [](V x) { return ge(x[0], x[1]); }, iab, "cmpi.ge"),
      fwd("lt", "int64 with a fractional scalar", [](V x) { return lt(x[0], 0.5); }, {"cmpi.a"}, "cmpi.lt_frac"),
      fwd("ge", "int64 with float64", [](V x) { return ge(x[0], x[1]); }, {"cmpi.a", "cmp.f64.b"}, "cmpi.ge_float"),
      // logical ops on their results
      fwd("logical_or", "lt or eq", [](V x) { return logical_or(lt(x[0], x[1]), eq(x[0], x[1])); }, iab, "cmpi.le"),
      fwd("logical_not", "not le", [](V x) { return logical_not(le(x[0], x[1])); }, iab, "cmpi.gt"),
      fwd("logical_and", "le and ge", [](V x) { return logical_and(le(x[0], x[1]), ge(x[0], x[1])); }, iab,
          "cmpi.eq"),
      fwd("operator|", "lt | eq", [](V x) { return lt(x[0], x[1]) | eq(x[0], x[1]); }, iab, "cmpi.le"),
      fwd("operator~", "~le", [](V x) { return ~le(x[0], x[1]); }, iab, "cmpi.gt"),
      fwd("operator&", "le & ge", [](V x) { return le(x[0], x[1]) & ge(x[0], x[1]); }, iab, "cmpi.eq"),
  };
  for (OpTest& t : ints) {
    t.tags = {"fixed"};
    rows.push_back(std::move(t));
  }
  for (OpTest& t : rows) t.gradcheck = false;  // bool results: nothing to differentiate
  return rows;
}

std::vector<OpTest> where_rows() {
  // cond (3, 1), a (3, 4), b (4); x (2, 3, 4), mask (3, 4)
  auto cond = [](const Tensor& like) { return constant("where.cond", like); };
  auto mask = [](const Tensor& like) { return constant("mfill.mask", like); };
  std::vector<OpTest> rows = {
      fwd("where", "cond (3, 1), (3, 4), (4)", [cond](V x) { return where(cond(x[0]), x[0], x[1]); },
          {"where.{t}.a", "where.{t}.b"}, "where.{t}.out"),
      fwd("where", "cond (3, 1), (3, 4), a double", [cond](V x) { return where(cond(x[0]), x[0], -1.5); },
          {"where.{t}.a"}, "where.{t}.scalar"),
      fwd("masked_fill", "mask (3, 4) of (2, 3, 4)", [mask](V x) { return masked_fill(x[0], mask(x[0]), 7.25); },
          {"mfill.{t}.x"}, "mfill.{t}.value"),
      fwd("masked_fill", "-inf, the method", [mask](V x) { return x[0].masked_fill(mask(x[0]), -kInf); },
          {"mfill.{t}.x"}, "mfill.{t}.neginf"),  // no gradcheck: -inf has no finite difference
      fwd("where", "int64 with a fractional double", [cond](V x) { return where(cond(x[0]), x[0], 0.5); },
          {"int.a"}, "where.int_frac"),
      fwd("where", "int64 with float64", [cond](V x) { return where(cond(x[0]), x[0], x[1]); },
          {"int.a", "where.f64.b"}, "where.int_float"),
  };
  rows[3].gradcheck = false;
  for (OpTest& t : rows) {
    if (t.inputs[0] == "int.a") {
      t.tags = {"fixed"};
      t.gradcheck = false;  // an integer input
    }
  }
  return rows;
}

// Generated inputs: gradcheck in float64 (gradcheck's tolerances, never loosened) and the
// CUDA backend against the CPU, in every broadcast and layout.
std::vector<OpTest> made_rows() {
  std::vector<OpTest> rows = {
      made("add", "(2, 3)", [](V x) { return add(x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("add", "alpha", [](V x) { return add(x[0], x[1], -2.5); }, {R({2, 3}), R({2, 3})}),
      made("sub", "(2, 3)", [](V x) { return sub(x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("sub", "alpha", [](V x) { return sub(x[0], x[1], 0.75); }, {R({2, 3}), R({2, 3})}),
      made("mul", "(2, 3)", [](V x) { return mul(x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("div", "(2, 3)", [](V x) { return div(x[0], x[1]); }, {R({2, 3}), Z({2, 3})}),
      made("maximum", "(2, 3)", [](V x) { return maximum(x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("minimum", "(2, 3)", [](V x) { return minimum(x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("mul", "the same input twice", [](V x) { return mul(x[0], x[0]); }, {R({5})}),
      made("operator+", "(a + b) * a - b / c", [](V x) { return (x[0] + x[1]) * x[0] - x[1] / x[2]; },
           {R({2, 3}), R({2, 3}), Z({2, 3})}),
      made("mul", "0-d tensors", [](V x) { return mul(x[0], x[1]); }, {R({}), R({})}),
      // broadcast
      made("add", "(2,3,4)+(4)", [](V x) { return add(x[0], x[1]); }, {R({2, 3, 4}), R({4})}),
      made("add", "(2,3,4)+(3,1)", [](V x) { return add(x[0], x[1]); }, {R({2, 3, 4}), R({3, 1})}),
      made("add", "(1,3,1)+(2,3,4)", [](V x) { return add(x[0], x[1]); }, {R({1, 3, 1}), R({2, 3, 4})}),
      made("add", "alpha (2,3,4)+(1,3,1)", [](V x) { return add(x[0], x[1], 1.5); }, {R({2, 3, 4}), R({1, 3, 1})}),
      made("add", "alpha -2.5 (2,3,4)+(3,1)", [](V x) { return add(x[0], x[1], -2.5); }, {R({2, 3, 4}), R({3, 1})}),
      made("sub", "alpha (2,3,4)-(3,1)", [](V x) { return sub(x[0], x[1], 2.0); }, {R({2, 3, 4}), R({3, 1})}),
      made("sub", "(4)-(2,3,4)", [](V x) { return sub(x[0], x[1]); }, {R({4}), R({2, 3, 4})}),
      made("sub", "(3,1)-(1,4) both sides", [](V x) { return sub(x[0], x[1]); }, {R({3, 1}), R({1, 4})}),
      made("mul", "(2,3,4)*(4)", [](V x) { return mul(x[0], x[1]); }, {R({2, 3, 4}), R({4})}),
      made("mul", "(2,3,4)*(1,3,1)", [](V x) { return mul(x[0], x[1]); }, {R({2, 3, 4}), R({1, 3, 1})}),
      made("mul", "(3,1)*(1,4) both sides", [](V x) { return mul(x[0], x[1]); }, {R({3, 1}), R({1, 4})}),
      made("mul", "(2,3)*() scalar tensor", [](V x) { return mul(x[0], x[1]); }, {R({2, 3}), R({})}),
      made("div", "(2,3,4)/(3,1)", [](V x) { return div(x[0], x[1]); }, {R({2, 3, 4}), Z({3, 1})}),
      made("div", "(4)/(2,3,4)", [](V x) { return div(x[0], x[1]); }, {R({4}), Z({2, 3, 4})}),
      made("div", "(2,3,4)/(1,3,1)", [](V x) { return div(x[0], x[1]); }, {R({2, 3, 4}), Z({1, 3, 1})}),
      made("maximum", "(2,3,4),(4)", [](V x) { return maximum(x[0], x[1]); }, {R({2, 3, 4}), R({4})}),
      made("maximum", "(3,1),(1,3,4)", [](V x) { return maximum(x[0], x[1]); }, {R({3, 1}), R({1, 3, 4})}),
      made("maximum", "(2,3),(3)", [](V x) { return maximum(x[0], x[1]); }, {R({2, 3}), R({3})}),
      made("div", "(3,1)/(1,4) both sides", [](V x) { return div(x[0], x[1]); }, {R({3, 1}), Z({1, 4})}),
      made("sub", "alpha (1,4)-(3,1) both sides", [](V x) { return sub(x[0], x[1], -0.5); }, {R({1, 4}), R({3, 1})}),
      made("minimum", "(2,3,4),(1,3,1)", [](V x) { return minimum(x[0], x[1]); }, {R({2, 3, 4}), R({1, 3, 1})}),
      // other layouts
      made("add", "transposed", [](V x) { return add(x[0], x[1]); }, {T({3, 4}), R({3, 4})}),
      made("add", "stepped + permuted", [](V x) { return add(x[0], x[1], 0.5); }, {S({2, 3, 4}), Pm({2, 3, 4})}),
      made("sub", "permuted, broadcast (4)", [](V x) { return sub(x[0], x[1]); }, {Pm({2, 3, 4}), R({4})}),
      made("mul", "transposed both", [](V x) { return mul(x[0], x[1]); }, {T({3, 4}), T({3, 4})}),
      made("mul", "transposed, stepped", [](V x) { return mul(x[0], x[1]); }, {T({3, 4}), S({3, 4})}),
      made("mul", "stepped, broadcast (3,1)", [](V x) { return mul(x[0], x[1]); }, {S({2, 3, 4}), S({3, 1})}),
      made("mul", "expanded, permuted", [](V x) { return mul(x[0], x[1]); }, {E(R({3, 4})), Pm({3, 4})}),
      made("div", "stepped / transposed", [](V x) { return div(x[0], x[1]); }, {S({3, 4}), T(Z({3, 4}))}),
      made("div", "permuted / stepped, broadcast", [](V x) { return div(x[0], x[1]); }, {Pm({2, 3, 4}), S(Z({3, 1}))}),
      made("maximum", "permuted", [](V x) { return maximum(x[0], x[1]); }, {Pm({2, 3, 4}), R({2, 3, 4})}),
      made("minimum", "transposed", [](V x) { return minimum(x[0], x[1]); }, {T({3, 4}), S({3, 4})}),
      made("minimum", "permuted", [](V x) { return minimum(x[0], x[1]); }, {Pm({2, 3, 4}), R({2, 3, 4})}),
      made("mul", "of a slice with step in the graph",
           [](V x) { return mul(x[0].slice(1, 0, 4, 2), x[1].slice(0, 1, 4)); }, {R({3, 4}), R({4, 2})}),
      // with a double
      made("add", "a double", [](V x) { return add(x[0], 1.5); }, {R({2, 3})}),
      made("sub", "a double", [](V x) { return sub(x[0], 0.25); }, {R({2, 3})}),
      made("mul", "a double", [](V x) { return mul(x[0], -3.0); }, {R({2, 3})}),
      made("div", "a double", [](V x) { return div(x[0], 4.0); }, {R({2, 3})}),
      made("rsub", "(2, 3)", [](V x) { return rsub(x[0], 2.0); }, {R({2, 3})}),
      made("rdiv", "(2, 3)", [](V x) { return rdiv(x[0], 2.0); }, {Z({2, 3})}),
      made("rdiv", "transposed", [](V x) { return rdiv(x[0], -1.5); }, {T(Z({3, 4}))}),
      made("rdiv", "and rsub", [](V x) { return rdiv(x[0], 2.0) + rsub(x[0], 1.5); }, {Z({3, 4})}),
      made("operator-", "with doubles", [](V x) { return 2.0 - (x[0] * 3.0 + 1.0) / 2.0 + 1.0 / (x[0] + 5.0); },
           {R({2, 3})}),
      made("mul", "a double, permuted", [](V x) { return mul(x[0], 0.5); }, {Pm({2, 3, 4})}),
  };
  // where and masked_fill with a constant condition (on the inputs' device)
  auto m = [](std::vector<double> v, Shape s) { return [v, s](const Tensor& like) { return mask_of(v, s, like); }; };
  const auto cond = m({1, 0, 0, 1, 1, 0}, {2, 3}), cond_b = m({1, 0, 1}, {3, 1}), mask_row = m({0, 1, 1, 0}, {4});
  std::vector<OpTest> masked = {
      made("where", "same shape", [cond](V x) { return where(cond(x[0]), x[0], x[1]); }, {R({2, 3}), R({2, 3})}),
      made("where", "broadcast cond and b", [cond_b](V x) { return where(cond_b(x[0]), x[0], x[1]); },
           {R({2, 3, 4}), R({4})}),
      made("where", "broadcast a (1,3,1)", [cond_b](V x) { return where(cond_b(x[0]), x[0], x[1]); },
           {R({1, 3, 1}), R({2, 3, 4})}),
      made("where", "all three broadcast", [cond_b](V x) { return where(cond_b(x[0]).unsqueeze(0), x[0], x[1]); },
           {R({2, 1, 1, 4}), R({1, 3, 1})}),
      made("where", "double b", [cond](V x) { return where(cond(x[0]), x[0], 0.5); }, {R({2, 3})}),
      made("where", "transposed", [cond](V x) { return where(cond(x[0]), x[0], x[1]); }, {T({2, 3}), S({2, 3})}),
      made("masked_fill", "same shape", [cond](V x) { return masked_fill(x[0], cond(x[0]), -2.0); }, {R({2, 3})}),
      made("masked_fill", "broadcast (4)", [mask_row](V x) { return masked_fill(x[0], mask_row(x[0]), 0.0); },
           {R({2, 3, 4})}),
      made("masked_fill", "broadcast (3,1)", [cond_b](V x) { return masked_fill(x[0], cond_b(x[0]), -1e9); },
           {R({2, 3, 4})}),
      made("masked_fill", "permuted", [cond_b](V x) { return x[0].masked_fill(cond_b(x[0]), 3.0); },
           {Pm({2, 3, 4})}),
      made("masked_fill", "broadcast (4) to -2", [mask_row](V x) { return masked_fill(x[0], mask_row(x[0]), -2.0); },
           {R({2, 3, 4})}),
  };
  for (OpTest& t : masked) rows.push_back(std::move(t));
  return rows;
}

// bfloat16 against torch (bf16.txt): float32 math rounded once, bit for bit.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  const std::vector<std::string> ab = {"ew.a", "ew.b"}, a = {"ew.a"};
  rows.push_back(bf16_row("operator+", "ew.add", [](V x) { return x[0] + x[1]; }, ab));
  rows.push_back(bf16_row("operator-", "ew.sub", [](V x) { return x[0] - x[1]; }, ab));
  rows.push_back(bf16_row("operator*", "ew.mul", [](V x) { return x[0] * x[1]; }, ab));
  rows.push_back(bf16_row("operator/", "ew.div", [](V x) { return x[0] / x[1]; }, ab));
  rows.push_back(bf16_row("add", "ew.add_row", [](V x) { return x[0] + x[1]; }, {"ew.a", "ew.row"}));
  rows.push_back(bf16_row("add", "ew.add_alpha", [](V x) { return add(x[0], x[1], 0.3); }, ab));
  rows.push_back(bf16_row("sub", "ew.sub_alpha", [](V x) { return sub(x[0], x[1], 1.7); }, ab));
  rows.push_back(bf16_row("mul", "ew.mul_scalar", [](V x) { return x[0] * 0.1; }, a));
  rows.push_back(bf16_row("add", "ew.add_scalar", [](V x) { return x[0] + 0.3; }, a));
  rows.push_back(bf16_row("rsub", "ew.rsub_scalar", [](V x) { return 1.1 - x[0]; }, a));
  rows.push_back(bf16_row("maximum", "ew.maximum", [](V x) { return maximum(x[0], x[1]); }, ab));
  rows.push_back(bf16_row("div", "ew.div_scalar", [](V x) { return x[0] / 0.3; }, a));  // a true division in float32, not a · (1/0.3)
  rows.push_back(bf16_row("sub", "ew.sub_scalar", [](V x) { return x[0] - 0.3; }, a));  // the scalar rounded to bfloat16 first, as torch
  rows.push_back(bf16_row("lt", "cmp.lt", [](V x) { return lt(x[0], x[1]); }, ab));
  rows.push_back(bf16_row("eq", "cmp.eq", [](V x) { return eq(x[0], where(gt(x[0], 0.0), x[0], x[1])); }, ab));
  rows.push_back(bf16_row("gt", "cmp.gt_scalar", [](V x) { return gt(x[0], 0.1); }, a));
  rows.push_back(bf16_row("eq", "cmp.eq_scalar", [](V x) { return eq(x[0], 0.1); }, a));  // 0.1 is compared as bfloat16, as torch
  rows.push_back(bf16_row("where", "cmp.where", [](V x) { return where(gt(x[0], x[1]), x[0], x[1]); }, ab));
  rows.push_back(bf16_row("where", "cmp.where_scalar", [](V x) { return where(gt(x[0], 0.0), x[0], 0.3); }, a));
  rows.push_back(bf16_row("masked_fill", "cmp.masked_fill", [](V x) { return masked_fill(x[0], lt(x[0], 0.0), 0.1); }, a));
  return rows;
}

// Bad input: a clear error that starts with the op.
void add_errors(std::vector<OpTest>& rows) {
  auto errors_of = [&](const std::string& op) -> std::vector<ErrorCase>& {
    for (OpTest& t : rows)
      if (t.op == op) return t.errors;
    FAIL("no row of " << op);
    return rows.front().errors;
  };
  const Tensor u;
  const Tensor b = ones({3}, kBool), bf = ones({2, 3}, kBFloat16);
  errors_of("add") = {
      {"shapes that do not broadcast", [] { add(ones({2, 3}), ones({4, 5})); }, {"[add]", "(2, 3)", "(4, 5)", "broadcast"}},
      {"bool", [b] { b + b; }, {"[add]", "bool"}},
      {"undefined", [u] { add(u, ones({2})); }, {"[add]", "undefined"}},
      {"undefined + a double", [u] { u + 1.0; }, {"[add]", "undefined"}}};
  errors_of("mul") = {{"shapes that do not broadcast", [] { ones({2, 3}) * ones({3, 2}); }, {"[mul]", "(2, 3)", "(3, 2)"}},
                      {"bool", [b] { b * b; }, {"[mul]", "bool"}},
                      {"undefined", [u] { ones({2}) * u; }, {"[mul]", "undefined"}}};
  errors_of("sub") = {
      // sub names itself, not the add it is built on
      {"shapes that do not broadcast", [] { ones({3}) - ones({4}); }, {"[sub]", "(3,)", "(4,)"}},
      {"shapes, the function", [] { sub(ones({2}), ones({3})); }, {"[sub]", "(2,)", "(3,)"}},
      {"shapes, the method", [] { ones({2}).sub(ones({3})); }, {"[sub]", "(2,)", "(3,)"}},
      {"bool", [] { sub(ones({2}) > 0.0, ones({2}) > 0.0); }, {"[sub]", "bool"}},
      {"undefined", [u] { sub(u, ones({2})); }, {"[sub]", "undefined"}},
      {"undefined minus a double", [u] { sub(u, 1.0); }, {"[sub]", "undefined"}},
      {"undefined - a double", [u] { u - 1.0; }, {"[sub]", "undefined"}}};
  errors_of("div") = {{"shapes that do not broadcast", [] { div(ones({2, 3}), ones({2})); }, {"[div]", "(2, 3)", "(2,)"}},
                      {"bool", [b] { b / b; }, {"[div]", "bool"}}};
  errors_of("maximum") = {{"bool", [b] { maximum(b, b); }, {"[maximum]", "bool"}}};
  errors_of("where") = {
      {"shapes that do not broadcast", [] { where(ones({2}) > 0.0, ones({3}), ones({2})); }, {"[where]", "(2,)", "(3,)"}},
      {"a float condition", [] { where(ones({3}), ones({3}), ones({3})); }, {"[where]", "bool", "float32"}},
      {"a bfloat16 condition", [bf] { where(bf, bf, bf); }, {"[where]", "bool", "bfloat16"}}};
  errors_of("masked_fill") = {
      {"a mask that does not broadcast", [] { masked_fill(ones({2}), ones({3, 2}) > 0.0, 0.0); },
       {"[masked_fill]", "(3, 2)", "(2,)"}},
      {"an int64 mask", [] { masked_fill(ones({3}), ones({3}, kInt64), 0.0); }, {"[masked_fill]", "bool", "int64"}},
      {"a bfloat16 mask", [bf] { masked_fill(bf, bf, 0.0); }, {"[masked_fill]", "bool", "bfloat16"}}};
  errors_of("logical_not") = {{"float32", [] { logical_not(ones({3})); }, {"[logical_not]", "bool", "float32"}}};
  errors_of("logical_and") = {{"bfloat16", [bf] { logical_and(bf, bf); }, {"[logical_and]", "bool", "bfloat16"}}};
  errors_of("eq") = {{"undefined", [u] { eq(u, 1.0); }, {"[eq]", "undefined"}}};
  errors_of("operator<") = {{"undefined", [u] { static_cast<void>(u < 1.0); }, {"[lt]", "undefined"}}};
  errors_of("ge") = {{"undefined, the method", [u] { u.ge(1.0); }, {"[ge]", "undefined"}}};
}

// Rows whose first input cannot lose its rows alone: the other operand broadcasts against
// them (a (1, 4) with a (3, 1); a (3, 1) with a (2, 3, 4)), or a captured condition or
// mask has them. No zero-size check there.
const std::set<std::string> kNoZeroSize = {
    "add (1, 4) + (3, 1)", "mul (1, 4) * (3, 1)", "div (1, 4) / (3, 1)", "add (3, 1) + (2, 3, 4)",
    "maximum (3, 1), (2, 3, 4)", "add (1,3,1)+(2,3,4)", "maximum (3,1),(1,3,4)", "sub alpha (1,4)-(3,1) both sides",
    "mul of a slice with step in the graph", "where broadcast a (1,3,1)", "where same shape", "where double b",
    "where transposed", "masked_fill same shape", "where cond (3, 1), (3, 4), (4)",
    "where cond (3, 1), (3, 4), a double", "where int64 with a fractional double", "where int64 with float64"};

}  // namespace

std::vector<OpTest> binary_rows() {
  std::vector<OpTest> rows = rows_of({&arithmetic_rows, &integer_rows, &comparison_rows, &where_rows, &made_rows, &bf16_rows});
  for (OpTest& t : rows)
    if (kNoZeroSize.count(t.op + " " + t.sample)) t.zero_size = false;
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
