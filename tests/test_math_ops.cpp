// Pointwise math's methods and modules (its values are rows of the op table:
// tests/op_table/pointwise.cpp), reductions over empty dims, and the losses (mse, l1, smooth_l1, binary_cross_entropy_with_logits,
// kl_div, weighted cross_entropy and nll_loss) against PyTorch:
// tests/fixtures/math_ops.txt holds the inputs and torch's outputs (made by
// tests/fixtures/make_math_fixtures.py, which says how to regenerate it). Then the
// modules, and every error. (Gradient checks are in test_gradcheck.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::Tol;

namespace {

const testing::FixtureFile kFixtures("math_ops.txt", "make_math_fixtures.py");
Tensor fx(const std::string& name) { return kFixtures.get(name); }

// As test_ops_forward.cpp: torch and Kiln evaluate the same formulas with different math
// libraries and summation orders; a few ulps apart, any real bug is far larger.
constexpr Tol kTol64{1e-12, 1e-14};
constexpr Tol kTol32{1e-6, 1e-7};

void check_fx(const Tensor& got, const std::string& name) {
  Tensor ref = fx(name);
  kiln::testing::check_matches(name, got, ref, ref.dtype() == kFloat64 ? kTol64 : kTol32);
}

const std::vector<std::string> kTags = {"f64", "f32"};
const std::vector<std::pair<std::string, Reduction>> kReds = {
    {"none", Reduction::None}, {"mean", Reduction::Mean}, {"sum", Reduction::Sum}};

// The gradient of the scalar f(v) w.r.t. a fresh leaf holding `value`.
Tensor grad_of(const Tensor& value, const std::function<Tensor(const Tensor&)>& f) {
  Tensor v = value.detach().clone().requires_grad_();
  f(v).backward();
  return v.grad();
}

// The gradients of the scalar f(a, b) w.r.t. fresh leaves holding a and b.
std::pair<Tensor, Tensor> grads_of(const Tensor& a, const Tensor& b,
                                   const std::function<Tensor(const Tensor&, const Tensor&)>& f) {
  Tensor va = a.detach().clone().requires_grad_(), vb = b.detach().clone().requires_grad_();
  f(va, vb).backward();
  return {va.grad(), vb.grad()};
}

}  // namespace

// ================================================================ pointwise math
TEST_CASE("the Tensor methods are the functions") {
  Tensor x = abs(fx("un.f64.x"));  // no NaN from log1p, which equal() would tell apart
  CHECK(equal(x.sin(), sin(x)));
  CHECK(equal(x.cos(), cos(x)));
  CHECK(equal(x.tan(), tan(x)));
  CHECK(equal(x.erf(), erf(x)));
  CHECK(equal(x.log1p(), log1p(x)));
  CHECK(equal(x.expm1(), expm1(x)));
}

TEST_CASE("silu and softplus of empty inputs keep their shape and dtype") {
  CHECK(silu(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK(softplus(zeros({0}, kFloat64)).dtype() == kFloat64);
}

TEST_CASE("silu and softplus keep float32 work in float32 and silu's backward is fused") {
  Tensor x = fx("un.f32.x").detach().requires_grad_();
  Tensor y = silu(x);
  CHECK(y.dtype() == kFloat32);
  REQUIRE(y.grad_fn() != nullptr);
  sum(y).backward();
  // float32 gradient against torch's float64 one, to float32 accuracy.
  kiln::testing::check_matches("silu float32 grad", x.grad().to(kFloat64), fx("un.f64.grad.silu"), Tol{1e-5, 1e-6});
}

// ================================================================ empty reductions
TEST_CASE("logsumexp over an empty dim is differentiable (its values are rows of tests/op_table)") {
  // Differentiable: the gradient of an empty input is empty.
  Tensor v = zeros({3, 0}, kFloat64).requires_grad_();
  sum(logsumexp(v, {1})).backward();
  REQUIRE(v.grad().defined());
  CHECK(v.grad().shape() == Shape{3, 0});
}

// ================================================================ elementwise losses
TEST_CASE("mse_loss, l1_loss, smooth_l1_loss match torch: reductions, broadcast targets, gradients") {
  using Fn = std::function<Tensor(const Tensor&, const Tensor&, Reduction)>;
  const std::vector<std::pair<std::string, Fn>> fns = {
      {"mse", [](const Tensor& a, const Tensor& b, Reduction r) { return nn::mse_loss(a, b, r); }},
      {"l1", [](const Tensor& a, const Tensor& b, Reduction r) { return nn::l1_loss(a, b, r); }},
      {"sl1", [](const Tensor& a, const Tensor& b, Reduction r) { return nn::smooth_l1_loss(a, b, r); }},
      {"sl1_b05", [](const Tensor& a, const Tensor& b, Reduction r) { return nn::smooth_l1_loss(a, b, r, 0.5); }},
      {"sl1_b0", [](const Tensor& a, const Tensor& b, Reduction r) { return nn::smooth_l1_loss(a, b, r, 0.0); }},
  };
  for (const auto& tag : kTags) {
    const std::string p = "reg." + tag + ".";
    Tensor a = fx(p + "a"), b = fx(p + "b"), row = fx(p + "row");
    for (const auto& fn : fns) {
      const auto& name = fn.first;
      const auto& f = fn.second;
      CAPTURE(name);
      for (const auto& [rn, r] : kReds) {
        check_fx(f(a, b, r), p + name + "." + rn);
        check_fx(f(a, row, r), p + name + ".bc." + rn);
      }
      if (tag != "f64") continue;
      // (torch's smooth_l1 backward with beta = 0 gives -1 to both sides at d = 0, Kiln the
      // l1 subgradient 0: that gradient is checked away from the kink.)
      Tensor bg = name == "sl1_b0" ? fx(p + "b_nokink") : b;
      auto [ga, gb] = grads_of(a, bg, [&](const Tensor& u, const Tensor& v) { return f(u, v, Reduction::Mean); });
      check_fx(ga, p + name + ".ga");
      check_fx(gb, p + name + ".gb");  // the target gets a gradient too
      auto [gba, grow] = grads_of(a, row, [&](const Tensor& u, const Tensor& v) { return f(u, v, Reduction::Sum); });
      check_fx(gba, p + name + ".bc.ga");
      check_fx(grow, p + name + ".bc.grow");  // summed over the broadcast rows
    }
    // The modules call the functions.
    for (const auto& [rn, r] : kReds) {
      check_fx(nn::MSELoss(r)(a, b), p + "mse." + rn);
      check_fx(nn::L1Loss(r)(a, b), p + "l1." + rn);
      check_fx(nn::SmoothL1Loss(r)(a, b), p + "sl1." + rn);
      check_fx(nn::SmoothL1Loss(r, 0.5)(a, row), p + "sl1_b05.bc." + rn);
    }
  }
  check_fx(nn::mse_loss(fx("reg.f32.a"), fx("reg.f64.b")), "reg.mixed.mse");
  check_fx(nn::l1_loss(fx("reg.f32.a"), fx("reg.int"), Reduction::None), "reg.mixed.l1_int");
  check_fx(nn::mse_loss(zeros({0}), zeros({0})), "reg.empty.mse");
  check_fx(nn::l1_loss(zeros({0}), zeros({0}), Reduction::Sum), "reg.empty.l1.sum");
}

TEST_CASE("binary_cross_entropy_with_logits matches torch: weight, pos_weight, logits of ±100, gradients") {
  for (const auto& tag : kTags) {
    const std::string p = "bce." + tag + ".";
    Tensor x = fx(p + "x"), t = fx(p + "t"), w = fx(p + "weight"), wrow = fx(p + "wrow"), pw = fx(p + "pos_weight");
    const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> cases = {
        {"plain", {Tensor(), Tensor()}}, {"w", {w, Tensor()}}, {"wrow", {wrow, Tensor()}},
        {"pw", {Tensor(), pw}}, {"wpw", {w, pw}}};
    for (const auto& c : cases) {
      const auto& name = c.first;
      const auto& wp = c.second;
      CAPTURE(name);
      const Tensor &cw = wp.first, &cpw = wp.second;
      for (const auto& [rn, r] : kReds) {
        check_fx(nn::binary_cross_entropy_with_logits(x, t, cw, r, cpw), p + name + "." + rn);
        check_fx(nn::BCEWithLogitsLoss(cw, r, cpw)(x, t), p + name + "." + rn);
      }
      if (tag != "f64") continue;
      auto [gx, gt] = grads_of(x, t, [&](const Tensor& u, const Tensor& v) {
        return nn::binary_cross_entropy_with_logits(u, v, cw, Reduction::Mean, cpw);
      });
      check_fx(gx, p + name + ".gx");
      check_fx(gt, p + name + ".gt");
    }
  }
}

TEST_CASE("kl_div matches torch: log_target, batchmean, broadcast, 0 log 0, negative and NaN targets") {
  std::vector<std::pair<std::string, Reduction>> reds = kReds;
  reds.push_back({"batchmean", Reduction::BatchMean});
  for (const auto& tag : kTags) {
    const std::string p = "kl." + tag + ".";
    Tensor i = fx(p + "i"), t = fx(p + "t"), tp = fx(p + "tp"), lt = fx(p + "lt"), row = fx(p + "row");
    for (const auto& red : reds) {
      const auto& rn = red.first;
      const auto& r = red.second;
      CAPTURE(rn);
      check_fx(nn::kl_div(i, t, r), p + rn);
      check_fx(nn::KLDivLoss(r)(i, t), p + rn);
      check_fx(nn::kl_div(i, lt, r, true), p + "log." + rn);
      check_fx(nn::KLDivLoss(r, true)(i, lt), p + "log." + rn);
      check_fx(nn::kl_div(i, row, r), p + "bc." + rn);
      check_fx(nn::kl_div(log(row), t, r), p + "bcin." + rn);
    }
    check_fx(nn::kl_div(full({4}, -1.0, fx(p + "odd").dtype()), fx(p + "odd"), Reduction::None), p + "odd.out");
    check_fx(nn::kl_div(i.select(0, 0).select(0, 0), t.select(0, 0).select(0, 0), Reduction::BatchMean),
             p + "scalar.batchmean");
    if (tag != "f64") continue;
    auto [gi, gt] = grads_of(i, tp, [](const Tensor& u, const Tensor& v) { return nn::kl_div(u, v, Reduction::BatchMean); });
    check_fx(gi, p + "gi");
    check_fx(gt, p + "gt");
    auto [lgi, lgt] = grads_of(i, lt, [](const Tensor& u, const Tensor& v) { return nn::kl_div(u, v, Reduction::Sum, true); });
    check_fx(lgi, p + "log.gi");
    check_fx(lgt, p + "log.gt");
  }
  // A zero target's gradient is finite: the 0 · log 0 term contributes 0 (not NaN), so
  // ∂/∂t (t log t - t x) at t = 0 is -x.
  Tensor t0 = from_vector<double>({0.0, 0.5, 0.5}, {3}).requires_grad_();
  nn::kl_div(from_vector<double>({-1.0, -2.0, -0.5}, {3}), t0, Reduction::Sum).backward();
  CHECK(t0.grad().at({0}) == 1.0);
}

// ================================================================ weighted class losses
TEST_CASE("nll_loss and the CrossEntropyLoss module with class weights match torch: ignore_index, label smoothing, layouts") {
  // cross_entropy itself: rows of tests/op_table/losses.cpp
  Tensor t = fx("ce.t"), t2 = fx("ce.t2"), t3 = fx("ce.t3"), t1 = fx("ce.t1");
  for (const auto& tag : kTags) {
    const std::string q = "ce." + tag + ".";
    Tensor x = fx(q + "x"), w = fx(q + "w");
    Tensor lp = fx(q + "lp"), lp3 = fx(q + "lp3"), lp1 = fx(q + "lp1");
    for (const auto& red : kReds) {
      const auto& rn = red.first;
      const auto& r = red.second;
      CAPTURE(rn);
      const std::string p = q + rn + ".";
      check_fx(nn::CrossEntropyLoss(w, -100, 0.0, r)(x, t), p + "ce");
      check_fx(nn::CrossEntropyLoss(w, 2, 0.3, r)(x, t2), p + "ce.ign2ls");
      check_fx(nn::nll_loss(lp, t, w, -100, r), p + "nll");
      check_fx(nn::NLLLoss(w, -100, r)(lp, t), p + "nll");
      check_fx(nn::nll_loss(lp, t2, w, 2, r), p + "nll.ign2");
      check_fx(nn::nll_loss(lp3, t3, w, -100, r), p + "nll.nd");
      check_fx(nn::nll_loss(lp1, t1, w, -100, r), p + "nll.1d");
    }
    if (tag != "f64") continue;
    check_fx(grad_of(lp, [&](const Tensor& v) { return nn::nll_loss(v, t2, w, 2); }), q + "grad.nll.ign2");
    check_fx(grad_of(lp3, [&](const Tensor& v) { return nn::nll_loss(v, t3, w); }), q + "grad.nll.nd");
  }
}

TEST_CASE("cross_entropy with all-one class weights equals the unweighted loss") {
  Tensor x = fx("ce.f64.x"), t = fx("ce.t");
  Tensor ones4 = ones({4}, kFloat64);
  for (double ls : {0.0, 0.2}) {
    for (const auto& red : kReds) {
      const auto& rn = red.first;
      const auto& r = red.second;
      CAPTURE(rn);
      kiln::testing::check_matches("ce ones", cross_entropy(x, t, ones4, -100, ls, r), cross_entropy(x, t, -100, ls, r),
                                   kTol64);
    }
    kiln::testing::check_matches("ce ones grad", grad_of(x, [&](const Tensor& v) { return cross_entropy(v, t, ones4, -100, ls); }),
                                 grad_of(x, [&](const Tensor& v) { return cross_entropy(v, t, -100, ls); }), kTol64);
  }
}

// ================================================================ modules
TEST_CASE("activation and loss modules print as torch and keep their weights as buffers") {
  // torch 1.13's repr of the same modules.
  CHECK(nn::SiLU().str() == "SiLU()");
  CHECK(nn::Tanh().str() == "Tanh()");
  CHECK(nn::Sigmoid().str() == "Sigmoid()");
  CHECK(nn::Softplus().str() == "Softplus(beta=1, threshold=20)");
  CHECK(nn::Softplus(0.5, 10).str() == "Softplus(beta=0.5, threshold=10)");
  CHECK(nn::L1Loss().str() == "L1Loss()");
  CHECK(nn::SmoothL1Loss(Reduction::Mean, 0.5).str() == "SmoothL1Loss()");
  CHECK(nn::BCEWithLogitsLoss().str() == "BCEWithLogitsLoss()");
  CHECK(nn::KLDivLoss(Reduction::BatchMean, true).str() == "KLDivLoss()");
  CHECK(nn::CrossEntropyLoss(ones({3})).str() == "CrossEntropyLoss()");

  // torch's state_dict keys: the weights are buffers, absent when not given.
  Tensor w = ones({3});
  CHECK(nn::CrossEntropyLoss(w).state_dict().count("weight") == 1);
  CHECK(nn::CrossEntropyLoss().state_dict().empty());
  CHECK(nn::NLLLoss(w).state_dict().count("weight") == 1);
  auto sd = nn::BCEWithLogitsLoss(w, Reduction::Mean, w * 2.0).state_dict();
  CHECK(sd.size() == 2);
  CHECK(sd.count("pos_weight") == 1);

  // The activations compute their functions.
  Tensor x = fx("un.f64.x");
  CHECK(equal(nn::SiLU()(x), silu(x)));
  CHECK(equal(nn::Softplus(2.0, 5.0)(x), softplus(x, 2.0, 5.0)));
  CHECK(equal(nn::Tanh()(x), tanh(x)));
  CHECK(equal(nn::Sigmoid()(x), sigmoid(x)));
  nn::Sequential seq({std::make_shared<nn::SiLU>(), std::make_shared<nn::Softplus>()});
  CHECK(equal(seq(x), softplus(silu(x))));
}

TEST_CASE("nn::Softplus: bad beta is a clear error") {
  CHECK_ERROR_STARTS("[Softplus]", nn::Softplus(0.0), "beta");
}

TEST_CASE("losses: bad input is a clear error") {
  Tensor a = ones({3, 4}), b = ones({4, 3});
  SUBCASE("shapes that do not broadcast, integer pairs, batchmean outside kl_div") {
    CHECK_ERROR_STARTS("[mse_loss]", nn::mse_loss(a, b), "(3, 4)", "(4, 3)");
    CHECK_ERROR_STARTS("[l1_loss]", nn::l1_loss(a, ones({5})), "(3, 4)", "(5,)");
    CHECK_ERROR_STARTS("[smooth_l1_loss]", nn::smooth_l1_loss(a, b), "(3, 4)", "(4, 3)");
    CHECK_ERROR_STARTS("[l1_loss]", nn::l1_loss(ones({2}, kInt64), ones({2}, kInt64)), "int64");
    CHECK_ERROR_STARTS("[mse_loss]", nn::mse_loss(a, Tensor()), "target", "undefined");
    CHECK_ERROR_STARTS("[mse_loss]", nn::mse_loss(a, a, Reduction::BatchMean), "batchmean", "kl_div");
    CHECK_ERROR_STARTS("[l1_loss]", nn::L1Loss(Reduction::BatchMean)(a, a), "batchmean");
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, zeros({3}, kInt64), -100, 0.0, Reduction::BatchMean), "batchmean");
    CHECK_ERROR_STARTS("[nll_loss]", nn::nll_loss(a, zeros({3}, kInt64), -100, Reduction::BatchMean), "batchmean");
    CHECK_ERROR_STARTS("[binary_cross_entropy_with_logits]", nn::binary_cross_entropy_with_logits(a, a, Tensor(), Reduction::BatchMean), "batchmean");
    CHECK_ERROR_STARTS("[reduction]", reduction_from_string("avg"), "'avg'", "batchmean");
    CHECK(reduction_from_string("batchmean") == Reduction::BatchMean);
  }
  SUBCASE("smooth_l1 beta") {
    CHECK_ERROR_STARTS("[smooth_l1_loss]", nn::smooth_l1_loss(a, a, Reduction::Mean, -1.0), "beta", "-1");
    CHECK_ERROR_STARTS("[SmoothL1Loss]", nn::SmoothL1Loss(Reduction::Mean, -0.5), "-0.5");
  }
  SUBCASE("binary_cross_entropy_with_logits") {
    const char* op = "[binary_cross_entropy_with_logits]";
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(ones({3}), ones({2, 3})), "(2, 3)", "(3,)");
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(a, ones({3, 4}, kInt64)), "target", "int64");
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(ones({3, 4}, kInt64), a), "input", "int64");
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(a, a, ones({2, 3, 4})), "weight", "(2, 3, 4)", "(3, 4)");
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(a, a, Tensor(), Reduction::Mean, ones({5})), "(5,)", "(3, 4)");
    Tensor wg = ones({4}).requires_grad_();
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(a, a, wg), "'weight'", "requires_grad");
    CHECK_ERROR_STARTS(op, nn::binary_cross_entropy_with_logits(a, a, Tensor(), Reduction::Mean, wg), "'pos_weight'");
    NoGradGuard no_grad;  // a weight requiring grad is fine where nothing is recorded
    CHECK(nn::binary_cross_entropy_with_logits(a, a, wg).defined());
  }
  SUBCASE("kl_div") {
    CHECK_ERROR_STARTS("[kl_div]", nn::kl_div(ones({3}, kInt64), ones({3})), "input", "int64");
    CHECK_ERROR_STARTS("[kl_div]", nn::kl_div(ones({3}), ones({3}, kInt64)), "target", "int64");
    CHECK_ERROR_STARTS("[kl_div]", nn::kl_div(ones({3}), ones({4})), "(3,)", "(4,)");
  }
  SUBCASE("class weights of cross_entropy and nll_loss") {
    Tensor t = zeros({3}, kInt64);
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, t, ones({3})), "4 classes", "(3,)");
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, t, ones({4, 1})), "(4, 1)");
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, t, ones({4}, kFloat64)), "float64", "float32");
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, t, Tensor()), "weight", "undefined");
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, t, ones({4}).requires_grad_()), "'weight'", "requires_grad");
    CHECK_ERROR_STARTS("[cross_entropy]", nn::CrossEntropyLoss(ones({5}))(a, t), "4 classes", "(5,)");
    CHECK_ERROR_STARTS("[nll_loss]", nn::nll_loss(a, t, ones({2})), "4 classes", "(2,)");
    CHECK_ERROR_STARTS("[nll_loss]", nn::nll_loss(a, t, ones({4}, kInt64)), "int64", "float32");
    CHECK_ERROR_STARTS("[nll_loss]", nn::NLLLoss(ones({4}).requires_grad_())(a, t), "requires_grad");
    // A bad target is still reported with a weight.
    CHECK_ERROR_STARTS("[cross_entropy]", cross_entropy(a, from_vector<int64_t>({0, 4, 1}, {3}), ones({4})), "target 4");
  }
}
