// Rows of the normalizations and the rotary embedding (tests/fixtures/llama_ops.txt,
// written by make_llama_ops_fixtures.py); then rotary_tables and nn::RMSNorm.
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

Tensor fx(const std::string& name) { return fixture("llama_ops.txt", name); }

std::vector<OpTest> rms_norm_rows() {
  const Tensor x = randn({2, 3, 8});
  const Tensor w8 = ones({8});
  return {
      {.op = "rms_norm",
       .sample = "last dim, default eps",
       .fn = [](V v) { return rms_norm(v[0], {8}, v[1]); },
       .inputs = {"rms.{t}.x", "rms_last.{t}.weight"},
       .expected = "rms_last.{t}.out",
       .upstream = "rms.{t}.g",
       .grads = {"rms_last.{t}.grad_x", "rms_last.{t}.grad_weight"},
       .tol32 = kTol32Loose,
       .bf16_rtol = 0.02,
       .errors = {{"normalized_shape not at the end", [=] { rms_norm(x, {3}, Tensor()); },
                   {"[rms_norm]", "does not end with normalized_shape (3,)"}},
                  {"weight of the wrong shape", [=] { rms_norm(x, {8}, ones({4})); },
                   {"[rms_norm]", "weight of shape (4,) does not match normalized_shape (8,)"}},
                  {"weight of another dtype", [=] { rms_norm(x, {8}, ones({8}, kFloat64)); },
                   {"[rms_norm]", "weight has dtype float64, input has float32"}},
                  {"negative eps", [=] { rms_norm(x, {8}, w8, -1.0); },
                   {"[rms_norm]", "eps must be non-negative, got -1"}},
                  {"integer input", [] { rms_norm(ones({2, 8}, kInt64), {8}); }, {"[rms_norm]", "int64"}},
                  {"more dims than the input", [=] { rms_norm(x, {1, 2, 3, 8}); },
                   {"[rms_norm]", "does not fit"}}}},
      {.op = "rms_norm",
       .sample = "last dim, eps 1e-6",
       .fn = [](V v) { return rms_norm(v[0], {8}, v[1], 1e-6); },
       .inputs = {"rms.{t}.x", "rms_last_eps.{t}.weight"},
       .expected = "rms_last_eps.{t}.out",
       .upstream = "rms.{t}.g",
       .grads = {"rms_last_eps.{t}.grad_x", "rms_last_eps.{t}.grad_weight"},
       .tol32 = kTol32Loose,
       .bf16_rtol = 0.02},
      {.op = "rms_norm",
       .sample = "two dims",
       .fn = [](V v) { return rms_norm(v[0], {3, 8}, v[1], 1e-5); },
       .inputs = {"rms.{t}.x", "rms_two.{t}.weight"},
       .expected = "rms_two.{t}.out",
       .upstream = "rms.{t}.g",
       .grads = {"rms_two.{t}.grad_x", "rms_two.{t}.grad_weight"},
       .tol32 = kTol32Loose,
       .bf16_rtol = 0.02},
      {.op = "rms_norm",
       .sample = "no weight",
       .fn = [](V v) { return rms_norm(v[0], {8}); },
       .inputs = {"rms.{t}.x"},
       .expected = "rms_noweight.{t}.out",
       .upstream = "rms.{t}.g",
       .grads = {"rms_noweight.{t}.grad_x"},
       .tol32 = kTol32Loose,
       .bf16_rtol = 0.02},
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
    for (const bool interleaved : {false, true}) {
      const std::string kind = interleaved ? "inter" : "half";
      rows.push_back({.op = "apply_rotary_emb",
                      .sample = (interleaved ? "interleaved, base " : "half-split, base ") + b,
                      .fn =
                          [base = base, interleaved](V v) {
                            const RotaryTables r = tables_for(v[0], base);
                            return apply_rotary_emb(v[0], r.cos, r.sin, interleaved);
                          },
                      .inputs = {"rope.{t}.x"},
                      .expected = "rope_" + kind + "." + b + ".{t}.out",
                      .upstream = "rope.{t}.g",
                      .grads = {"rope_" + kind + "." + b + ".{t}.grad_x"},
                      .tol32 = kTol32Loose,
                      .bf16_rtol = 0.02});
    }
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
  };
  return rows;
}

std::vector<OpTest> rotary_tables_rows() {
  // The tables themselves, for the fixture's positions, in float64.
  std::vector<OpTest> rows;
  for (const auto& [base, btag] : {std::pair{10000.0, "b1e4"}, std::pair{100000.0, "b1e5"}}) {
    for (const bool sin_table : {false, true}) {
      const std::string which = sin_table ? "sin" : "cos";
      rows.push_back({.op = "rotary_tables",
                      .sample = which + ", base " + btag,
                      .fn =
                          [base = base, sin_table](V v) {
                            const RotaryTables r = rotary_tables(v[0], 8, base, TensorOptions(kFloat64).device(v[0].device()));
                            return sin_table ? r.sin : r.cos;
                          },
                      .inputs = {"rope.positions"},
                      .expected = std::string("rope.") + btag + "." + which,
                      .tags = {"f64"},
                      .gradcheck = false,  // int64 positions: nothing to differentiate
                      .zero_size = false});  // positions are 1-D
    }
  }
  rows[0].errors = {
      {"float positions", [] { rotary_tables(arange(5, kFloat32), 8); },
       {"[rotary_tables]", "positions must be a 1-D int64 tensor, got float32"}},
      {"odd head_dim", [] { rotary_tables(arange(5), 7); }, {"[rotary_tables]", "head_dim must be positive and even, got 7"}},
      {"bad base", [] { rotary_tables(arange(5), 8, -1.0); }, {"[rotary_tables]", "base must be positive"}},
  };
  return rows;
}

}  // namespace

std::vector<OpTest> normalization_rows() {
  std::vector<OpTest> rows = rms_norm_rows();
  for (auto* more : {&rotary_rows, &rotary_tables_rows})
    for (OpTest& t : (*more)()) rows.push_back(std::move(t));
  return rows;
}

}  // namespace kiln::optable

using namespace kiln;

TEST_CASE("rotary_tables: float32 unless asked, (positions, head_dim / 2)") {
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
