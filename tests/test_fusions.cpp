// Issue 15's fusions outside the GEMMs:
//   - add_layer_norm (a residual add and the layer norm reading its sum, one pass) and
//     add_layer_norm_with_sum (pre-norm): forward and gradients with the bits of
//     layer_norm(add(x, r)), x and r given one gradient tensor, errors.
// (Gradient checks of add_layer_norm: the table of test_gradcheck.cpp.)
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;

namespace {

// The bytes of t (contiguous copy): equal bytes are equal bits.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  std::vector<unsigned char> b(static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

void check_bits(const std::string& what, const Tensor& got, const Tensor& want) {
  CAPTURE(what);
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  CHECK(shape_str(got.shape()) == shape_str(want.shape()));
  CHECK(got.dtype() == want.dtype());
  CHECK(bytes_of(got) == bytes_of(want));
}

Tensor leaf(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator g(seed);
  return (randn(shape, TensorOptions(dt), &g) * scale + shift).detach().requires_grad_();
}

struct LnCase {
  std::string name;
  Shape shape, normalized;
  bool weight, bias;
};

// Rows shorter than one vector (3), with a tail (37), a Transformer's width past the
// kernels' parallel thresholds (300 x 512: several tasks and backward chunks), two
// normalized dims.
const std::vector<LnCase> kLnCases = {
    {"3 wide, no affine", {4, 3}, {3}, false, false},
    {"37 wide, weight and bias", {2, 5, 37}, {37}, true, true},
    {"512 wide, 300 rows", {300, 512}, {512}, true, true},
    {"two dims, weight only", {6, 4, 5}, {4, 5}, true, false},
    {"bias only", {9, 16}, {16}, false, true},
};

}  // namespace

TEST_CASE("add_layer_norm: forward and gradients have the bits of layer_norm(add(x, r))") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (const LnCase& c : kLnCases) {
      SUBCASE((c.name + " " + dtype_name(dt)).c_str()) {
        uint64_t seed = 100;
        // A large mean: the two-pass variance must see the rounded sum, as the unfused one does.
        Tensor x = leaf(c.shape, dt, ++seed, 1.0, 3.0), r = leaf(c.shape, dt, ++seed, 0.5);
        Tensor w = c.weight ? leaf(c.normalized, dt, ++seed) : Tensor();
        Tensor b = c.bias ? leaf(c.normalized, dt, ++seed) : Tensor();
        Tensor R = randn(c.shape, TensorOptions(dt));
        auto grads = [&](const Tensor& y) {
          for (Tensor* t : {&x, &r, &w, &b})
            if (t->defined()) t->zero_grad();
          sum(mul(y, R)).backward();
          std::vector<Tensor> g;
          for (Tensor* t : {&x, &r, &w, &b}) g.push_back(t->defined() ? t->grad().clone() : Tensor());
          return g;
        };
        Tensor want = layer_norm(add(x, r), c.normalized, w, b, 1e-5);
        std::vector<Tensor> want_g = grads(want);
        Tensor got = add_layer_norm(x, r, c.normalized, w, b, 1e-5);
        CHECK(got.requires_grad());
        check_bits("output", got, want);
        std::vector<Tensor> got_g = grads(got);
        const char* names[] = {"grad x", "grad residual", "grad weight", "grad bias"};
        for (size_t i = 0; i < 4; ++i)
          if (want_g[i].defined()) check_bits(names[i], got_g[i], want_g[i]);
        // d(x + r)/dx = d(x + r)/dr: one gradient.
        check_bits("grad x = grad residual", got_g[0], got_g[1]);
        // Without a graph the sum is not kept; the values are the same.
        NoGradGuard no_grad;
        Tensor plain = add_layer_norm(x, r, c.normalized, w, b, 1e-5);
        CHECK_FALSE(plain.requires_grad());
        check_bits("output without grad", plain, want.detach());
      }
    }
  }
}

TEST_CASE("add_layer_norm: strided inputs, some inputs without grad, empty input, big eps") {
  Tensor xt = leaf({24, 10}, kFloat32, 1).t();  // (10, 24), not contiguous
  Tensor r = leaf({10, 24}, kFloat32, 2);
  Tensor w = leaf({24}, kFloat32, 3);
  check_bits("transposed x", add_layer_norm(xt, r, {24}, w, Tensor(), 0.5),
             layer_norm(add(xt, r), {24}, w, Tensor(), 0.5));
  check_bits("transposed residual", add_layer_norm(r, xt, {24}), layer_norm(add(r, xt), {24}));
  {
    NoGradGuard no_grad;
    check_bits("transposed, no grad", add_layer_norm(xt, r, {24}, w), layer_norm(add(xt, r), {24}, w));
  }
  // Only the weight needs a gradient: the sum is still kept for it.
  Tensor x = randn({10, 24}), rd = r.detach();
  Tensor R = randn({10, 24});
  w.zero_grad();
  sum(mul(layer_norm(add(x, rd), {24}, w), R)).backward();
  Tensor want = w.grad().clone();
  w.zero_grad();
  sum(mul(add_layer_norm(x, rd, {24}, w), R)).backward();
  check_bits("grad weight alone", w.grad(), want);
  // Only the residual: x (a constant) gets nothing.
  r.zero_grad();
  sum(mul(add_layer_norm(x, r, {24}), R)).backward();
  CHECK_FALSE(x.grad().defined());
  CHECK(r.grad().defined());
  // No rows: an empty result, and a zero weight gradient.
  Tensor e = add_layer_norm(empty({0, 24}), empty({0, 24}), {24}, w);
  CHECK(shape_str(e.shape()) == "(0, 24)");
  w.zero_grad();
  sum(e).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().abs().sum().item() == 0.0);
}

TEST_CASE("add_layer_norm_with_sum: the sum and the norm of add then layer_norm, bits and gradients") {
  for (const LnCase& c : kLnCases) {
    SUBCASE(c.name.c_str()) {
      Tensor x = leaf(c.shape, kFloat32, 7), r = leaf(c.shape, kFloat32, 8);
      Tensor w = c.weight ? leaf(c.normalized, kFloat32, 9) : Tensor();
      Tensor b = c.bias ? leaf(c.normalized, kFloat32, 10) : Tensor();
      Tensor R1 = randn(c.shape), R2 = randn(c.shape);
      // A pre-norm block: the sum goes on as the residual stream, the norm to the next sub-layer.
      auto run = [&](bool fused) {
        for (Tensor* t : {&x, &r, &w, &b})
          if (t->defined()) t->zero_grad();
        Tensor s, n;
        if (fused) {
          SumAndNorm o = add_layer_norm_with_sum(x, r, c.normalized, w, b);
          s = o.sum, n = o.norm;
        } else {
          s = add(x, r);
          n = layer_norm(s, c.normalized, w, b);
        }
        add(sum(mul(s, R1)), sum(mul(mul(n, n), R2))).backward();
        std::vector<Tensor> out{s.detach(), n.detach()};
        for (Tensor* t : {&x, &r, &w, &b}) out.push_back(t->defined() ? t->grad().clone() : Tensor());
        return out;
      };
      std::vector<Tensor> want = run(false), got = run(true);
      const char* names[] = {"sum", "norm", "grad x", "grad residual", "grad weight", "grad bias"};
      for (size_t i = 0; i < want.size(); ++i)
        if (want[i].defined()) check_bits(names[i], got[i], want[i]);
    }
  }
}

TEST_CASE("add_layer_norm: bad input names the op and what was given") {
  using kiln::testing::error_of;
  Tensor x = ones({2, 3});
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({3, 2}), {3}), "residual", "(3, 2)", "(2, 3)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({3}), {3}), "residual", "(3,)", "(2, 3)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({2, 3}, kFloat64), {3}), "residual", "float64",
                     "float32");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, Tensor(), {3}), "residual", "undefined");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(ones({2, 3}, kInt64), ones({2, 3}, kInt64), {3}), "int64");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {4}), "(2, 3)", "(4,)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, ones({4})), "weight", "(4,)", "(3,)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, Tensor(), ones({3}, kFloat64)), "bias",
                     "float64");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, Tensor(), Tensor(), -1.0), "eps", "-1");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm_with_sum(x, ones({2, 4}), {3}), "residual", "(2, 4)");
}
