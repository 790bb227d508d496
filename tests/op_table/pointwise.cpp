// Rows of the pointwise unary ops: forward values against PyTorch (ops_forward.txt, made by
// make_op_fixtures.py; math_ops.txt, made by make_math_fixtures.py; bf16.txt, made by
// make_bf16_fixtures.py), including NaN, inf and -0, and generated inputs in every layout
// for gradcheck and the CUDA backend.
#include <limits>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


// A forward row on one input of ops_forward.txt ("un.{t}.x" -> "un.{t}.exp").
OpTest forward_row(const std::string& op, const std::string& sample, Fn fn, const std::string& group,
                   const std::string& out) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = {group + ".{t}.x"},
          .expected = group + ".{t}." + out,
          .file = "ops_forward.txt"};
}

// ops_forward.txt's unary samples: linspace(-3, 3, 25) ("un"), 0, -1 then
// linspace(0.1, 5, 18) ("pos"), linspace(-5, 5, 41) ("gelu") and nan, inf, -inf, 0, -0, 1
// ("sp"). Where a sample holds a kink of the op (0 for abs and relu, the bounds of clamp)
// or leaves its domain, it has no gradient to check there: the generated rows below check
// those.
std::vector<OpTest> ops_forward_rows() {
  std::vector<OpTest> rows;
  auto un = [&](const std::string& op, const std::string& out, Fn fn, bool smooth) {
    OpTest t = forward_row(op, "linspace(-3, 3) " + out, std::move(fn), "un", out);
    t.gradcheck = smooth;
    rows.push_back(std::move(t));
  };
  un("exp", "exp", [](V x) { return exp(x[0]); }, true);
  un("abs", "abs", [](V x) { return abs(x[0]); }, false);  // 0 is a kink
  un("tanh", "tanh", [](V x) { return tanh(x[0]); }, true);
  un("sigmoid", "sigmoid", [](V x) { return sigmoid(x[0]); }, true);
  un("relu", "relu", [](V x) { return relu(x[0]); }, false);  // 0 is a kink
  un("clamp", "clamp", [](V x) { return clamp(x[0], -1.0, 2.0); }, false);  // the bounds are samples
  un("clamp", "clamp_min", [](V x) { return clamp(x[0], -0.5, std::nullopt); }, false);
  un("clamp", "clamp_max", [](V x) { return clamp(x[0], std::nullopt, 0.5); }, false);
  un("clamp", "clamp_crossed", [](V x) { return clamp(x[0], 2.0, -1.0); }, true);
  un("pow", "pow3", [](V x) { return pow(x[0], 3.0); }, true);
  un("pow", "pow2", [](V x) { return pow(x[0], 2.0); }, true);
  un("pow", "pow_frac", [](V x) { return pow(x[0], 2.5); }, false);  // NaN below 0
  un("pow", "pow0", [](V x) { return pow(x[0], 0.0); }, true);
  rows.push_back(forward_row("exp", "the method", [](V x) { return x[0].exp(); }, "un", "exp"));

  // 0 and -1 lie outside these ops' domains (or on their kinks): forward values only.
  auto pos = [&](const std::string& op, const std::string& out, Fn fn) {
    OpTest t = forward_row(op, "0, -1, linspace(0.1, 5) " + out, std::move(fn), "pos", out);
    t.gradcheck = false;
    rows.push_back(std::move(t));
  };
  pos("log", "log", [](V x) { return log(x[0]); });
  pos("sqrt", "sqrt", [](V x) { return sqrt(x[0]); });
  pos("rsqrt", "rsqrt", [](V x) { return rsqrt(x[0]); });
  pos("pow", "pow_half", [](V x) { return pow(x[0], 0.5); });
  pos("pow", "pow_neg", [](V x) { return pow(x[0], -1.0); });
  pos("pow", "pow_frac", [](V x) { return pow(x[0], 1.7); });

  // For x << 0, 1 + erf(x/√2) (and 1 + tanh(…)) cancel: torch computes the same formula
  // in the same precision, so the result carries a few ulps of |x|·1, not of the tiny
  // result; hence an absolute floor of the inputs' scale (|x| <= 5).
  for (const std::string approximate : {"none", "tanh"}) {
    OpTest t = forward_row("gelu", "linspace(-5, 5) " + approximate,
                           [approximate](V x) { return gelu(x[0], approximate); }, "gelu", approximate);
    t.tol64 = {1e-12, 5 * 1e-15};
    t.tol32 = {1e-6, 5 * 2e-7};
    rows.push_back(std::move(t));
  }

  // NaN, inf, -inf, 0, -0, 1: no derivative to check at NaN and the infinities.
  auto sp = [&](const std::string& op, const std::string& out, Fn fn) {
    OpTest t = forward_row(op, "nan, inf, -0 " + out, std::move(fn), "sp", out);
    t.gradcheck = false;
    rows.push_back(std::move(t));
  };
  sp("exp", "exp", [](V x) { return exp(x[0]); });
  sp("log", "log", [](V x) { return log(x[0]); });
  sp("sqrt", "sqrt", [](V x) { return sqrt(x[0]); });
  sp("abs", "abs", [](V x) { return abs(x[0]); });
  sp("tanh", "tanh", [](V x) { return tanh(x[0]); });
  sp("sigmoid", "sigmoid", [](V x) { return sigmoid(x[0]); });
  sp("relu", "relu", [](V x) { return relu(x[0]); });
  sp("clamp", "clamp", [](V x) { return clamp(x[0], -2.0, 0.5); });
  sp("gelu", "gelu", [](V x) { return gelu(x[0]); });
  return rows;
}

// math_ops.txt: sin, cos, tan, erf, log1p, expm1, silu, softplus on edge values (NaN,
// inf, -0, overflow), on a (3, 5) sample and its transpose, the sample's float64
// gradient of sum(f(x)); integer and bool inputs (float32 out, as torch) and empty ones.
std::vector<OpTest> math_ops_rows() {
  struct Unary {
    std::string op, name;
    std::function<Tensor(const Tensor&)> f;
    bool floating_only = false;  // silu and softplus refuse integers
  };
  const std::vector<Unary> ops = {
      {"sin", "sin", [](const Tensor& x) { return sin(x); }},
      {"cos", "cos", [](const Tensor& x) { return cos(x); }},
      {"tan", "tan", [](const Tensor& x) { return tan(x); }},
      {"erf", "erf", [](const Tensor& x) { return erf(x); }},
      {"log1p", "log1p", [](const Tensor& x) { return log1p(x); }},
      {"expm1", "expm1", [](const Tensor& x) { return expm1(x); }},
      {"silu", "silu", [](const Tensor& x) { return silu(x); }, true},
      {"softplus", "softplus", [](const Tensor& x) { return softplus(x); }, true},
      {"softplus", "softplus_b2t5", [](const Tensor& x) { return softplus(x, 2.0, 5.0); }, true},
      {"softplus", "softplus_bhalf", [](const Tensor& x) { return softplus(x, 0.5); }, true},
      {"softplus", "softplus_bneg", [](const Tensor& x) { return softplus(x, -1.5, 3.0); }, true},
  };
  std::vector<OpTest> rows;
  for (const Unary& u : ops) {
    const auto f = u.f;
    rows.push_back({.op = u.op,
                    .sample = u.name + " edge values",
                    .fn = [f](V x) { return f(x[0]); },
                    .inputs = {"un.{t}.edge"},
                    .expected = "un.{t}.edge." + u.name,
                    .file = "math_ops.txt",
                    .gradcheck = false});  // NaN and the infinities have no derivative to check
    rows.push_back({.op = u.op,
                    .sample = u.name + " (3, 5)",
                    .fn = [f](V x) { return f(x[0]); },
                    .inputs = {"un.{t}.x"},
                    .expected = "un.{t}.x." + u.name,
                    .upstream = "1",
                    .grads = {"un.{t}.grad." + u.name},
                    .file = "math_ops.txt",
                    .grad_tags = {"f64"},
                    // log1p: the sample reaches below -1, outside the domain.
                    .gradcheck = u.op != "log1p"});
    rows.push_back({.op = u.op,
                    .sample = u.name + " transposed (3, 5)",
                    .fn = [f](V x) { return f(x[0].t()); },
                    .inputs = {"un.{t}.x"},
                    .expected = "un.{t}.xt." + u.name,
                    .file = "math_ops.txt",
                    .gradcheck = u.op != "log1p"});
    if (u.floating_only) continue;
    for (const std::string kind : {"int", "bool"})
      rows.push_back({.op = u.op,
                      .sample = u.name + " of " + kind + " (float32 out)",
                      .fn = [f](V x) { return f(x[0]); },
                      .inputs = {"un." + kind + ".x"},
                      .expected = "un." + kind + "." + u.name,
                      .file = "math_ops.txt",
                      .tags = {kind},
                      .gradcheck = false});  // integer inputs
    rows.push_back({.op = u.op,
                    .sample = u.name + " of (2, 0)",
                    .fn = [f](V x) { return f(x[0]); },
                    .expected = "un.empty." + u.name,
                    .made = {R({2, 0})},
                    .file = "math_ops.txt",
                    .tags = {"f32"},
                    .gradcheck = false});  // nothing to perturb
  }
  return rows;
}

// Generated inputs: gradcheck in float64 (gradcheck's tolerances, never loosened) and the
// CUDA backend against the CPU, contiguous and in other layouts.
std::vector<OpTest> made_rows() {
  return {
      made("neg", "(2, 3)", [](V x) { return neg(x[0]); }, {R({2, 3})}),
      made("operator-", "-x", [](V x) { return -x[0]; }, {R({2, 3})}),
      made("pow", "2", [](V x) { return pow(x[0], 2.0); }, {R({2, 3})}),
      made("pow", "3", [](V x) { return pow(x[0], 3.0); }, {R({2, 3})}),
      made("pow", "0.5 positive", [](V x) { return pow(x[0], 0.5); }, {P({2, 3})}),
      made("pow", "-1", [](V x) { return pow(x[0], -1.0); }, {Z({2, 3})}),
      made("pow", "1", [](V x) { return pow(x[0], 1.0); }, {R({2, 3})}),
      made("pow", "0", [](V x) { return pow(x[0], 0.0) + x[0]; }, {Z({2, 3})}),
      made("pow", "1.7 positive", [](V x) { return pow(x[0], 1.7); }, {P({2, 3})}),
      made("pow", "-2.5 positive", [](V x) { return pow(x[0], -2.5); }, {P({2, 3})}),
      made("pow", "2, 3, -1", [](V x) { return pow(x[0], 2.0) + pow(x[0], 3.0) + pow(x[0], -1.0); },
               {Z({2, 3})}),
      made("pow", "0.5, 1.7", [](V x) { return pow(x[0], 0.5) + pow(x[0], 1.7); }, {P({2, 3})}),
      made("exp", "(2, 3)", [](V x) { return exp(x[0]); }, {R({2, 3})}),
      made("log", "positive", [](V x) { return log(x[0]); }, {P({2, 3})}),
      made("sqrt", "positive", [](V x) { return sqrt(x[0]); }, {P({2, 3})}),
      made("rsqrt", "positive", [](V x) { return rsqrt(x[0]); }, {P({2, 3})}),
      made("abs", "away from 0", [](V x) { return abs(x[0]); }, {Z({2, 3})}),
      made("tanh", "(2, 3)", [](V x) { return tanh(x[0]); }, {R({2, 3})}),
      made("sigmoid", "(2, 3)", [](V x) { return sigmoid(x[0]); }, {R({2, 3})}),
      made("sigmoid", "of 10 x", [](V x) { return sigmoid(x[0] * 10.0); }, {R({2, 3})}),
      made("relu", "away from 0", [](V x) { return relu(x[0]); }, {Z({2, 3})}),
      made("gelu", "none", [](V x) { return gelu(x[0]); }, {R({2, 3})}),
      made("gelu", "none explicit", [](V x) { return gelu(x[0], "none"); }, {R({2, 3})}),
      made("gelu", "tanh", [](V x) { return gelu(x[0], "tanh"); }, {R({2, 3})}),
      made("gelu", "of 3 x", [](V x) { return gelu(x[0] * 3.0); }, {R({4, 5})}),
      made("gelu", "tanh of 3 x", [](V x) { return gelu(x[0] * 3.0, "tanh"); }, {R({4, 5})}),
      made("clamp", "min", [](V x) { return clamp(x[0], -0.4, std::nullopt); }, {D({3, 4})}),
      made("clamp", "max", [](V x) { return clamp(x[0], std::nullopt, 0.5); }, {D({3, 4})}),
      made("clamp", "both", [](V x) { return clamp(x[0], -0.4, 0.5); }, {D({3, 4})}),
      made("clamp", "both and max", [](V x) { return clamp(x[0], -0.4, 0.5) + clamp(x[0], std::nullopt, 0.2); },
               {D({3, 4})}),
      made("sign", "(no gradient) times x", [](V x) { return sign(x[0]) * x[0]; }, {Z({2, 3})}),
      made("exp", "methods chain", [](V x) { return x[0].exp().sigmoid().tanh().pow(2.0).sqrt(); }, {R({2, 3})}),
      // other layouts
      made("neg", "transposed", [](V x) { return neg(x[0]); }, {T({3, 4})}),
      made("operator-", "-x transposed", [](V x) { return -x[0]; }, {T({3, 4})}),
      made("pow", "3 stepped", [](V x) { return pow(x[0], 3.0); }, {S({3, 4})}),
      made("exp", "permuted", [](V x) { return exp(x[0]); }, {Pm({2, 3, 4})}),
      made("log", "transposed", [](V x) { return log(x[0]); }, {T(P({3, 4}))}),
      made("sqrt", "stepped", [](V x) { return sqrt(x[0]); }, {S(P({3, 2}))}),
      made("rsqrt", "permuted", [](V x) { return rsqrt(x[0]); }, {Pm(P({2, 3, 2}))}),
      made("abs", "transposed", [](V x) { return abs(x[0]); }, {T(Z({3, 4}))}),
      made("tanh", "transposed", [](V x) { return tanh(x[0]); }, {T({3, 4})}),
      made("sigmoid", "stepped", [](V x) { return sigmoid(x[0]); }, {S({3, 4})}),
      made("relu", "permuted", [](V x) { return relu(x[0]); }, {Pm(Z({2, 3, 4}))}),
      made("gelu", "tanh transposed", [](V x) { return gelu(x[0], "tanh"); }, {T({3, 4})}),
      made("gelu", "none permuted", [](V x) { return gelu(x[0]); }, {Pm({2, 3, 2})}),
      made("clamp", "both transposed view", [](V x) { return clamp(x[0].t(), -0.4, 0.5); }, {D({3, 4})}),
      made("clamp", "both stepped", [](V x) { return clamp(x[0], -0.4, 0.5); }, {S(D({3, 4}))}),
      // sin .. softplus
      made("sin", "(2, 3)", [](V x) { return sin(x[0]); }, {R({2, 3})}),
      made("sin", "transposed", [](V x) { return sin(x[0]); }, {T({3, 4})}),
      made("sin", "and cos of 3 x, transposed", [](V x) { return sin(x[0]) + cos(x[0] * 3.0); }, {T({3, 4})}),
      made("cos", "(2, 3)", [](V x) { return cos(x[0]); }, {R({2, 3})}),
      made("cos", "stepped", [](V x) { return cos(x[0]); }, {S({2, 3})}),
      made("tan", "of 0.4 x", [](V x) { return tan(x[0] * 0.4); }, {R({2, 3})}),
      made("erf", "(2, 3)", [](V x) { return erf(x[0]); }, {R({2, 3})}),
      made("erf", "permuted", [](V x) { return erf(x[0]); }, {Pm({2, 3, 4})}),
      made("erf", "of 2 x, stepped", [](V x) { return erf(x[0] * 2.0); }, {S({3, 4})}),
      made("log1p", "positive", [](V x) { return log1p(x[0]); }, {P({2, 3})}),
      made("log1p", "of x - 1.2 (in (-1, 0) and above)", [](V x) { return log1p(x[0] - 1.2); }, {P({2, 3})}),
      made("log1p", "of x - 1.2, and expm1", [](V x) { return log1p(x[0] - 1.2) + expm1(x[0]); }, {P({2, 3})}),
      made("expm1", "(2, 3)", [](V x) { return expm1(x[0]); }, {R({2, 3})}),
      made("silu", "(2, 3)", [](V x) { return silu(x[0]); }, {R({2, 3})}),
      made("silu", "permuted", [](V x) { return silu(x[0]); }, {Pm({2, 3, 4})}),
      made("silu", "of 8 x (saturated tails)", [](V x) { return silu(x[0] * 8.0); }, {R({2, 3})}),
      made("silu", "of 10 x, permuted", [](V x) { return silu(x[0] * 10.0); }, {Pm({2, 3, 4})}),
      made("silu", "of a broadcast sum", [](V x) { return silu(x[0] + x[1]); }, {R({2, 3}), R({3})}),
      made("softplus", "(2, 3)", [](V x) { return softplus(x[0]); }, {R({2, 3})}),
      made("softplus", "of 30 x", [](V x) { return softplus(x[0] * 30.0); }, {R({4, 5})}),
      made("softplus", "beta 2 threshold 1 (both sides)", [](V x) { return softplus(x[0], 2.0, 1.0); },
               {D({3, 4})}),
      made("softplus", "beta -1.5", [](V x) { return softplus(x[0], -1.5, 3.0); }, {D({3, 4})}),
      made("softplus", "beta 0.5 transposed", [](V x) { return softplus(x[0], 0.5); }, {T({3, 4})}),
      made("sin", "methods chain", [](V x) { return x[0].sin().cos().erf().expm1().log1p(); }, {R({2, 3})}),
  };
}

// bfloat16 against torch (bf16.txt): float32 math rounded once, bit for bit.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  auto row = [&](const std::string& op, const std::string& out, Fn fn, const std::string& in = "ew.a") {
    rows.push_back({.op = op,
                    .sample = "bfloat16 " + out,
                    .fn = std::move(fn),
                    .tags = {"bf16"},
                    .gradcheck = false,  // a bfloat16 sample: see the generated rows
                    .zero_size = false,
                    .cuda = false,
                    .bf16_inputs = {in},
                    .bf16_expected = "ew." + out});
  };
  row("operator-", "neg", [](V x) { return -x[0]; });
  row("exp", "exp", [](V x) { return exp(x[0]); });
  row("log", "log", [](V x) { return log(x[0]); }, "ew.p");
  row("sqrt", "sqrt", [](V x) { return sqrt(x[0]); }, "ew.p");
  row("tanh", "tanh", [](V x) { return tanh(x[0]); });
  row("gelu", "gelu_tanh", [](V x) { return gelu(x[0], "tanh"); });
  row("relu", "relu", [](V x) { return relu(x[0]); });
  row("sigmoid", "sigmoid", [](V x) { return sigmoid(x[0]); });
  row("silu", "silu", [](V x) { return silu(x[0]); });
  row("pow", "pow2", [](V x) { return pow(x[0], 2); });
  row("clamp", "clamp", [](V x) { return clamp(x[0], -0.7, 1.3); });
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
  errors_of("exp") = {{"int64 input", [] { exp(ones({3}, kInt64)); }, {"[exp]", "int64"}},
                      {"undefined", [u] { exp(u); }, {"[exp]", "undefined"}}};
  errors_of("relu") = {{"undefined", [u] { relu(u); }, {"[relu]", "undefined"}}};
  errors_of("operator-") = {{"bool", [] { -ones({3}, kBool); }, {"[neg]", "bool"}}};
  errors_of("sin") = {{"undefined", [u] { sin(u); }, {"[sin]", "undefined"}}};
  errors_of("expm1") = {{"undefined", [u] { expm1(u); }, {"[expm1]", "undefined"}}};
  errors_of("silu") = {{"int64", [] { silu(ones({2}, kInt64)); }, {"[silu]", "int64"}}};
  errors_of("softplus") = {{"bool", [] { softplus(ones({2}, kBool)); }, {"[softplus]", "bool"}},
                           {"beta 0", [] { softplus(ones({2}), 0.0); }, {"[softplus]", "beta", "0"}}};
}

}  // namespace

std::vector<OpTest> pointwise_rows() {
  std::vector<OpTest> rows = rows_of({&ops_forward_rows, &math_ops_rows, &made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
