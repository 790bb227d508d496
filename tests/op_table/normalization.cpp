// Rows of the normalizations and the rotary embedding: layer_norm against PyTorch
// (ops_forward.txt, made by make_op_fixtures.py; bf16.txt), rms_norm and the rotary
// embedding (llama_ops.txt, written by make_llama_ops_fixtures.py), generated inputs for
// gradcheck and the CUDA backend; then rotary_tables and nn::RMSNorm.
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

// Inference (no input needs a gradient): rms_norm and apply_rotary_emb take the backend's
// one-pass kernels instead of their compositions; the same PyTorch values.
std::vector<OpTest> inference_rows() {
  std::vector<OpTest> rows;
  for (const auto& [sample, fn, out] :
       {std::tuple{"last dim", std::function<Tensor(V)>([](V v) { return rms_norm(v[0], {8}, v[1]); }), "rms_last"},
        std::tuple{"two dims", std::function<Tensor(V)>([](V v) { return rms_norm(v[0], {3, 8}, v[1], 1e-5); }),
                   "rms_two"}})
    rows.push_back({.op = "rms_norm",
                    .sample = std::string("inference, ") + sample,
                    .fn = fn,
                    .inputs = {"rms.{t}.x", std::string(out) + ".{t}.weight"},
                    .expected = std::string(out) + ".{t}.out",
                    .tol32 = kTol32Loose,
                    .gradcheck = false});
  rows.push_back({.op = "rms_norm",
                  .sample = "inference, no weight",
                  .fn = [](V v) { return rms_norm(v[0], {8}); },
                  .inputs = {"rms.{t}.x"},
                  .expected = "rms_noweight.{t}.out",
                  .tol32 = kTol32Loose,
                  .gradcheck = false});
  for (const bool interleaved : {false, true})
    rows.push_back({.op = "apply_rotary_emb",
                    .sample = interleaved ? "inference, interleaved" : "inference, half-split",
                    .fn =
                        [interleaved](V v) {
                          const RotaryTables r = rotary_tables(fixture("llama_ops.txt", "rope.positions"), 8, 10000.0,
                                                               TensorOptions(v[0].dtype()).device(v[0].device()));
                          return apply_rotary_emb(v[0], r.cos, r.sin, interleaved);
                        },
                    .inputs = {"rope.{t}.x"},
                    .expected = std::string("rope_") + (interleaved ? "inter" : "half") + ".b1e4.{t}.out",
                    .tol32 = kTol32Loose,
                    .gradcheck = false});
  // A Llama attention's shape: (B, T, heads, d) turned by (T, 1, d/2) tables broadcast
  // over batch and heads, against the composition (which runs when a gradient is needed).
  for (const bool interleaved : {false, true})
    rows.push_back({.op = "apply_rotary_emb",
                    .sample = interleaved ? "inference, broadcast tables, interleaved" : "inference, broadcast tables",
                    .fn = [interleaved](V v) {
                      NoGradGuard no_grad;
                      return apply_rotary_emb(v[0], v[1].unsqueeze(1), v[2].unsqueeze(1), interleaved);
                    },
                    .made = {R({2, 5, 3, 8}), R({5, 4}), R({5, 4})},
                    .gradcheck = false,
                    .zero_size = false,  // the tables are per position
                    .reference = [interleaved](V v) {
                      EnableGradGuard grad;
                      const Tensor x = v[0].detach().requires_grad_();  // so the composition runs
                      return apply_rotary_emb(x, v[1].unsqueeze(1), v[2].unsqueeze(1), interleaved).detach();
                    }});
  return rows;
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

std::vector<OpTest> layer_norm_rows() {
  // (2, 3, 6). y = xhat * w + b: where the two terms cancel, y carries a few ulps of |b|
  // (both torch's and Kiln's float32 results lie ~1 ulp of |b| from the exact value), so
  // the absolute floor scales with the bias.
  auto with_bias = [](OpTest t, const std::string& b) {
    auto scale = [&](const std::string& tag) {
      return amax(abs(fixture("ops_forward.txt", "ln." + tag + "." + b))).item();
    };
    t.tol64 = {kTol64.rtol, kTol64.atol + kTol64.rtol * scale("f64")};
    t.tol32 = {kTol32.rtol, kTol32.atol + kTol32.rtol * scale("f32")};
    return t;
  };
  auto fwd = [](const std::string& sample, std::function<Tensor(V)> fn, std::vector<std::string> in,
                const std::string& out) {
    return OpTest{.op = "layer_norm",
                  .sample = sample,
                  .fn = std::move(fn),
                  .inputs = std::move(in),
                  .expected = "ln.{t}." + out,
                  .file = "ops_forward.txt"};
  };
  auto made = [](const std::string& sample, std::function<Tensor(V)> fn, std::vector<In> in) {
    return OpTest{.op = "layer_norm", .sample = sample, .fn = std::move(fn), .made = std::move(in)};
  };
  std::vector<OpTest> rows = {
      fwd("(2, 3, 6) plain", [](V x) { return layer_norm(x[0], {6}); }, {"ln.{t}.x"}, "plain"),
      with_bias(fwd("(2, 3, 6) affine", [](V x) { return layer_norm(x[0], {6}, x[1], x[2]); },
                    {"ln.{t}.x", "ln.{t}.w", "ln.{t}.b"}, "affine"),
                "b"),
      fwd("(2, 3, 6) weight only", [](V x) { return layer_norm(x[0], {6}, x[1]); }, {"ln.{t}.x", "ln.{t}.w"},
          "weight_only"),
      with_bias(fwd("(2, 3, 6) two dims", [](V x) { return layer_norm(x[0], {3, 6}, x[1], x[2]); },
                    {"ln.{t}.x", "ln.{t}.w2", "ln.{t}.b2"}, "two_dims"),
                "b2"),
      fwd("(2, 3, 6) eps 0.5", [](V x) { return layer_norm(x[0], {6}, Tensor(), Tensor(), 0.5); }, {"ln.{t}.x"},
          "eps"),
      made("last dim, no affine", [](V x) { return layer_norm(x[0], {4}); }, {R({3, 4})}),
      made("last dim, weight", [](V x) { return layer_norm(x[0], {4}, x[1]); }, {R({3, 4}), R({4})}),
      made("last dim, bias", [](V x) { return layer_norm(x[0], {4}, Tensor(), x[1]); }, {R({3, 4}), R({4})}),
      made("last dim, weight and bias", [](V x) { return layer_norm(x[0], {4}, x[1], x[2]); },
           {R({2, 3, 4}), R({4}), R({4})}),
      made("two dims, no affine", [](V x) { return layer_norm(x[0], {3, 4}); }, {R({2, 3, 4})}),
      made("two dims, weight and bias", [](V x) { return layer_norm(x[0], {3, 2}, x[1], x[2]); },
           {R({2, 3, 2}), R({3, 2}), R({3, 2})}),
      made("two dims, weight only", [](V x) { return layer_norm(x[0], {2, 3}, x[1]); }, {R({2, 2, 3}), R({2, 3})}),
      made("big eps", [](V x) { return layer_norm(x[0], {4}, x[1], x[2], 0.5); }, {R({3, 4}), R({4}), R({4})}),
      made("transposed input", [](V x) { return layer_norm(x[0], {4}, x[1], x[2]); }, {T({3, 4}), R({4}), R({4})}),
      made("permuted input, stepped weight", [](V x) { return layer_norm(x[0], {3, 2}, x[1], x[2]); },
           {Pm({2, 3, 2}), S({3, 2}), T({3, 2})}),
      made("1-D", [](V x) { return layer_norm(x[0], {5}, x[1], x[2]); }, {R({5}), R({5}), R({5})}),
      made("(2, 3, 16) weight and bias", [](V x) { return layer_norm(x[0], {16}, x[1], x[2]); },
           {R({2, 3, 16}), R({16}), R({16})}),
      // 700 wide is for the CUDA kernels' tiling: the CUDA check only (gradcheck's dense
      // Jacobian, 3500 x 4200, would take seconds for what the small rows check already).
      [] {
        OpTest t{.op = "layer_norm",
                 .sample = "weight only, 700 wide",
                 .fn = [](V x) { return layer_norm(x[0], {700}, x[1]); },
                 .made = {R({5, 700}), R({700})},
                 .gradcheck = false};
        return t;
      }(),
      made("bias only, permuted", [](V x) { return layer_norm(x[0], {3, 2}, Tensor(), x[1]); },
           {Pm({2, 3, 2}), S({3, 2})}),
  };
  // bfloat16: the same float32 math as torch up to the order of the sums, within 1 ulp.
  for (const bool affine : {true, false})
    rows.push_back({.op = "layer_norm",
                    .sample = affine ? "bfloat16 affine" : "bfloat16 plain",
                    .fn = [affine](V x) { return affine ? layer_norm(x[0], {48}, x[1], x[2]) : layer_norm(x[0], {48}); },
                    .tags = {"bf16"},
                    .gradcheck = false,  // a bfloat16 sample: see the generated rows
                    .zero_size = false,
                    .cuda = false,
                    .bf16_inputs = affine ? std::vector<std::string>{"ln.x", "ln.w", "ln.b"} : std::vector<std::string>{"ln.x"},
                    .bf16_expected = affine ? "ln.y" : "ln.y_plain",
                    .bf16_ulps = 1});
  const Tensor x23 = ones({2, 3}), bf = ones({2, 3}, kBFloat16);
  rows[0].errors = {
      {"normalized_shape not at the end", [x23] { layer_norm(x23, {4}); }, {"[layer_norm]", "(2, 3)", "(4,)"}},
      {"more dims than the input", [x23] { layer_norm(x23, {2, 3, 4}); }, {"[layer_norm]", "(2, 3, 4)", "(2, 3)"}},
      {"weight of the wrong shape", [x23] { layer_norm(x23, {3}, ones({4})); },
       {"[layer_norm]", "weight", "(4,)", "(3,)"}},
      {"bias of the wrong shape", [x23] { layer_norm(x23, {3}, ones({3}), ones({2, 3})); },
       {"[layer_norm]", "bias", "(2, 3)", "(3,)"}},
      {"weight of another dtype", [x23] { layer_norm(x23, {3}, ones({3}, kFloat64)); },
       {"[layer_norm]", "float64", "float32"}},
      {"a float32 weight for bfloat16", [bf] { layer_norm(bf, {3}, ones({3})); },
       {"[layer_norm]", "bfloat16", "float32"}},
      {"int64", [] { layer_norm(ones({2, 3}, kInt64), {3}); }, {"[layer_norm]", "int64"}},
  };
  return rows;
}

}  // namespace

std::vector<OpTest> normalization_rows() {
  std::vector<OpTest> rows = rms_norm_rows();
  for (auto* more : {&inference_rows, &rotary_rows, &rotary_tables_rows, &layer_norm_rows})
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
  // With a weight that needs a gradient both take the composition; without, the kernel.
  CHECK(equal(norm.forward(x), rms_norm(x, {8}, ones({8}).requires_grad_())));
  {
    NoGradGuard no_grad;
    CHECK(equal(norm.forward(x), rms_norm(x, {8}, ones({8}))));
  }
  CHECK(norm.extra_repr() == "(8,), eps=None, elementwise_affine=True");
  CHECK(nn::RMSNorm(Shape{2, 4}, 1e-6, false).extra_repr() == "(2, 4), eps=1e-06, elementwise_affine=False");
  CHECK(nn::RMSNorm(8, std::nullopt, false).parameters().empty());
}
