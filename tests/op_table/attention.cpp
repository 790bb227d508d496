// Rows of scaled_dot_product_attention, dropout and relu_dropout: attention's forward and
// gradients against PyTorch's formula (ops_forward.txt, made by make_op_fixtures.py), and
// generated inputs for gradcheck and the CUDA backend. A dropout row draws its mask from a
// generator of its own seed at every call, so gradcheck and the two devices see the same
// mask. (Dropout's stream against bernoulli's and the fused paths' bits are in
// test_ops_forward.cpp; the attention kernels' choices in test_cuda.cpp.)
#include <cmath>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


// A constant of ops_forward.txt on q's device; "{t}" takes q's dtype.
Tensor constant(std::string name, const Tensor& like) {
  const size_t at = name.find("{t}");
  if (at != std::string::npos) name.replace(at, 3, like.dtype() == kFloat64 ? "f64" : "f32");
  return fixture("ops_forward.txt", name).to(like.device());
}
Tensor bools(const std::vector<bool>& v, const Shape& s, const Tensor& like) {
  return from_vector<bool>(v, s).to(like.device());
}
Tensor values(const std::vector<double>& v, const Shape& s, const Tensor& like) {
  return from_vector<double>(v, s).to(like.dtype()).to(like.device());
}

std::vector<OpTest> fixture_rows() {
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"plain", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }},
      {"bool", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], constant("sdpa.allowed", x[0])); }},
      {"float", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], constant("sdpa.{t}.bias", x[0])); }},
      {"scale", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, false, 0.3); }},
  };
  std::vector<OpTest> rows;
  for (const auto& [name, f] : cases)
    rows.push_back({.op = "scaled_dot_product_attention",
                    .sample = "torch's formula, " + name,
                    .fn = f,
                    .inputs = {"sdpa.{t}.q", "sdpa.{t}.k", "sdpa.{t}.v"},
                    .expected = "sdpa.{t}." + name + ".out",
                    .upstream = "sdpa.{t}.g",
                    .grads = {"sdpa.{t}." + name + ".gq", "sdpa.{t}." + name + ".gk", "sdpa.{t}." + name + ".gv"},
                    .file = "ops_forward.txt",
                    // The fused backward takes D = <g, out> per query where torch takes
                    // <dP, P>: equal in exact arithmetic, but dS = P (dP - D) cancels terms
                    // of size |g||v| ~ 1, so a float32 grad of q or k is good to a few ulps
                    // of those terms, not of itself.
                    .grad_tol32 = {Tol{1e-6, 1e-6}, Tol{1e-6, 1e-6}, kTol32},
                    // the masks have the batch's rows
                    .zero_size = name == "plain" || name == "scale"});
  rows.push_back({.op = "scaled_dot_product_attention",
                  .sample = "torch's formula, causal over 3 keys",
                  .fn = [](V x) {
                    return scaled_dot_product_attention(x[0], x[1].narrow(2, 0, 3), x[2].narrow(2, 0, 3), Tensor(), 0.0,
                                                        true);
                  },
                  .inputs = {"sdpa.{t}.q", "sdpa.{t}.k", "sdpa.{t}.v"},
                  .expected = "sdpa.{t}.causal.out",
                  .file = "ops_forward.txt"});
  return rows;
}

std::vector<OpTest> made_rows() {
  const std::string sdpa = "scaled_dot_product_attention";
  // Masks allow at least one key per query here (fully masked queries: below).
  auto allowed = [](const Tensor& x) {
    return bools({1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1}, {3, 5}, x);
  };
  auto key_ok = [](const Tensor& x) { return bools({1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, {2, 1, 1, 5}, x); };
  auto bias = [](const Tensor& x) { return values({0.3, -1.0, 0.0, 2.0, -0.5}, {5}, x); };
  // Row 1 of 3 may attend to no key (torch's bool convention: true = may attend) ...
  auto dead = [](const Tensor& x) { return bools({1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1}, {3, 5}, x); };
  // ... and the same row made -inf in an additive mask.
  auto dead_row = [](const Tensor& x) {
    return values({0, 0, 0, 0, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0, 0, 0, 0, 0}, {3, 5}, x);
  };
  std::vector<OpTest> rows = {
      made(sdpa, "4-D", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
           {R({2, 2, 3, 4}), R({2, 2, 5, 4}), R({2, 2, 5, 3})}),
      made(sdpa, "3-D with bool mask", [allowed](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], allowed(x[0])); },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2})}),
      made(sdpa, "2-D with float mask", [bias](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], bias(x[0])); },
           {R({3, 4}), R({5, 4}), R({5, 3})}),
      made(sdpa, "causal, scale 0.7",
           [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.7); },
           {R({1, 2, 4, 3}), R({1, 2, 4, 3}), R({1, 2, 4, 3})}),
      made(sdpa, "heads inside rows (N, L, H, E) with key padding",
           [key_ok](V x) {
             return scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                                 key_ok(x[0]));
           },
           {R({2, 3, 2, 4}), R({2, 5, 2, 4}), R({2, 5, 2, 3})}),
      made(sdpa, "transposed value", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2].transpose(-2, -1)); },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 3, 5})}),
      made(sdpa, "dropout 0.3",
           [key_ok](V x) {
             Generator g(7);  // the same mask at every evaluation
             return scaled_dot_product_attention(x[0], x[1], x[2], key_ok(x[0]), 0.3, false, std::nullopt, &g);
           },
           {R({2, 2, 3, 4}), R({2, 2, 5, 4}), R({2, 2, 5, 3})}),
      made(sdpa, "float mask with a gradient", [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2}), R({3, 5})}),
      // q, k, v chunks of one projection (N, L, 3·H·E), heads inside the rows: the
      // gradients are written into the projection's buffer (ops/attention.cpp).
      made(sdpa, "q, k, v chunks of one projection, causal",
           [](V x) {
             std::vector<Tensor> qkv = chunk(matmul(x[0], x[1]), 3, -1);  // (2, 4, 6) each
             auto heads = [](const Tensor& t) { return t.reshape({2, 4, 2, 3}).transpose(1, 2); };
             return scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), Tensor(), 0.0, true);
           },
           {R({2, 4, 5}), R({5, 18})}),
      made(sdpa, "k, v chunks of one projection, dropout 0.2",
           [key_ok](V x) {
             Generator g(3);
             std::vector<Tensor> kv = chunk(matmul(x[1], x[2]), 2, -1);  // (2, 5, 8) each
             auto heads = [](const Tensor& t, int64_t L) { return t.reshape({2, L, 2, 4}).transpose(1, 2); };
             return scaled_dot_product_attention(heads(x[0], 3), heads(kv[0], 5), heads(kv[1], 5), key_ok(x[0]), 0.2,
                                                 false, std::nullopt, &g);
           },
           {R({2, 3, 8}), R({2, 5, 6}), R({6, 16})}),
      made(sdpa, "q, k, v chunks, one of them used again",
           [](V x) {
             std::vector<Tensor> qkv = chunk(x[0], 3, -1);  // (3, 4) each of a leaf
             return add(scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]), mul(qkv[1], qkv[2]));
           },
           {R({3, 12})}),
      made(sdpa, "fully masked query, bool mask",
           [dead](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], dead(x[0])); },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2})}),
      made(sdpa, "fully masked query, transposed query, heads",
           [dead](V x) { return scaled_dot_product_attention(x[0].transpose(-2, -1), x[1], x[2], dead(x[0])); },
           {R({2, 2, 4, 3}), R({2, 2, 5, 4}), R({2, 2, 5, 3})}),
      made(sdpa, "fully masked query, float mask with a gradient",
           [dead_row](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3] + dead_row(x[0])); },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2}), R({3, 5})}),
      made(sdpa, "fully masked query, dropout 0.3",
           [dead](V x) {
             Generator g(11);
             return scaled_dot_product_attention(x[0], x[1], x[2], dead(x[0]), 0.3, false, std::nullopt, &g);
           },
           {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2})}),
      // dropout
      made("dropout", "p 0.4",
           [](V x) {
             Generator g(123);  // the same mask at every evaluation
             return dropout(x[0], 0.4, true, &g);
           },
           {R({3, 4})}),
      made("dropout", "p 0.4, (30, 40) transposed",
           [](V x) {
             Generator g(123);
             return dropout(x[0], 0.4, true, &g);
           },
           {T({30, 40})}),
      made("dropout", "p 0.5 transposed",
           [](V x) {
             Generator g(123);
             return dropout(x[0], 0.5, true, &g);
           },
           {T({3, 4})}),
      made("dropout", "p 0.2 then mul",
           [](V x) {
             Generator g(123);
             return dropout(x[0], 0.2, true, &g).mul(x[1]);
           },
           {R({2, 3}), R({2, 3})}),
      made("relu_dropout", "p 0.3",
           [](V x) {
             Generator g(123);
             return relu_dropout(x[0], 0.3, true, &g);
           },
           {Z({3, 4})}),
      made("relu_dropout", "p 0.25, (30, 40) stepped",
           [](V x) {
             Generator g(321);
             return relu_dropout(x[0], 0.25, true, &g);
           },
           {S(Z({30, 40}))}),
      made("relu_dropout", "transposed then mul",
           [](V x) {
             Generator g(9);
             return relu_dropout(x[0], 0.5, true, &g).mul(x[1]);
           },
           {T(Z({3, 4})), R({3, 4})}),
      made("relu_dropout", "eval (relu)", [](V x) { return relu_dropout(x[0], 0.3, false); }, {Z({3, 4})}),
      made("dropout", "eval (identity)", [](V x) { return dropout(x[0], 0.4, false) * 2.0; }, {R({3, 4})}),
      made("dropout", "p 0", [](V x) { return dropout(x[0], 0.0) * 2.0; }, {R({3, 4})}),
      made("dropout", "p 1", [](V x) { return dropout(x[0], 1.0).add(x[0]); }, {R({3, 4})}),
  };
  for (OpTest& t : rows) {
    // The masks have the batch's or the queries' rows; the chunks' shapes are fixed; the
    // (30, 40) samples are for the CUDA kernels' tails (gradcheck's dense Jacobian of 1200
    // inputs would take seconds for what the small rows check already).
    if (t.op == sdpa && t.sample != "4-D" && t.sample != "causal, scale 0.7" && t.sample != "transposed value")
      t.zero_size = false;
    if (t.sample.find("(30, 40)") != std::string::npos) t.gradcheck = false;
  }
  const Tensor q = ones({2, 3, 4}), k = ones({2, 5, 4}), v = ones({2, 5, 6});
  const std::string op = "[scaled_dot_product_attention]";
  rows[0].errors = {
      {"k of another width", [=] { scaled_dot_product_attention(q, ones({2, 5, 3}), v); },
       {op, "(2, 3, 4)", "(2, 5, 3)", "(2, 5, 6)"}},
      {"v of other keys", [=] { scaled_dot_product_attention(q, k, ones({2, 4, 6})); }, {op, "(2, 4, 6)", "do not match"}},
      {"another batch", [=] { scaled_dot_product_attention(q, ones({3, 5, 4}), ones({3, 5, 6})); }, {op, "(3, 5, 4)", "batch"}},
      {"1-D", [] { scaled_dot_product_attention(ones({4}), ones({4}), ones({4})); }, {op, "rank", "(4,)"}},
      {"float32 with float64", [=] { scaled_dot_product_attention(q, k.to(kFloat64), v); }, {op, "float32", "float64"}},
      {"int64", [=] { scaled_dot_product_attention(q.to(kInt64), k, v); }, {op, "int64"}},
      {"an int64 mask", [=] { scaled_dot_product_attention(q, k, v, zeros({3, 5}, kInt64)); }, {op, "attn_mask", "int64"}},
      {"a mask of other queries", [=] { scaled_dot_product_attention(q, k, v, ones({4, 5}, kBool)); },
       {op, "(4, 5)", "(2, 3, 5)"}},
      {"a mask and causal", [=] { scaled_dot_product_attention(q, k, v, ones({3, 5}, kBool), 0.0, true); },
       {op, "not both"}},
      {"dropout_p 1.5", [=] { scaled_dot_product_attention(q, k, v, Tensor(), 1.5); }, {op, "dropout_p", "1.5"}},
  };
  for (OpTest& t : rows) {
    if (t.op == "dropout" && t.errors.empty())
      t.errors = {{"p 1.5", [] { dropout(ones({3}), 1.5); }, {"[dropout]", "1.5"}}};
    if (t.op == "relu_dropout" && t.errors.empty())
      t.errors = {{"p -0.5", [] { relu_dropout(ones({3}), -0.5); }, {"[relu_dropout]", "-0.5"}},
                  {"int64", [] { relu_dropout(ones({3}, kInt64), 0.5); }, {"[relu_dropout]", "int64"}}};
  }
  return rows;
}

}  // namespace

std::vector<OpTest> attention_rows() {
  return rows_of({&fixture_rows, &made_rows});
}

}  // namespace kiln::optable
