// Rows of std and norm (torch.linalg.vector_norm): forward values over dims,
// corrections, orders and keepdim, NaN, inf, empty and 0-d inputs, and norm's gradients
// (subgradients at zero and ties included) against PyTorch (shape_ops.txt, made by
// make_shape_fixtures.py), bfloat16 (bf16.txt), and generated inputs in every layout for
// gradcheck and the CUDA backend.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using Dims = std::vector<int64_t>;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Only the reductions round, in another order than torch's. float64: 1e-12 relative is a
// few thousand ulps; float32: 1e-5 is ~80 ulps, for sums of a few dozen products. The
// absolute floors cover results that cancel to near zero.
constexpr Tol kShape64{1e-12, 1e-13};
constexpr Tol kExact{0, 0};

// "-1" -> "m1", "0.5" -> "0p5", "inf" -> "inf", as the fixture script names numbers.
std::string key(double v) {
  std::string s;
  if (std::isinf(v)) {
    s = v < 0 ? "minf" : "inf";
  } else {
    std::ostringstream os;
    os << v;
    s = os.str();
    for (char& c : s) c = c == '-' ? 'm' : c == '.' ? 'p' : c;
  }
  return s;
}

OpTest fwd(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
           const std::string& out, std::vector<std::string> tags = {"f64", "f32"}) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(in),
          .expected = out,
          .file = "shape_ops.txt",
          .tags = std::move(tags),
          .tol64 = kShape64,
          .tol32 = kTol32Loose};
}

// A row on a constant input (NaN, inf, empty): forward values only, on the CPU.
OpTest constant_row(const std::string& op, const std::string& sample, Fn fn, const std::string& out, Tol tol) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .expected = out,
          .file = "shape_ops.txt",
          .tags = {"fixed"},
          .tol64 = tol,
          .tol32 = tol,
          .gradcheck = false,  // NaN, inf or nothing to perturb
          .zero_size = false,
          .cuda = false};  // no input to move
}

std::vector<OpTest> std_rows() {
  const std::vector<std::pair<std::string, Dims>> dimsets = {
      {"all", {}}, {"d1", {1}}, {"d02", {0, 2}}, {"dm1", {-1}}, {"dm1m2", {-1, -2}}};
  std::vector<OpTest> rows;
  for (const auto& [dn, dims] : dimsets)
    for (const int64_t corr : {0, 1, 2})
      for (const bool kd : {false, true}) {
        const std::string name = "std.{t}." + dn + ".c" + std::to_string(corr) + (kd ? ".k" : ".n");
        const std::string s = "(2, 3, 4) " + dn + " correction " + std::to_string(corr) + (kd ? " keepdim" : "");
        const Dims d = dims;
        const bool keeps = !d.empty() && std::count(d.begin(), d.end(), 0) == 0;
        for (const bool method : {false, true}) {
          OpTest t = fwd("std", s + (method ? " (method)" : ""),
                         [d, corr, kd, method](V x) { return method ? x[0].std(d, corr, kd) : kiln::std(x[0], d, corr, kd); },
                         {"std.{t}.x"}, name);
          t.zero_size = keeps;  // over dim 0 a zero-size input has a (NaN) result
          rows.push_back(std::move(t));
        }
      }
  rows.push_back(constant_row("std", "one element: NaN", [](V) { return kiln::std(from_vector<double>({3.0}, {1})); },
                              "std.one.out", kExact));
  rows.push_back(constant_row("std", "empty", [](V) { return kiln::std(zeros({0}, kFloat64)); }, "std.empty.out", kExact));
  return rows;
}

std::vector<OpTest> norm_fixture_rows() {
  struct D {
    std::string name;
    Dims dims;
    bool keepdim;
  };
  const std::vector<D> dimsets = {{"all", {}, false}, {"d1", {1}, false}, {"dm1k", {-1}, true}, {"d02", {0, 2}, false}};
  const std::vector<double> ps = {2.0, 1.0, kInf, -kInf, 0.0, 0.5, 3.0, -1.0, 1.5, 4.0};
  std::vector<OpTest> rows;
  for (const double p : ps)
    for (const D& d : dimsets)
      for (const bool method : {false, true}) {
        const Dims dims = d.dims;
        const bool kd = d.keepdim;
        OpTest t = fwd("norm", "(2, 3, 4) p " + key(p) + " " + d.name + (method ? " (method)" : ""),
                       [p, dims, kd, method](V x) { return method ? x[0].norm(p, dims, kd) : norm(x[0], p, dims, kd); },
                       {"norm.{t}.x"}, "norm.{t}.p" + key(p) + "." + d.name);
        // A zero row and ties: subgradients, which central differences cannot see (torch's
        // gradients are checked below; gradcheck on the generated rows).
        t.gradcheck = false;
        t.zero_size = d.name == "d1" || d.name == "dm1k";  // over dim 0 an empty input has a result
        // torch's float64 gradients (p = 0 has none): of sum(out * gout) over the last dim
        // and of 0.75 * norm over all.
        if (!method && p != 0.0 && (d.name == "dm1k" || d.name == "all")) {
          t.upstream = d.name == "dm1k" ? "norm.grad.gout" : "0.75";
          t.grads = {"norm.grad.p" + key(p) + "." + d.name};
          t.grad_tags = {"f64"};
        }
        rows.push_back(std::move(t));
      }
  OpTest plain = fwd("norm", "(2, 3, 4) the defaults (method)", [](V x) { return x[0].norm(); }, {"norm.{t}.x"},
                     "norm.{t}.p2.all");
  plain.gradcheck = false;  // the zero row
  plain.zero_size = false;
  rows.push_back(std::move(plain));
  for (const double p : ps) {
    rows.push_back(constant_row("norm", "NaN, p " + key(p),
                                [p](V) { return norm(from_vector<double>({std::nan(""), 1.0, -2.0}, {3}), p); },
                                "norm.nan.p" + key(p), kShape64));
    rows.push_back(constant_row("norm", "inf, p " + key(p),
                                [p](V) { return norm(from_vector<double>({kInf, 1.0, -2.0}, {3}), p); },
                                "norm.inf.p" + key(p), kShape64));
  }
  for (const double p : {2.0, 1.0, 0.0, 0.5, 3.0}) {
    rows.push_back(constant_row("norm", "empty, p " + key(p) + " all", [p](V) { return norm(zeros({0, 3}, kFloat64), p); },
                                "norm.empty.p" + key(p) + ".all", kExact));
    rows.push_back(constant_row("norm", "empty, p " + key(p) + " dim 0",
                                [p](V) { return norm(zeros({0, 3}, kFloat64), p, {0}); },
                                "norm.empty.p" + key(p) + ".d0", kExact));
  }
  for (const double p : {2.0, kInf, -kInf, -1.0})
    rows.push_back(constant_row("norm", "empty, p " + key(p) + " dim 1",
                                [p](V) { return norm(zeros({0, 3}, kFloat64), p, {1}); },
                                "norm.empty.p" + key(p) + ".d1", kExact));
  OpTest scalar = fwd("norm", "0-d", [](V x) { return norm(x[0]); }, {"norm.scalar.x"}, "norm.scalar.out", {"fixed"});
  scalar.tol64 = scalar.tol32 = kExact;
  rows.push_back(std::move(scalar));
  OpTest torch_norm = fwd("norm", "torch.norm's p 3 over dims 1, 2", [](V x) { return norm(x[0], 3.0, {1, 2}); },
                          {"norm.f64.x"}, "norm.torch_norm.out", {"fixed"});
  torch_norm.gradcheck = false;  // the zero row
  rows.push_back(std::move(torch_norm));
  return rows;
}

OpTest made(const std::string& op, const std::string& sample, Fn fn, std::vector<In> in, bool keeps_dim0) {
  return {.op = op, .sample = sample, .fn = std::move(fn), .made = std::move(in), .zero_size = keeps_dim0};
}

std::vector<OpTest> made_rows() {
  return {
      made("std", "all", [](V x) { return kiln::std(x[0]); }, {R({2, 3})}, false),
      made("std", "dim 1", [](V x) { return kiln::std(x[0], {1}); }, {R({2, 3, 4})}, true),
      made("std", "dims -1, -2 correction 0 keepdim", [](V x) { return kiln::std(x[0], {-1, -2}, 0, true); },
           {R({2, 3, 4})}, true),
      made("std", "dim 0 transposed", [](V x) { return kiln::std(x[0], {0}); }, {T({3, 4})}, false),
      made("std", "correction 2 permuted (method)", [](V x) { return x[0].std({1, 2}, 2); }, {Pm({2, 3, 4})}, true),
      made("norm", "2 all", [](V x) { return norm(x[0]); }, {R({2, 3})}, false),
      made("norm", "2 dim -1 keepdim", [](V x) { return norm(x[0], 2.0, {-1}, true); }, {R({2, 3, 4})}, true),
      made("norm", "2 stepped (method)", [](V x) { return x[0].norm(2.0, {0}); }, {S({3, 4})}, false),
      made("norm", "1", [](V x) { return norm(x[0], 1.0, {1}); }, {Z({2, 3})}, true),
      made("norm", "inf dim 1", [](V x) { return norm(x[0], kInf, {1}); }, {D({2, 3, 4})}, true),
      made("norm", "-inf dim 0 transposed", [](V x) { return norm(x[0], -kInf, {0}); }, {T(D({3, 4}))}, false),
      made("norm", "0 (no gradient)", [](V x) { return norm(x[0], 0.0, {1}); }, {Z({2, 3})}, true),
      made("norm", "0.5", [](V x) { return norm(x[0], 0.5, {-1}); }, {Z({2, 3})}, true),
      made("norm", "3 dims 0, 2", [](V x) { return norm(x[0], 3.0, {0, 2}); }, {R({2, 3, 4})}, false),
      made("norm", "-1", [](V x) { return norm(x[0], -1.0); }, {Z({2, 3})}, false),
      made("norm", "1.5 transposed", [](V x) { return norm(x[0], 1.5, {1}, true); }, {T(Z({3, 4}))}, true),
      made("norm", "4 permuted", [](V x) { return norm(x[0], 4.0, {-2}); }, {Pm({2, 3, 4})}, true),
  };
}

// bfloat16: float32 accumulation rounded once, within 1 ulp of torch.
std::vector<OpTest> bf16_rows() {
  auto row = [](const std::string& op, const std::string& sample, Fn fn, const std::string& out) {
    return OpTest{.op = op,
                  .sample = "bfloat16 " + sample,
                  .fn = std::move(fn),
                  .tags = {"bf16"},
                  .gradcheck = false,  // a bfloat16 sample: see the generated rows
                  .zero_size = false,
                  .cuda = false,
                  .bf16_inputs = {"red.x"},
                  .bf16_expected = out,
                  .bf16_ulps = 1};
  };
  return {row("std", "dim 0", [](V x) { return kiln::std(x[0], {0}); }, "red.std0"),
          row("norm", "2 dim 1", [](V x) { return norm(x[0], 2.0, {1}); }, "red.norm1")};
}

void add_errors(std::vector<OpTest>& rows) {
  for (OpTest& t : rows) {
    if (t.op == "std" && t.sample == "(2, 3, 4) all correction 0")
      t.errors = {{"int64", [] { kiln::std(ones({3}, kInt64)); }, {"[std]", "floating-point", "int64"}},
                  {"dim 0 twice", [] { kiln::std(ones({2, 3}), {0, 0}); }, {"[std]", "dim 0", "more than once"}},
                  {"dim 2 of 2", [] { kiln::std(ones({2, 3}), {2}); }, {"[std]", "dim 2", "out of range"}},
                  {"dim 1 of a 0-d tensor", [] { kiln::std(scalar_tensor(1.0), {1}); }, {"[std]", "dim 1", "out of range"}}};
    if (t.op == "norm" && t.sample == "(2, 3, 4) p 2 all")
      t.errors = {{"int64", [] { norm(ones({3}, kInt64)); }, {"[norm]", "floating-point", "int64"}},
                  {"dim 1 twice", [] { norm(ones({2, 3}), 2.0, {1, -1}); }, {"[norm]", "dim 1", "more than once"}},
                  {"dim -3 of 2", [] { norm(ones({2, 3}), 2.0, {-3}); }, {"[norm]", "dim -3", "out of range"}},
                  {"p NaN", [] { norm(ones({2}), std::nan("")); }, {"[norm]", "nan"}},
                  {"inf norm of an empty tensor", [] { norm(zeros({0, 3}), kInf); },
                   {"[norm]", "inf norm", "empty tensor", "(0, 3)"}},
                  {"-inf norm over an empty dim", [] { norm(zeros({0, 3}), -kInf, {0}); },
                   {"[norm]", "-inf norm", "dim 0", "empty"}},
                  {"-1 norm over an empty dim", [] { norm(zeros({0, 3}), -1.0, {0}, true); }, {"[norm]", "-1 norm", "dim 0"}}};
  }
}

}  // namespace

std::vector<OpTest> norm_rows() {
  std::vector<OpTest> rows = rows_of({&std_rows, &norm_fixture_rows, &made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
