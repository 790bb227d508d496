// The gradient-check table of compositions: ops whose gradients meet an expanded or
// non-contiguous incoming gradient (each op alone is a row of tests/op_table, which
// gradchecks every row), in float64, against
// central differences with gradcheck's default tolerances (eps 1e-6, atol 1e-5,
// rtol 1e-3, never loosened here). Each row is a name, the function of the inputs and
// the inputs' shapes and kinds; each runs as its own SUBCASE so a failure names the op.
// Inputs are kept a few elements small so the whole table runs in well under a second.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::leaf64;

namespace {

// How an input's values are made. Every input is a float64 leaf that requires grad
// (gradcheck perturbs leaves in place).
enum class Kind {
  Randn,     // randn
  AwayZero,  // randn pushed at least 0.3 away from 0, for division
  Distinct,  // a shuffled grid 0.3 apart, all = 0.05 (mod 0.3): no ties, no kink at 0,
             // none near bounds = 0.2 (mod 0.3) such as -0.4 and 0.5
  Small,     // randn * 1e-3, for the float32 round trip
};

struct In {
  Shape shape;
  Kind kind = Kind::Randn;
};

Tensor values_of(Kind kind, const Shape& shape, uint64_t seed) {
  Generator g(seed);
  TensorOptions f64(kFloat64);
  switch (kind) {
    case Kind::Randn: return randn(shape, f64, &g);
    case Kind::Small: return randn(shape, f64, &g) * 1e-3;
    case Kind::AwayZero: {
      Tensor r = randn(shape, f64, &g);
      return r + sign(r) * 0.3;
    }
    case Kind::Distinct: {
      const int64_t n = shape_numel(shape);
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i - n / 2) * 0.3 + 0.05;
      std::mt19937_64 rng(seed);
      std::shuffle(v.begin(), v.end(), rng);
      return from_vector<double>(v, shape);
    }
  }
  return Tensor();
}

Tensor make_leaf(const In& in, uint64_t seed) {
  if (in.kind == Kind::Randn) return leaf64(in.shape, seed);
  return values_of(in.kind, in.shape, seed).detach().requires_grad_();
}

struct Row {
  std::string name;
  GradcheckFn fn;
  std::vector<In> inputs;
};

// Runs each row as its own SUBCASE.
void run_table(const std::vector<Row>& rows) {
  std::set<std::string> names;
  for (const Row& row : rows)
    if (!names.insert(row.name).second) FAIL("duplicate row name " << row.name);
  uint64_t seed = 1000;
  for (const Row& row : rows) {
    seed += 16;
    SUBCASE(row.name.c_str()) {
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < row.inputs.size(); ++i) inputs.push_back(make_leaf(row.inputs[i], seed + i));
      for (size_t i = 0; i < inputs.size(); ++i) REQUIRE(inputs[i].shape() == row.inputs[i].shape);
      {
        EnableGradGuard grad_on;
        REQUIRE(row.fn(inputs).requires_grad());  // a row that records nothing checks nothing
      }
      GradcheckOptions opts;
      opts.raise_exception = false;
      GradcheckResult r = gradcheck_result(row.fn, inputs, opts);
      CHECK_MESSAGE(r.ok, row.name << ": " << r.message);
    }
  }
}

using V = const std::vector<Tensor>&;

// Constant (non-differentiable) inputs.
Tensor mask_of(const std::vector<double>& v, const Shape& shape) {
  return ne(from_vector<double>(v, shape), 0.0);
}
Tensor index_of(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }

In R(const Shape& s) { return {s, Kind::Randn}; }
In Z(const Shape& s) { return {s, Kind::AwayZero}; }
In D(const Shape& s) { return {s, Kind::Distinct}; }
In Sm(const Shape& s) { return {s, Kind::Small}; }

}  // namespace

// ------------------------------------------------------------------ elementwise


// ------------------------------------------------------------------ reductions

TEST_CASE("amax shares the gradient evenly among ties; max along a dim gives it to the first") {
  Tensor x = from_vector<double>({1, 3, 3, 2}, {4}).requires_grad_();
  amax(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  x.zero_grad();
  max(x, 0).values.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
}

// ------------------------------------------------------------------ matmul

// ------------------------------------------------------------------ shape

// Backward rules must accept any incoming gradient: one that a later sum made with
// stride 0 (expanded), or one that a later transpose made non-contiguous.
TEST_CASE("gradcheck: incoming gradient expanded or non-contiguous") {
  Tensor t4 = index_of({1, 0, 4, 2}, {4});
  Tensor idx = index_of({0, 2, 4, 2, 1, 0}, {2, 3});
  Tensor cond = mask_of({1, 0, 0, 1, 1, 0}, {2, 3});
  run_table({
      {"mul then sum", [](V x) { return sum(x[0] * x[1]); }, {R({2, 3}), R({3})}},
      {"div then sum dim 0", [](V x) { return sum(x[0] / x[1], {0}); }, {R({2, 3}), Z({2, 3})}},
      {"maximum then t", [](V x) { return maximum(x[0], x[1]).t(); }, {R({2, 3}), R({2, 3})}},
      {"gelu then sum", [](V x) { return sum(gelu(x[0], "tanh")) + sum(gelu(x[0])); }, {R({2, 3})}},
      {"pow then mean dim 1", [](V x) { return mean(pow(x[0], 3.0), {1}); }, {R({2, 3})}},
      {"where then sum", [cond](V x) { return sum(where(cond, x[0], x[1])); }, {R({2, 3}), R({3})}},
      {"matmul then sum", [](V x) { return sum(matmul(x[0], x[1])); }, {R({2, 3}), R({3, 4})}},
      {"matmul then sum dim -1", [](V x) { return sum(matmul(x[0], x[1]), {-1}); }, {R({2, 2, 3}), R({3, 4})}},
      {"matmul then t", [](V x) { return matmul(x[0], x[1]).t(); }, {R({2, 3}), R({3, 4})}},
      {"batched matmul then transpose", [](V x) { return matmul(x[0], x[1]).transpose(0, 2); },
       {R({2, 2, 3}), R({2, 3, 2})}},
      {"1-D matmul then sum", [](V x) { return sum(matmul(x[0], x[1])); }, {R({3}), R({3, 2})}},
      {"bmm then sum", [](V x) { return sum(bmm(x[0], x[1]), {0}); }, {R({2, 2, 3}), R({2, 3, 2})}},
      {"softmax then sum dim 0", [](V x) { return sum(softmax(x[0], 1) * x[1], {0}); },
       {R({3, 4}), R({3, 4})}},
      {"softmax then t", [](V x) { return softmax(x[0], -1).t(); }, {R({3, 4})}},
      {"log_softmax then sum", [](V x) { return sum(log_softmax(x[0], -1)); }, {R({3, 4})}},
      {"log_softmax then permute", [](V x) { return log_softmax(x[0], 1).permute({2, 0, 1}); }, {R({2, 3, 4})}},
      {"layer_norm then sum", [](V x) { return sum(layer_norm(x[0], {4}, x[1], x[2])); },
       {R({3, 4}), R({4}), R({4})}},
      {"layer_norm then sum dim 0", [](V x) { return sum(layer_norm(x[0], {4}, x[1], x[2]), {0}); },
       {R({3, 4}), R({4}), R({4})}},
      {"layer_norm then t", [](V x) { return layer_norm(x[0], {4}, x[1], x[2]).t(); },
       {R({3, 4}), R({4}), R({4})}},
      {"embedding then sum", [idx](V x) { return sum(embedding(x[0], idx), {0, 1}); }, {R({5, 3})}},
      {"embedding then transpose", [idx](V x) { return embedding(x[0], idx).transpose(0, 2); }, {R({5, 3})}},
      {"cross_entropy none then sum",
       [t4](V x) { return sum(cross_entropy(x[0], t4, -100, 0.1, Reduction::None)); }, {R({4, 5})}},
      {"cross_entropy none then mul",
       [t4](V x) { return cross_entropy(x[0], t4, -100, 0.0, Reduction::None) * x[1]; }, {R({4, 5}), R({4})}},
      {"dropout then sum",
       [](V x) {
         Generator g(123);
         return sum(dropout(x[0], 0.3, true, &g));
       },
       {R({3, 4})}},
      {"max dim then sum", [](V x) { return sum(max(x[0], 1).values); }, {D({3, 4})}},
      {"amax then sum", [](V x) { return sum(amax(x[0], {0})); }, {D({3, 4})}},
      {"var then sum", [](V x) { return sum(var(x[0], {1})); }, {R({3, 4})}},
      {"logsumexp then sum", [](V x) { return sum(logsumexp(x[0], {1})); }, {R({3, 4})}},
      {"cat then sum", [](V x) { return sum(cat({x[0], x[1]}, 1) * 2.0); }, {R({2, 3}), R({2, 1})}},
      {"split then sum", [](V x) { return sum(split(x[0], 2, 1)[1]); }, {R({2, 5})}},
      {"select then t", [](V x) { return select(x[0], 0, 1).t(); }, {R({2, 3, 4})}},
      {"slice step then sum", [](V x) { return sum(slice(x[0], 1, 0, 5, 2)); }, {R({2, 5})}},
      {"expand then sum", [](V x) { return sum(expand(x[0], {3, 4}), {0}); }, {R({1, 4})}},
      {"to_dtype then sum", [](V x) { return sum(to_dtype(to_dtype(x[0], kFloat32), kFloat64)); }, {Sm({2, 3})}},
      {"clone then t", [](V x) { return clone(x[0]).t(); }, {R({2, 3})}},
  });
}

// ------------------------------------------------------------------ structure ops, std, norm

// ------------------------------------------------------------------ fused nn

TEST_CASE("scaled_dot_product_attention writes q, k, v's gradients into the projection they are chunks of") {
  // The node's inputs: the projection itself where q, k, v (or k, v) tile it, else q, k, v.
  manual_seed(5);
  const Tensor x = randn({2, 4, 5}, TensorOptions(kFloat64)).requires_grad_(true);
  const Tensor w = randn({5, 18}, TensorOptions(kFloat64)).requires_grad_(true);
  auto heads = [](const Tensor& t) { return t.reshape({2, 4, 2, 3}).transpose(1, 2); };
  const Tensor proj = matmul(x, w);
  std::vector<Tensor> qkv = chunk(proj, 3, -1);
  const Tensor out = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
  REQUIRE(out.grad_fn());
  REQUIRE(out.grad_fn()->next.size() == 1);
  // (matmul's (2, 4, 18) is a view of its 2-D product: the edge is that product's node)
  auto history = [](const Tensor& t) { return t.impl()->view_base ? Tensor(t.impl()->view_base).grad_fn() : t.grad_fn(); };
  CHECK(out.grad_fn()->next[0] == history(proj));
  std::vector<Tensor> kv = chunk(proj.narrow(-1, 0, 12), 2, -1);  // k, v tile a slice of proj: not contiguous
  const Tensor cross = scaled_dot_product_attention(heads(qkv[0]), heads(kv[0]), heads(kv[1]));
  CHECK(cross.grad_fn()->next.size() == 3);
  // proj's last third and first two do tile it, in any order.
  const Tensor rotated = scaled_dot_product_attention(heads(qkv[2]), heads(kv[0]), heads(kv[1]));
  CHECK(rotated.grad_fn()->next.size() == 1);
  const Tensor kv_proj = matmul(x, w.narrow(1, 0, 12));
  kv = chunk(kv_proj, 2, -1);
  const Tensor cross2 = scaled_dot_product_attention(heads(qkv[2]), heads(kv[0]), heads(kv[1]));
  REQUIRE(cross2.grad_fn()->next.size() == 2);
  CHECK(cross2.grad_fn()->next[1] == history(kv_proj));
  // The gradients have the bits of the same attention on copies of q, k and v (their own
  // gradients, scattered by the slices' backward): the kernels' arithmetic is the same.
  const Tensor g = randn(out.shape(), TensorOptions(kFloat64));
  auto grads = [&](bool copies) {
    x.zero_grad();
    w.zero_grad();
    std::vector<Tensor> c = chunk(matmul(x, w), 3, -1);
    auto operand = [&](const Tensor& t) { return copies ? heads(t).contiguous() : heads(t); };
    const Tensor o = scaled_dot_product_attention(operand(c[0]), operand(c[1]), operand(c[2]), Tensor(), 0.0, true);
    CHECK(o.grad_fn()->next.size() == (copies ? 3u : 1u));
    o.backward(g);
    return std::make_pair(x.grad().to_vector<double>(), w.grad().to_vector<double>());
  };
  const auto packed = grads(false), own = grads(true);
  // A chunk whose gradient the caller keeps (retain_grad) gets it: that chunk's own path.
  std::vector<Tensor> c = chunk(matmul(x, w), 3, -1);
  Tensor k = heads(c[1]);
  k.retain_grad();
  const Tensor o = scaled_dot_product_attention(heads(c[0]), k, heads(c[2]));
  CHECK(o.grad_fn()->next.size() == 3);
  o.backward(g);
  CHECK(k.grad().defined());
  CHECK(packed.first == own.first);
  CHECK(packed.second == own.second);
}

// ---- attention: a query that may attend to nothing gives zeros and zero gradients
// ---- end of the fully masked query

TEST_CASE("embedding: the padding row's gradient is exactly zero") {
  for (int64_t pad : {2, -3}) {
    CAPTURE(pad);
    Tensor w = leaf64({5, 3}, 7);
    Tensor idx = index_of({0, 2, 4, 2, 1, 2}, {2, 3});
    Tensor out = embedding(w, idx, pad);
    // The forward still reads the padding row.
    CHECK(equal(out.select(0, 0).select(0, 1), w.detach().select(0, 2)));
    Tensor g = leaf64({2, 3, 3}, 8).detach();
    out.backward(g);
    Tensor gw = w.grad();
    REQUIRE(gw.defined());
    for (int64_t j = 0; j < 3; ++j) CHECK(gw.at({2, j}) == 0.0);
    // The other rows get the sum of their rows of g; row 3 is never used.
    for (int64_t j = 0; j < 3; ++j) {
      CHECK(gw.at({0, j}) == doctest::Approx(g.at({0, 0, j})));
      CHECK(gw.at({1, j}) == doctest::Approx(g.at({1, 1, j})));
      CHECK(gw.at({3, j}) == 0.0);
      CHECK(gw.at({4, j}) == doctest::Approx(g.at({0, 2, j})));
    }
  }
}

