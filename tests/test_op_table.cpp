// The op table: one record per op sample, as PyTorch's OpInfo, and one driver that checks
// each record every way the op must hold: forward values and the gradients of
// sum(out * g) against PyTorch's (tests/fixtures/llama_ops.txt, written by
// make_llama_ops_fixtures.py), float64 gradcheck on contiguous and non-contiguous inputs,
// bfloat16 against float32, zero-size inputs, the CUDA backend against the CPU (where a
// GPU is present), and the op's errors with their messages. An op enters the table
// through its record in core/op_records.inc and its rows here.
#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::Tol;

namespace {

const testing::FixtureFile kFixtures("llama_ops.txt", "make_llama_ops_fixtures.py");

// Torch and Kiln evaluate the same formulas in different orders: a few ulps apart.
constexpr Tol kTol64{1e-12, 1e-14};
constexpr Tol kTol32{1e-5, 1e-6};

// "rms.{t}.x" -> "rms.f64.x"
std::string with_tag(std::string pattern, const std::string& tag) {
  const size_t at = pattern.find("{t}");
  if (at != std::string::npos) pattern.replace(at, 3, tag);
  return pattern;
}

struct ErrorCase {
  std::string what;
  std::function<void()> call;
  std::vector<std::string> message_parts;  // the message starts with the first
};

struct OpTest {
  std::string op;      // the record's name (kiln::op_records())
  std::string sample;  // what this row exercises
  // The op on its differentiable inputs (the rest are captured).
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::vector<std::string> inputs;  // fixture names with {t} for the dtype tag
  std::string expected;             // the output's fixture name
  std::string upstream;             // g of sum(out * g)
  std::vector<std::string> grads;   // d/d input of sum(out * g), one per input
  double bf16_rtol = 0;             // bfloat16 against float32: |d| <= rtol * max|out| (0: no bf16)
  std::vector<ErrorCase> errors = {};
};

Tensor fx(const std::string& name) { return kFixtures.get(name); }

std::vector<Tensor> inputs_of(const OpTest& t, const std::string& tag) {
  std::vector<Tensor> v;
  for (const std::string& name : t.inputs) v.push_back(fx(with_tag(name, tag)));
  return v;
}

void check_forward_and_grads(const OpTest& t) {
  for (const std::string tag : {"f64", "f32"}) {
    CAPTURE(tag);
    const Tol tol = tag == std::string("f64") ? kTol64 : kTol32;
    std::vector<Tensor> leaves;
    for (const Tensor& x : inputs_of(t, tag)) leaves.push_back(x.detach().clone().requires_grad_());
    const Tensor out = t.fn(leaves);
    testing::check_matches(t.op + " " + t.sample + " " + tag, out, fx(with_tag(t.expected, tag)), tol);
    mul(out, fx(with_tag(t.upstream, tag))).sum().backward();
    for (size_t i = 0; i < t.grads.size(); ++i)
      testing::check_matches(t.op + " " + t.sample + " grad " + std::to_string(i) + " " + tag, leaves[i].grad(),
                             fx(with_tag(t.grads[i], tag)), tol);
  }
}

// float64 central differences, on the fixture's inputs and on transposed copies of them
// (the same values, other strides).
void check_gradcheck(const OpTest& t) {
  const std::vector<Tensor> x = inputs_of(t, "f64");
  std::vector<Tensor> leaves, strided;
  for (const Tensor& v : x) {
    leaves.push_back(v.detach().clone().requires_grad_());
    Tensor s = v.dim() >= 2 ? v.transpose(-1, -2).contiguous().transpose(-1, -2) : v.clone();
    if (v.dim() >= 2 && v.size(-1) > 1 && v.size(-2) > 1) REQUIRE_FALSE(s.is_contiguous());
    strided.push_back(s.detach().requires_grad_());
  }
  GradcheckOptions opts;
  opts.raise_exception = false;
  for (const auto* in : {&leaves, &strided}) {
    const GradcheckResult r = gradcheck_result(t.fn, *in, opts);
    CHECK_MESSAGE(r.ok, t.op, " ", t.sample, (in == &leaves ? "" : " (non-contiguous)"), ": ", r.message);
  }
}

void check_bf16(const OpTest& t) {
  if (t.bf16_rtol == 0) return;
  const std::vector<Tensor> x32 = inputs_of(t, "f32");
  std::vector<Tensor> x16;
  for (const Tensor& v : x32) x16.push_back(v.to(kBFloat16));
  const Tensor out16 = t.fn(x16);
  CHECK(out16.dtype() == kBFloat16);
  std::vector<Tensor> rounded;  // float32 on the bfloat16 inputs: only the op's own rounding differs
  for (const Tensor& v : x16) rounded.push_back(v.to(kFloat32));
  const Tensor ref = t.fn(rounded);
  const double scale = ref.abs().max().item();
  const double diff = (out16.to(kFloat32) - ref).abs().max().item();
  CHECK_MESSAGE(diff <= t.bf16_rtol * scale, t.op, " ", t.sample, " bf16: max |diff| ", diff, " > ", t.bf16_rtol,
                " * ", scale);
}

// The same op on a first input (the data; the rest are parameters) with a zero-size
// leading dim: the output has no elements either.
void check_zero_size(const OpTest& t) {
  std::vector<Tensor> x = inputs_of(t, "f64");
  if (x[0].dim() < 2) return;
  x[0] = x[0].narrow(0, 0, 0);
  const Tensor out = t.fn(x);
  CHECK(out.numel() == 0);
}

// CPU against CUDA where a GPU is present (the CPU's result is the reference).
void check_cuda(const OpTest& t) {
  if (!cuda::is_available()) return;
  const std::vector<Tensor> x = inputs_of(t, "f32");
  std::vector<Tensor> xg;
  for (const Tensor& v : x) xg.push_back(v.to(Device(DeviceType::CUDA, 0)));
  testing::check_matches(t.op + " " + t.sample + " cuda", t.fn(xg).to(kCPU), t.fn(x), kTol32);
}

void check_errors(const OpTest& t) {
  for (const ErrorCase& e : t.errors) {
    const std::string msg = testing::error_of(e.call);
    INFO(t.op, ": ", e.what, ": ", msg);
    REQUIRE(!e.message_parts.empty());
    CHECK_MESSAGE(msg.rfind(e.message_parts[0], 0) == 0, "message does not start with ", e.message_parts[0]);
    for (const std::string& part : e.message_parts) CHECK_MESSAGE(msg.find(part) != std::string::npos, "lacks ", part);
  }
}

void run_table(const std::vector<OpTest>& table) {
  std::set<std::string> records;
  for (const OpRecord& r : op_records()) records.insert(r.name);
  for (const OpTest& t : table) {
    SUBCASE((t.op + " " + t.sample).c_str()) {
      REQUIRE_MESSAGE(records.count(t.op) == 1, t.op, " has no record in core/op_records.inc");
      check_forward_and_grads(t);
      check_gradcheck(t);
      check_bf16(t);
      check_zero_size(t);
      check_cuda(t);
      check_errors(t);
    }
  }
}

using V = const std::vector<Tensor>&;

std::vector<OpTest> rms_norm_rows() {
  const Tensor x = randn({2, 3, 8});
  const Tensor w8 = ones({8});
  return {
      {"rms_norm", "last dim, default eps", [](V v) { return rms_norm(v[0], {8}, v[1]); },
       {"rms.{t}.x", "rms_last.{t}.weight"}, "rms_last.{t}.out", "rms.{t}.g",
       {"rms_last.{t}.grad_x", "rms_last.{t}.grad_weight"}, 0.02,
       {{"normalized_shape not at the end", [=] { rms_norm(x, {3}, Tensor()); },
         {"[rms_norm]", "does not end with normalized_shape (3,)"}},
        {"weight of the wrong shape", [=] { rms_norm(x, {8}, ones({4})); },
         {"[rms_norm]", "weight of shape (4,) does not match normalized_shape (8,)"}},
        {"weight of another dtype", [=] { rms_norm(x, {8}, ones({8}, kFloat64)); },
         {"[rms_norm]", "weight has dtype float64, input has float32"}},
        {"negative eps", [=] { rms_norm(x, {8}, w8, -1.0); }, {"[rms_norm]", "eps must be non-negative, got -1"}},
        {"integer input", [] { rms_norm(ones({2, 8}, kInt64), {8}); }, {"[rms_norm]", "int64"}},
        {"more dims than the input", [=] { rms_norm(x, {1, 2, 3, 8}); }, {"[rms_norm]", "does not fit"}}}},
      {"rms_norm", "last dim, eps 1e-6", [](V v) { return rms_norm(v[0], {8}, v[1], 1e-6); },
       {"rms.{t}.x", "rms_last_eps.{t}.weight"}, "rms_last_eps.{t}.out", "rms.{t}.g",
       {"rms_last_eps.{t}.grad_x", "rms_last_eps.{t}.grad_weight"}, 0.02},
      {"rms_norm", "two dims", [](V v) { return rms_norm(v[0], {3, 8}, v[1], 1e-5); },
       {"rms.{t}.x", "rms_two.{t}.weight"}, "rms_two.{t}.out", "rms.{t}.g",
       {"rms_two.{t}.grad_x", "rms_two.{t}.grad_weight"}, 0.02},
      {"rms_norm", "no weight", [](V v) { return rms_norm(v[0], {8}); }, {"rms.{t}.x"}, "rms_noweight.{t}.out",
       "rms.{t}.g", {"rms_noweight.{t}.grad_x"}, 0.02},
  };
}

// The tables from the fixture's positions; the op takes them in the input's dtype.
RotaryTables tables_for(const Tensor& x, double base) {
  return rotary_tables(fx("rope.positions"), 8, base, TensorOptions(x.dtype()).device(x.device()));
}

std::vector<OpTest> rotary_rows() {
  const Tensor x = randn({2, 5, 8});
  const RotaryTables t = rotary_tables(arange(5), 8);
  std::vector<OpTest> rows;
  for (const auto& [base, btag] : {std::pair{10000.0, "b1e4"}, std::pair{100000.0, "b1e5"}}) {
    const std::string b = btag;
    rows.push_back({"apply_rotary_emb", "half-split, base " + b,
                    [base = base](V v) {
                      const RotaryTables r = tables_for(v[0], base);
                      return apply_rotary_emb(v[0], r.cos, r.sin);
                    },
                    {"rope.{t}.x"}, "rope_half." + b + ".{t}.out", "rope.{t}.g", {"rope_half." + b + ".{t}.grad_x"},
                    0.02});
    rows.push_back({"apply_rotary_emb", "interleaved, base " + b,
                    [base = base](V v) {
                      const RotaryTables r = tables_for(v[0], base);
                      return apply_rotary_emb(v[0], r.cos, r.sin, /*interleaved=*/true);
                    },
                    {"rope.{t}.x"}, "rope_inter." + b + ".{t}.out", "rope.{t}.g", {"rope_inter." + b + ".{t}.grad_x"},
                    0.02});
  }
  rows[0].errors = {
      {"odd last dim", [] { apply_rotary_emb(randn({2, 5, 7}), ones({5, 3}), ones({5, 3})); },
       {"[apply_rotary_emb]", "last dim must be even", "(2, 5, 7)"}},
      {"tables of the wrong width", [=] { apply_rotary_emb(x, ones({5, 3}), ones({5, 3})); },
       {"[apply_rotary_emb]", "need a last dim of 4"}},
      {"cos and sin differ", [=] { apply_rotary_emb(x, ones({5, 4}), ones({1, 4})); },
       {"[apply_rotary_emb]", "cos of shape (5, 4) and sin of shape (1, 4) differ"}},
      {"tables for other positions", [=] { apply_rotary_emb(x, ones({6, 4}), ones({6, 4})); },
       {"[apply_rotary_emb]", "do not broadcast to x's pairs (2, 5, 4)"}},
      {"tables of another dtype", [=] { apply_rotary_emb(x, t.cos.to(kFloat64), t.sin.to(kFloat64)); },
       {"[apply_rotary_emb]", "cos and sin have dtype float64, x has float32"}},
      {"float positions", [] { rotary_tables(arange(5, kFloat32), 8); },
       {"[rotary_tables]", "positions must be a 1-D int64 tensor, got float32"}},
      {"odd head_dim", [] { rotary_tables(arange(5), 7); }, {"[rotary_tables]", "head_dim must be positive and even, got 7"}},
      {"bad base", [] { rotary_tables(arange(5), 8, -1.0); }, {"[rotary_tables]", "base must be positive"}},
  };
  return rows;
}

}  // namespace

TEST_CASE("op table: rms_norm") { run_table(rms_norm_rows()); }

TEST_CASE("op table: apply_rotary_emb") { run_table(rotary_rows()); }

TEST_CASE("rotary_tables: PyTorch's cos and sin, in the dtype and device asked for") {
  for (const auto& [base, btag] : {std::pair{10000.0, "b1e4"}, std::pair{100000.0, "b1e5"}}) {
    const RotaryTables t = rotary_tables(fx("rope.positions"), 8, base, kFloat64);
    testing::check_matches(std::string("cos ") + btag, t.cos, fx(std::string("rope.") + btag + ".cos"), kTol64);
    testing::check_matches(std::string("sin ") + btag, t.sin, fx(std::string("rope.") + btag + ".sin"), kTol64);
  }
  CHECK(rotary_tables(arange(3), 4).cos.dtype() == kFloat32);
  CHECK(rotary_tables(arange(3), 4).cos.shape() == Shape{3, 2});
}

TEST_CASE("nn::RMSNorm is rms_norm with a weight of ones, torch's repr") {
  nn::RMSNorm norm(8);
  CHECK(norm.weight.shape() == Shape{8});
  CHECK(norm.weight.requires_grad());
  const Tensor x = randn({4, 8});
  CHECK(equal(norm.forward(x), rms_norm(x, {8}, ones({8}))));
  CHECK(norm.extra_repr() == "(8,), eps=None, elementwise_affine=True");
  CHECK(nn::RMSNorm(Shape{2, 4}, 1e-6, false).extra_repr() == "(2, 4), eps=1e-06, elementwise_affine=False");
  CHECK(nn::RMSNorm(8, std::nullopt, false).parameters().empty());
}
