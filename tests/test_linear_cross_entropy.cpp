// linear_cross_entropy (ops/ops.h): the loss and gradients of
// cross_entropy(linear(input, weight, bias), target, …) with the rows in chunks, so that
// no (rows, classes) logits tensor outlives the call. Its values and gradients against the
// composition for every option and chunking, gradchecks and errors are op-table rows
// (tests/op_table/linear_cross_entropy.cpp); here, what a row cannot say:
//   - only the inputs that need a gradient get one; no grad mode records nothing;
//   - under bfloat16 autocast, the composition's loss and gradients to bf16's tolerance,
//     the weight rounded once for all chunks;
//   - the tensor bytes held: under the logits' size where the composition holds twice it.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "test_util.h"

using namespace kiln;
using kiln::testing::check_matches;
using kiln::testing::leaf64;
using kiln::testing::Tol;

namespace {

struct Case {
  std::string name;
  Tensor class_weight;
  int64_t ignore_index = -100;
  double smoothing = 0.0;
  Reduction reduction = Reduction::Mean;
  bool bias = true;
};

struct Result {
  Tensor loss, g_input, g_weight, g_bias;
};

// loss(input, weight, bias) and the gradients of sum(loss) · upstream.
Result run(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& loss_of, const Tensor& input,
           const Tensor& weight, const Tensor& bias, double upstream) {
  for (const Tensor* t : {&input, &weight, &bias})
    if (t->defined()) t->zero_grad(true);
  Result r;
  r.loss = loss_of(input, weight, bias);
  (sum(r.loss) * upstream).backward();
  r.g_input = input.grad();
  r.g_weight = weight.grad();
  if (bias.defined()) r.g_bias = bias.grad();
  return r;
}

Tensor composed(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& t, const Case& c) {
  const int64_t V = w.size(0);
  Tensor logits = linear(x, w, b).reshape({-1, V});
  Tensor tt = t.reshape({-1});
  Tensor out = c.class_weight.defined()
                   ? cross_entropy(logits, tt, c.class_weight, c.ignore_index, c.smoothing, c.reduction)
                   : cross_entropy(logits, tt, c.ignore_index, c.smoothing, c.reduction);
  return c.reduction == Reduction::None ? out.reshape(t.shape()) : out;
}

Tensor fused(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& t, const Case& c, int64_t chunk) {
  if (c.class_weight.defined())
    return linear_cross_entropy(x, w, b, t, c.class_weight, c.ignore_index, c.smoothing, c.reduction, chunk);
  return linear_cross_entropy(x, w, b, t, c.ignore_index, c.smoothing, c.reduction, chunk);
}

}  // namespace

TEST_CASE("linear_cross_entropy: only the inputs that need a gradient get one; no grad mode records nothing") {
  Tensor x = leaf64({6, 4}, 4), w = leaf64({5, 4}, 5);
  Tensor b = leaf64({5}, 6).detach();  // a bias without grad
  Tensor t = from_vector<int64_t>({0, 1, 2, 3, 4, 0}, {6});
  Tensor frozen = x.detach();
  linear_cross_entropy(frozen, w, b, t, -100, 0.0, Reduction::Mean, 4).backward();
  const Tensor gw = w.grad();
  REQUIRE(gw.defined());
  w.zero_grad(true);
  cross_entropy(linear(frozen, w, b), t).backward();
  check_matches("weight grad, input frozen", gw, w.grad(), Tol{1e-12, 1e-14});
  CHECK_FALSE(b.grad().defined());
  {
    NoGradGuard no_grad;
    Tensor loss = linear_cross_entropy(x, w, b, t);
    CHECK_FALSE(loss.requires_grad());
    check_matches("loss without grad mode", loss, cross_entropy(linear(x, w, b), t), Tol{1e-12, 1e-14});
  }
}

TEST_CASE("linear_cross_entropy: under bfloat16 autocast, the composition's loss and gradients to bf16's tolerance") {
  const int64_t V = 300, D = 48;
  Generator g(7);
  Tensor x = randn({40, D}, {}, &g).requires_grad_(), w = (randn({V, D}, {}, &g) * 0.2).requires_grad_(),
         b = (randn({V}, {}, &g) * 0.1).requires_grad_();
  Tensor t = randint(0, V, {40}, TensorOptions(kInt64), &g);
  Case c{"autocast", Tensor(), -100, 0.1};
  auto under_autocast = [&](auto loss_of) {
    return run(
        [&](auto& xi, auto& wi, auto& bi) {
          AutocastGuard autocast(kBFloat16);
          return loss_of(xi, wi, bi);
        },
        x, w, b, 1.0);
  };
  const Result want = under_autocast([&](auto& xi, auto& wi, auto& bi) { return composed(xi, wi, bi, t, c); });
  const Result got = under_autocast([&](auto& xi, auto& wi, auto& bi) { return fused(xi, wi, bi, t, c, 16); });
  CHECK(got.loss.dtype() == kFloat32);
  CHECK(got.g_input.dtype() == kFloat32);
  // The same bf16 products either way, per chunk of rows instead of all rows at once. The
  // logits' gradient reaches its bf16 rounding through the fused kernel on one side and
  // autograd's ops on the other; where the CPU's vector paths make the two float32 values
  // differ in the last bit, one term's rounding flips, which moves a gradient that
  // cancels to near zero (|g| ~ 1e-4 from terms ~ 1e-2) by up to a few 1e-8.
  check_matches("bf16 autocast", got.loss.detach(), want.loss.detach(), Tol{1e-6, 1e-6});
  check_matches("bf16 grad input", got.g_input, want.g_input, Tol{1e-5, 1e-7});
  check_matches("bf16 grad weight", got.g_weight, want.g_weight, Tol{1e-5, 1e-7});
  check_matches("bf16 grad bias", got.g_bias, want.g_bias, Tol{1e-5, 1e-7});
  // and float32 without autocast, to bf16's tolerance
  const Result fp32 = run([&](auto& xi, auto& wi, auto& bi) { return composed(xi, wi, bi, t, c); }, x, w, b, 1.0);
  check_matches("bf16 against float32", got.loss.detach(), fp32.loss.detach(), Tol{1e-2, 0});
}

TEST_CASE("linear_cross_entropy: holds under the logits' bytes where the composition holds twice them") {
  const int64_t N = 256, V = 4000, D = 32;
  const int64_t logits_bytes = N * V * 4;  // 4 MB of float32
  Generator g(11);
  Tensor x = randn({N, D}, {}, &g).requires_grad_(), w = (randn({V, D}, {}, &g) * 0.1).requires_grad_(),
         b = zeros({V}).requires_grad_();
  Tensor t = randint(0, V, {N}, TensorOptions(kInt64), &g);
  auto held_beyond = [&](auto loss_of) {
    x.zero_grad(true);
    w.zero_grad(true);
    b.zero_grad(true);
    const int64_t before = memory_stats(kCPU).allocated_bytes;
    reset_peak_memory(kCPU);
    loss_of().backward();
    return memory_stats(kCPU).peak_bytes - before;
  };
  const int64_t plain = held_beyond([&] { return cross_entropy(linear(x, w, b), t); });
  const int64_t chunked = held_beyond([&] { return linear_cross_entropy(x, w, b, t, -100, 0.0, Reduction::Mean, 16); });
  CAPTURE(plain);
  CAPTURE(chunked);
  CHECK(plain >= 2 * logits_bytes);  // the logits and their gradient
  // chunks of 16 rows: two (16, V) tensors at a time besides the gradients (N·D, V·D, V)
  CHECK(chunked < logits_bytes / 2);
}

TEST_CASE("linear_cross_entropy: under autocast the weight is rounded once for all chunks") {
  Generator g(13);
  Tensor x = randn({40, 16}, {}, &g).requires_grad_(), w = randn({30, 16}, {}, &g).requires_grad_();
  Tensor t = randint(0, 30, {40}, TensorOptions(kInt64), &g);
  AutocastGuard autocast(kBFloat16);
  const AutocastCacheStats before = autocast_cache_stats();
  Tensor loss = linear_cross_entropy(x, w, Tensor(), t, -100, 0.0, Reduction::Mean, 8);  // 5 chunks, 10 products of w
  const AutocastCacheStats after = autocast_cache_stats();
  CHECK(after.conversions - before.conversions == 1);
  CHECK(after.hits - before.hits == 9);
  loss.backward();
  CHECK(w.grad().defined());
}
