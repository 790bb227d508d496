// Rows of the predicates and whole-tensor comparisons (isnan, isinf, isfinite, all, any,
// equal, allclose): values written out from torch's definitions (NaN is nonzero,
// integers are always finite, equal needs the same shape and NaN equals nothing),
// compared exactly, bool dtype included. Each row's generated input only carries the
// device (the CUDA check); the outputs are bools, so there is no gradient to check.
#include <cmath>
#include <limits>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Values of a dtype on like's device.
Tensor vals(const std::vector<double>& v, const Shape& s, DType dt, const Tensor& like) {
  return from_vector<double>(v, s).to(dt).to(like.device());
}
Tensor bools(const std::vector<bool>& v, const Shape& s) {
  std::vector<double> d(v.begin(), v.end());
  return ne(from_vector<double>(d, s), 0.0);
}
Tensor one_bool(bool b) { return bools({b}, {}); }
Tensor as_tensor(bool b, const Tensor& like) { return one_bool(b).to(like.device()); }

OpTest lit(const std::string& op, const std::string& sample, Fn fn, Tensor want) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .made = {R({1})},  // the device only
          .tags = {"f64"},
          .gradcheck = false,  // bool outputs: no gradient
          .zero_size = false,  // the values are written out
          .want = std::move(want)};
}

std::vector<OpTest> elementwise_rows() {
  std::vector<OpTest> rows;
  const std::vector<double> edge = {1.0, kNaN, kInf, -kInf, -0.0, 1e308};  // 1e308 is inf in float32
  for (DType dt : {kFloat32, kFloat64}) {
    const std::string n = std::string(dtype_name(dt));
    const bool f32 = dt == kFloat32;
    rows.push_back(lit("isnan", n + " NaN, infinities, -0, 1e308",
                       [edge, dt](V x) { return isnan(vals(edge, {6}, dt, x[0])); },
                       bools({false, true, false, false, false, false}, {6})));
    rows.push_back(lit("isinf", n + " NaN, infinities, -0, 1e308, method",
                       [edge, dt](V x) { return vals(edge, {6}, dt, x[0]).isinf(); },
                       bools({false, false, true, true, false, f32}, {6})));
    rows.push_back(lit("isfinite", n + " NaN, infinities, -0, 1e308, method",
                       [edge, dt](V x) { return vals(edge, {6}, dt, x[0]).isfinite(); },
                       bools({true, false, false, false, true, !f32}, {6})));
  }
  rows.push_back(lit("isnan", "arange", [](V x) { return isnan(arange(3.0).to(x[0].device())); },
                     bools({false, false, false}, {3})));
  rows.push_back(lit("isfinite", "arange", [](V x) { return isfinite(arange(3.0).to(x[0].device())); },
                     bools({true, true, true}, {3})));
  for (const char* op : {"isnan", "isinf", "isfinite"}) {
    const std::string o = op;
    auto f = [o](const Tensor& v) { return o == "isnan" ? isnan(v) : o == "isinf" ? isinf(v) : isfinite(v); };
    const bool fin = o == "isfinite";
    rows.push_back(lit(o, "int64", [f](V x) { return f(vals({-3, 0, 7}, {3}, kInt64, x[0])); },
                       bools({fin, fin, fin}, {3})));
    rows.push_back(lit(o, "(2, 3) transposed", [f](V x) { return f(vals({1, kNaN, kInf, 0, -kInf, 2}, {2, 3}, kFloat64, x[0]).t()); },
                       o == "isnan"   ? bools({false, false, true, false, false, false}, {3, 2})
                       : o == "isinf" ? bools({false, false, false, true, true, false}, {3, 2})
                                      : bools({true, true, false, false, false, true}, {3, 2})));
  }
  rows.push_back(lit("isnan", "empty", [](V x) { return isnan(zeros({2, 0}).to(x[0].device())); }, bools({}, {2, 0})));
  return rows;
}

std::vector<OpTest> all_any_rows() {
  // NaN counts as true.
  auto m = [](const Tensor& like) { return vals({1, 0, 2, 3, kNaN, 4}, {2, 3}, kFloat64, like); };
  std::vector<OpTest> rows = {
      lit("all", "everything, method", [m](V x) { return m(x[0]).all(); }, one_bool(false)),
      lit("any", "everything, method", [m](V x) { return m(x[0]).any(); }, one_bool(true)),
      lit("all", "dim 1, NaN true", [m](V x) { return all(m(x[0]), 1); }, bools({false, true}, {2})),
      lit("any", "dim 0", [m](V x) { return any(m(x[0]), 0); }, bools({true, true, true}, {3})),
      lit("all", "dim -1 keepdim", [m](V x) { return all(m(x[0]), -1, true); }, bools({false, true}, {2, 1})),
      lit("all", "empty: vacuous truth", [](V x) { return all(zeros({0}).to(x[0].device())); }, one_bool(true)),
      lit("any", "empty", [](V x) { return any(zeros({0}).to(x[0].device())); }, one_bool(false)),
      lit("all", "bool", [](V x) { return all(ones({2}, kBool).to(x[0].device())); }, one_bool(true)),
      lit("any", "int64 dim 1 keepdim", [](V x) { return any(vals({0, 0, 0, 5}, {2, 2}, kInt64, x[0]), 1, true); },
          bools({false, true}, {2, 1})),
      lit("all", "everything, (2, 3)", [m](V x) { return all(m(x[0])); }, one_bool(false)),
  };
  const Tensor mm = from_vector<double>({1, 0, 2, 3, kNaN, 4}, {2, 3});
  rows[0].errors = {{"dim 2 of 2", [mm] { all(mm, 2); }, {"[all]"}}};
  return rows;
}

std::vector<OpTest> comparison_rows() {
  auto v = [](const std::vector<double>& d, DType dt, const Tensor& like) {
    return vals(d, {static_cast<int64_t>(d.size())}, dt, like);
  };
  std::vector<OpTest> rows = {
      lit("equal", "the same values", [v](V x) { return as_tensor(equal(v({1, -0.0, 3}, kFloat32, x[0]), v({1, 0, 3}, kFloat32, x[0])), x[0]); },
          one_bool(true)),
      lit("equal", "one element differs",
          [v](V x) { return as_tensor(equal(v({1, 2, 3}, kFloat64, x[0]), v({1, 2, 3.0000000001}, kFloat64, x[0])), x[0]); },
          one_bool(false)),
      lit("equal", "NaN equals nothing", [v](V x) { return as_tensor(equal(v({1, kNaN}, kFloat64, x[0]), v({1, kNaN}, kFloat64, x[0])), x[0]); },
          one_bool(false)),
      lit("equal", "other shapes", [v](V x) { return as_tensor(equal(v({1, 1}, kFloat64, x[0]), v({1}, kFloat64, x[0])), x[0]); },
          one_bool(false)),
      lit("equal", "a transposed copy", [](V x) {
            const Tensor a = vals({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64, x[0]);
            return as_tensor(equal(a, a.t().contiguous().t()), x[0]);
          },
          one_bool(true)),
      // across dtypes, by value
      lit("equal", "bfloat16 and float32, exact values",
          [v](V x) { return as_tensor(equal(v({0.5, 2.0}, kBFloat16, x[0]), v({0.5, 2.0}, kFloat32, x[0])), x[0]); },
          one_bool(true)),
      lit("equal", "bfloat16 0.1 and float32 0.1",  // 0.10009765625 != 0.1f
          [v](V x) { return as_tensor(equal(v({0.1}, kBFloat16, x[0]), v({0.1}, kFloat32, x[0])), x[0]); },
          one_bool(false)),
      lit("allclose", "bfloat16 0.1 and float32 0.1, rtol 1e-3",
          [v](V x) { return as_tensor(allclose(v({0.1}, kBFloat16, x[0]), v({0.1}, kFloat32, x[0]), 1e-3, 0), x[0]); },
          one_bool(true)),
      lit("allclose", "bfloat16 0.1 and float32 0.1, rtol 1e-4",
          [v](V x) { return as_tensor(allclose(v({0.1}, kBFloat16, x[0]), v({0.1}, kFloat32, x[0]), 1e-4, 0), x[0]); },
          one_bool(false)),
      lit("allclose", "within atol", [v](V x) { return as_tensor(allclose(v({0, 1}, kFloat64, x[0]), v({1e-9, 1}, kFloat64, x[0]), 0, 2e-9), x[0]); },
          one_bool(true)),
      lit("allclose", "past atol", [v](V x) { return as_tensor(allclose(v({0, 1}, kFloat64, x[0]), v({3e-9, 1}, kFloat64, x[0]), 0, 2e-9), x[0]); },
          one_bool(false)),
      lit("allclose", "NaN is close to nothing",
          [v](V x) { return as_tensor(allclose(v({kNaN}, kFloat64, x[0]), v({kNaN}, kFloat64, x[0])), x[0]); }, one_bool(false)),
      lit("allclose", "equal infinities", [v](V x) { return as_tensor(allclose(v({kInf, -kInf}, kFloat64, x[0]), v({kInf, -kInf}, kFloat64, x[0])), x[0]); },
          one_bool(true)),
  };
  return rows;
}

}  // namespace

std::vector<OpTest> predicate_rows() {
  return rows_of({&elementwise_rows, &all_any_rows, &comparison_rows});
}

}  // namespace kiln::optable
