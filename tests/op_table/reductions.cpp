// Rows of the reductions (sum, mean, var, logsumexp, amax, amin, max, min, argmax,
// argmin): forward values against PyTorch over every set of dims, with and without
// keepdim (ops_forward.txt, made by make_op_fixtures.py), ties, -inf, integer and bool
// inputs, empty dims (math_ops.txt, made by make_math_fixtures.py), bfloat16 (bf16.txt),
// and generated inputs in every layout for gradcheck and the CUDA backend. A reduction
// over dim 0 of a zero-size input has elements (or is an error): those rows have no
// zero-size check.
#include <algorithm>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using Dims = std::vector<int64_t>;

bool reduces_dim0(const Dims& dims) {
  return dims.empty() || std::count(dims.begin(), dims.end(), 0) > 0;
}

OpTest fwd(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> inputs,
           const std::string& expected, bool keeps_dim0, bool smooth = true) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(inputs),
          .expected = expected,
          .file = "ops_forward.txt",
          .gradcheck = smooth,
          .zero_size = keeps_dim0};
}

// (2, 3, 4) over every set of dims, with and without keepdim.
std::vector<OpTest> dims_rows() {
  const std::vector<std::pair<std::string, Dims>> dimsets = {
      {"all", {}}, {"d0", {0}}, {"d1", {1}}, {"d2", {2}}, {"dm1", {-1}}, {"d02", {0, 2}}, {"d01", {0, 1}}, {"d12", {1, 2}}};
  const std::vector<std::string> x = {"red.{t}.x"};
  std::vector<OpTest> rows;
  for (const auto& [dn, dims] : dimsets) {
    for (const bool kd : {false, true}) {
      const std::string k = "." + dn + (kd ? ".k" : ".n"), s = "(2, 3, 4) " + dn + (kd ? " keepdim" : "");
      const bool keeps = !reduces_dim0(dims);
      const Dims d = dims;
      rows.push_back(fwd("sum", s, [d, kd](V v) { return sum(v[0], d, kd); }, x, "red.{t}.sum" + k, keeps));
      rows.push_back(fwd("mean", s, [d, kd](V v) { return mean(v[0], d, kd); }, x, "red.{t}.mean" + k, keeps));
      rows.push_back(fwd("amax", s, [d, kd](V v) { return amax(v[0], d, kd); }, x, "red.{t}.amax" + k, keeps));
      rows.push_back(fwd("amin", s, [d, kd](V v) { return amin(v[0], d, kd); }, x, "red.{t}.amin" + k, keeps));
      rows.push_back(fwd("var", s + " correction 0", [d, kd](V v) { return var(v[0], d, 0, kd); }, x,
                         "red.{t}.var0" + k, keeps));
      rows.push_back(fwd("var", s + " correction 1", [d, kd](V v) { return var(v[0], d, 1, kd); }, x,
                         "red.{t}.var1" + k, keeps));
      rows.push_back(fwd("logsumexp", s, [d, kd](V v) { return logsumexp(v[0], d, kd); }, x, "red.{t}.lse" + k, keeps));
    }
  }
  rows.push_back(fwd("sum", "the method", [](V v) { return v[0].sum(); }, x, "red.{t}.sum.all.n", false));
  rows.push_back(fwd("mean", "the method", [](V v) { return v[0].mean(); }, x, "red.{t}.mean.all.n", false));
  rows.push_back(fwd("var", "the method", [](V v) { return v[0].var(); }, x, "red.{t}.var1.all.n", false));
  rows.push_back(fwd("amax", "the method", [](V v) { return v[0].amax({1}); }, x, "red.{t}.amax.d1.n", true));
  // rows with -inf, all -inf, +inf: no finite differences there
  rows.push_back(fwd("logsumexp", "-inf and inf, dim 1", [](V v) { return logsumexp(v[0], {1}); },
                     {"lseinf.{t}.x"}, "lseinf.{t}.d1", true, false));
  rows.push_back(fwd("logsumexp", "-inf and inf, dim 0 keepdim", [](V v) { return logsumexp(v[0], {0}, true); },
                     {"lseinf.{t}.x"}, "lseinf.{t}.d0k", false, false));
  return rows;
}

// (3, 4, 5) of small integers: ties everywhere, where the first index wins (and there is
// no derivative to check).
std::vector<OpTest> ties_rows() {
  const std::vector<std::string> x = {"ties.{t}.x"};
  std::vector<OpTest> rows;
  for (const int64_t d : {0, 1, 2, -1}) {
    for (const bool kd : {false, true}) {
      const std::string k = "." + std::to_string(d) + (kd ? ".k" : ".n");
      const std::string s = "ties, dim " + std::to_string(d) + (kd ? " keepdim" : "");
      const bool keeps = d != 0;
      rows.push_back(fwd("max", s + " values", [d, kd](V v) { return max(v[0], d, kd).values; }, x,
                         "ties.{t}.max" + k + ".values", keeps, false));
      rows.push_back(fwd("max", s + " indices", [d, kd](V v) { return max(v[0], d, kd).indices; }, x,
                         "ties.{t}.max" + k + ".indices", keeps, false));
      rows.push_back(fwd("min", s + " values", [d, kd](V v) { return min(v[0], d, kd).values; }, x,
                         "ties.{t}.min" + k + ".values", keeps, false));
      rows.push_back(fwd("min", s + " indices", [d, kd](V v) { return min(v[0], d, kd).indices; }, x,
                         "ties.{t}.min" + k + ".indices", keeps, false));
      rows.push_back(fwd("argmax", s, [d, kd](V v) { return argmax(v[0], d, kd); }, x, "ties.{t}.argmax" + k, keeps,
                         false));
      rows.push_back(fwd("argmax", s + " (method)", [d, kd](V v) { return v[0].argmax(d, kd); }, x,
                         "ties.{t}.argmax" + k, keeps, false));
      // argmin is min's indices.
      rows.push_back(fwd("argmin", s, [d, kd](V v) { return argmin(v[0], d, kd); }, x,
                         "ties.{t}.min" + k + ".indices", keeps, false));
    }
  }
  rows.push_back(fwd("argmax", "ties, flattened", [](V v) { return argmax(v[0]); }, x, "ties.{t}.argmax_flat", false,
                     false));
  rows.push_back(fwd("argmax", "ties, flattened (method)", [](V v) { return v[0].argmax(); }, x,
                     "ties.{t}.argmax_flat", false, false));
  rows.push_back(fwd("max", "ties, all", [](V v) { return max(v[0]); }, x, "ties.{t}.max_all", false, false));
  rows.push_back(fwd("min", "ties, all", [](V v) { return min(v[0]); }, x, "ties.{t}.min_all", false, false));
  return rows;
}

// int64 (2, 3, 4) and bool: integral results.
std::vector<OpTest> integer_rows() {
  const std::vector<std::string> x = {"redi.x"};
  std::vector<OpTest> rows = {
      fwd("sum", "int64, all", [](V v) { return sum(v[0]); }, x, "redi.sum", false),
      fwd("sum", "int64, dim 1", [](V v) { return sum(v[0], {1}); }, x, "redi.sum_d1", true),
      fwd("amax", "int64, dim 2", [](V v) { return amax(v[0], {2}); }, x, "redi.amax_d2", true),
      fwd("max", "int64, dim 0 values", [](V v) { return max(v[0], 0).values; }, x, "redi.max_d0.values", false),
      fwd("max", "int64, dim 0 indices", [](V v) { return max(v[0], 0).indices; }, x, "redi.max_d0.indices", false),
      fwd("sum", "bool (int64 out)", [](V v) { return sum(gt(v[0], 0.0)); }, x, "redi.bool_sum", false),
      fwd("sum", "bool, dim 2 keepdim", [](V v) { return sum(v[0] > 0.0, {2}, true); }, x, "redi.bool_sum_d2", true),
  };
  for (OpTest& t : rows) {
    t.tags = {"fixed"};
    t.gradcheck = false;  // integer inputs
  }
  return rows;
}

// Empty dims, as torch: sums of nothing are 0, means NaN, logsumexp -inf.
std::vector<OpTest> empty_rows() {
  auto row = [](const std::string& op, const std::string& sample, Fn fn, const std::string& in,
                const std::string& out) {
    return OpTest{.op = op,
                  .sample = sample,
                  .fn = std::move(fn),
                  .inputs = {in},
                  .expected = out,
                  .file = "math_ops.txt",
                  .tags = {"fixed"},
                  .gradcheck = false,  // nothing to perturb
                  .zero_size = false};
  };
  return {
      row("logsumexp", "(3, 0) over dim 1", [](V v) { return logsumexp(v[0], {1}); }, "red.e30", "red.e30.lse.d1"),
      row("logsumexp", "(3, 0) over dim 1 keepdim", [](V v) { return logsumexp(v[0], {1}, true); }, "red.e30",
          "red.e30.lse.d1.k"),
      row("logsumexp", "(3, 0) over dim 0", [](V v) { return logsumexp(v[0], {0}); }, "red.e30", "red.e30.lse.d0"),
      row("logsumexp", "(0, 3) over dim 1", [](V v) { return logsumexp(v[0], {1}); }, "red.e03", "red.e03.lse.d1"),
      row("logsumexp", "(0, 3) over all", [](V v) { return logsumexp(v[0], {0, 1}); }, "red.e03", "red.e03.lse.all"),
      row("sum", "(3, 0) over dim 1", [](V v) { return sum(v[0], {1}); }, "red.e30", "red.e30.sum.d1"),
      row("mean", "(3, 0) over dim 1", [](V v) { return mean(v[0], {1}); }, "red.e30", "red.e30.mean.d1"),
      row("sum", "(0, 3) over all", [](V v) { return sum(v[0]); }, "red.e03", "red.e03.sum.all"),
      row("mean", "(0, 3) over all", [](V v) { return mean(v[0]); }, "red.e03", "red.e03.mean.all"),
      row("amax", "(0, 3) over dim 1", [](V v) { return amax(v[0], {1}); }, "red.e03", "red.e03.amax.d1"),
      row("amin", "(0, 3) over dim 1", [](V v) { return amin(v[0], {1}); }, "red.e03", "red.e03.amin.d1"),
      row("max", "(0, 3) over dim 1 values", [](V v) { return max(v[0], 1).values; }, "red.e03",
          "red.e03.max.d1.values"),
      row("max", "(0, 3) over dim 1 indices", [](V v) { return max(v[0], 1).indices; }, "red.e03",
          "red.e03.max.d1.indices"),
      row("argmax", "(0, 3) over dim 1", [](V v) { return argmax(v[0], 1); }, "red.e03", "red.e03.argmax.d1"),
  };
}

OpTest made(const std::string& op, const std::string& sample, Fn fn, std::vector<In> in, bool keeps_dim0) {
  return {.op = op, .sample = sample, .fn = std::move(fn), .made = std::move(in), .zero_size = keeps_dim0};
}

// Generated inputs: gradcheck in float64 (gradcheck's tolerances, never loosened) and the
// CUDA backend against the CPU. amax, amin, max and min on distinct values (no ties).
std::vector<OpTest> made_rows() {
  std::vector<OpTest> rows = {
      made("sum", "all", [](V x) { return sum(x[0]); }, {R({2, 3, 4})}, false),
      made("sum", "all keepdim", [](V x) { return sum(x[0], {}, true); }, {R({2, 3})}, false),
      made("sum", "dim 1", [](V x) { return sum(x[0], {1}); }, {R({2, 3, 4})}, true),
      made("sum", "dim -1 keepdim", [](V x) { return sum(x[0], {-1}, true); }, {R({2, 3, 4})}, true),
      made("sum", "dims 0,2", [](V x) { return sum(x[0], {0, 2}); }, {R({2, 3, 4})}, false),
      made("sum", "dims 2,0 keepdim", [](V x) { return sum(x[0], {2, 0}, true); }, {R({2, 3, 4})}, false),
      made("sum", "0-d", [](V x) { return sum(x[0]); }, {R({})}, false),
      made("sum", "transposed dim 0", [](V x) { return sum(x[0], {0}); }, {T({3, 4})}, false),
      made("sum", "permuted dims 1,2", [](V x) { return sum(x[0], {1, 2}); }, {Pm({2, 3, 4})}, true),
      made("sum", "of a product", [](V x) { return (x[0] * x[1]).sum({0}); }, {R({3, 2}), R({3, 2})}, false),
      made("sum", "big rows", [](V x) { return sum(x[0], {1}); }, {R({3, 1000})}, true),
      made("sum", "big columns", [](V x) { return sum(x[0], {0}, true); }, {R({1000, 3})}, false),
      made("mean", "all", [](V x) { return mean(x[0]); }, {R({2, 3, 4})}, false),
      made("mean", "all keepdim", [](V x) { return mean(x[0], {}, true); }, {R({2, 3})}, false),
      made("mean", "dim 0", [](V x) { return mean(x[0], {0}); }, {R({2, 3, 4})}, false),
      made("mean", "dim 1 keepdim", [](V x) { return mean(x[0], {1}, true); }, {R({2, 3, 4})}, true),
      made("mean", "dims 0,1", [](V x) { return mean(x[0], {0, 1}); }, {R({2, 3, 4})}, false),
      made("mean", "dims 1,2 keepdim", [](V x) { return mean(x[0], {1, 2}, true); }, {R({2, 3, 4})}, true),
      made("mean", "stepped dim 1", [](V x) { return x[0].mean({1}); }, {S({3, 4})}, true),
      made("mean", "stepped dim 1 keepdim, 40 wide", [](V x) { return mean(x[0], {1}, true); }, {S({3, 40})}, true),
      made("var", "all correction 1", [](V x) { return var(x[0]); }, {R({2, 3})}, false),
      made("var", "all correction 0", [](V x) { return var(x[0], {}, 0); }, {R({2, 3})}, false),
      made("var", "dim 1 correction 1", [](V x) { return var(x[0], {1}, 1); }, {R({2, 3, 4})}, true),
      made("var", "dim 0 correction 0 keepdim", [](V x) { return var(x[0], {0}, 0, true); }, {R({3, 4})}, false),
      made("var", "dims 0,2 correction 1 keepdim", [](V x) { return var(x[0], {0, 2}, 1, true); }, {R({2, 3, 4})},
           false),
      made("var", "dims -1,-2 correction 0", [](V x) { return var(x[0], {-1, -2}, 0); }, {R({2, 3, 4})}, true),
      made("var", "transposed", [](V x) { return var(x[0], {1}); }, {T({3, 4})}, true),
      made("var", "dim -1, 50 wide", [](V x) { return var(x[0], {-1}); }, {R({4, 50})}, true),
      made("logsumexp", "dim 1", [](V x) { return logsumexp(x[0], {1}); }, {R({2, 3, 4})}, true),
      made("logsumexp", "dim -1 keepdim", [](V x) { return logsumexp(x[0], {-1}, true); }, {R({2, 3, 4})}, true),
      made("logsumexp", "dims 0,2", [](V x) { return logsumexp(x[0], {0, 2}); }, {R({2, 3, 4})}, false),
      made("logsumexp", "large values", [](V x) { return logsumexp(x[0] * 100.0, {0}); }, {R({3, 2})}, false),
      made("logsumexp", "of 30 x, dims 0,2", [](V x) { return logsumexp(x[0] * 30.0, {0, 2}); }, {R({2, 3, 4})},
           false),
      made("logsumexp", "all dims", [](V x) { return logsumexp(x[0], {0, 1}); }, {R({2, 3})}, false),
      made("logsumexp", "permuted", [](V x) { return logsumexp(x[0], {1}); }, {Pm({2, 3, 4})}, true),
      made("amax", "all", [](V x) { return amax(x[0]); }, {D({2, 3, 4})}, false),
      made("amax", "dim 1", [](V x) { return amax(x[0], {1}); }, {D({2, 3, 4})}, true),
      made("amax", "dim -1 keepdim", [](V x) { return amax(x[0], {-1}, true); }, {D({2, 3, 4})}, true),
      made("amax", "dims 0,2", [](V x) { return amax(x[0], {0, 2}); }, {D({2, 3, 4})}, false),
      made("amin", "all keepdim", [](V x) { return amin(x[0], {}, true); }, {D({3, 4})}, false),
      made("amin", "dim 0", [](V x) { return amin(x[0], {0}); }, {D({2, 3, 4})}, false),
      made("amin", "dims 1,2 keepdim", [](V x) { return amin(x[0], {1, 2}, true); }, {D({2, 3, 4})}, true),
      made("amax", "transposed view", [](V x) { return amax(x[0].t(), {1}); }, {D({3, 4})}, false),
      made("amin", "transposed leaf", [](V x) { return amin(x[0], {0}); }, {T(D({3, 4}))}, false),
      made("amin", "all", [](V x) { return amin(x[0]); }, {D({3, 4})}, false),
      made("max", "all stepped", [](V x) { return max(x[0]); }, {S(D({3, 2}))}, false),
      made("max", "dim 1 permuted leaf", [](V x) { return max(x[0], 1).values; }, {Pm(D({2, 3, 4}))}, true),
      made("max", "all", [](V x) { return max(x[0]); }, {D({3, 4})}, false),
      made("min", "all", [](V x) { return min(x[0]); }, {D({3, 4})}, false),
      made("max", "all (method)", [](V x) { return x[0].max(); }, {D({5})}, false),
      made("max", "dim 0", [](V x) { return max(x[0], 0).values; }, {D({3, 4})}, false),
      made("max", "dim 1", [](V x) { return max(x[0], 1).values; }, {D({2, 3, 4})}, true),
      made("max", "dim -1 keepdim", [](V x) { return max(x[0], -1, true).values; }, {D({2, 3, 4})}, true),
      made("min", "dim 1", [](V x) { return min(x[0], 1).values; }, {D({2, 3, 4})}, true),
      made("min", "dim 0 keepdim", [](V x) { return min(x[0], 0, true).values; }, {D({3, 4})}, false),
      made("min", "dim 0 keepdim, transposed", [](V x) { return min(x[0], 0, true).values; }, {T(D({3, 4}))}, false),
      made("min", "dim 1-D", [](V x) { return min(x[0], 0).values; }, {D({5})}, false),
      made("max", "dim of a permuted view", [](V x) { return max(x[0].permute({2, 0, 1}), 2).values; },
           {D({2, 3, 4})}, true),
  };
  // Ties made by the clamp share amax's gradient: no finite difference across the kink.
  OpTest ties = made("amax", "ties shared", [](V x) { return amax(clamp(x[0], std::nullopt, 0.3), {1}); },
                     {R({4, 6})}, true);
  ties.gradcheck = false;
  rows.push_back(std::move(ties));
  return rows;
}

// bfloat16: float32 accumulation rounded once, within 1 ulp of torch (another order of
// the float32 sum moves a rounding now and then); max is exact.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  auto row = [&](const std::string& op, const std::string& sample, Fn fn, const std::string& out, int ulps) {
    rows.push_back({.op = op,
                    .sample = "bfloat16 " + sample,
                    .fn = std::move(fn),
                    .tags = {"bf16"},
                    .gradcheck = false,  // a bfloat16 sample: see the generated rows
                    .zero_size = false,
                    .cuda = false,
                    .bf16_inputs = {"red.x"},
                    .bf16_expected = out,
                    .bf16_ulps = ulps});
  };
  row("sum", "all", [](V x) { return sum(x[0]); }, "red.sum", 1);
  row("sum", "dim 1", [](V x) { return sum(x[0], {1}); }, "red.sum1", 1);
  row("sum", "dim 0", [](V x) { return sum(x[0], {0}); }, "red.sum0", 1);
  row("mean", "all", [](V x) { return mean(x[0]); }, "red.mean", 1);
  row("mean", "dim 1", [](V x) { return mean(x[0], {1}); }, "red.mean1", 1);
  row("mean", "dim 0 keepdim", [](V x) { return mean(x[0], {0}, true); }, "red.mean0", 1);
  row("amax", "dim 1", [](V x) { return amax(x[0], {1}); }, "red.amax1", 0);
  row("max", "dim 0", [](V x) { return max(x[0], 0).values; }, "red.max0", 0);
  row("argmax", "dim 1", [](V x) { return argmax(x[0], 1); }, "red.argmax1", 0);
  row("var", "dim 1", [](V x) { return var(x[0], {1}); }, "red.var1", 1);
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
  const Tensor x = ones({2, 3}), s = scalar_tensor(2.5), u;
  errors_of("sum") = {{"dim 2 of 2", [x] { sum(x, {2}); }, {"[sum]", "dim 2", "2 dimensions"}},
                      {"dim -3 of 2", [x] { sum(x, {-3}); }, {"[sum]", "dim -3", "2 dimensions"}},
                      {"dim 0 twice", [x] { sum(x, {0, 0}); }, {"[sum]", "dim 0", "more than once"}},
                      {"dim 1 of a 0-d tensor", [s] { s.sum({1}); }, {"[sum]", "dim 1", "0 dimensions"}},
                      {"0 and -1 of a 0-d tensor", [s] { s.sum({0, -1}); }, {"[sum]", "more than once"}},
                      {"undefined", [u] { sum(u); }, {"[sum]", "undefined"}}};
  errors_of("mean") = {{"dim 5", [x] { mean(x, {5}); }, {"[mean]", "dim 5"}},
                       {"bool", [] { mean(ones({3}, kBool)); }, {"[mean]", "bool"}}};
  errors_of("amax") = {{"dim 2", [x] { amax(x, {2}); }, {"[amax]", "dim 2"}},
                       {"over an empty dim", [] { amax(zeros({3, 0}), {1}); }, {"[amax]", "dim 1", "size 0", "(3, 0)"}},
                       {"all of an empty tensor", [] { amax(zeros({0, 3})); }, {"[amax]", "empty", "(0, 3)", "all"}}};
  errors_of("amin") = {{"over an empty dim", [] { amin(zeros({3, 0}), {-1}); }, {"[amin]", "dim 1", "size 0"}}};
  errors_of("max") = {{"dim 2", [x] { max(x, 2); }, {"[max]", "dim 2"}},
                      {"all of an empty tensor", [] { max(zeros({0, 3})); }, {"[max]", "(0, 3)"}},
                      {"over an empty dim", [] { max(zeros({0, 3}), 0); }, {"[max]", "dim 0", "size 0"}}};
  errors_of("argmax") = {{"dim -3", [x] { argmax(x, -3); }, {"[argmax]", "dim -3"}},
                         {"over an empty dim", [] { argmax(zeros({0, 3}), 0); }, {"[argmax]", "dim 0"}}};
}

}  // namespace

std::vector<OpTest> reduction_rows() {
  std::vector<OpTest> rows = rows_of({&dims_rows, &ties_rows, &integer_rows, &empty_rows, &made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
