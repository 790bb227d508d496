// Pointwise math's methods and modules (its values are rows of the op table:
// tests/op_table/pointwise.cpp), reductions over empty dims, and the loss modules and
// what the losses' rows cannot hold (mixed dtypes; the loss functions themselves are rows
// of tests/op_table/elementwise_losses.cpp and nll_loss.cpp) against PyTorch:
// tests/fixtures/math_ops.txt holds the inputs and torch's outputs (made by
// tests/fixtures/make_math_fixtures.py, which says how to regenerate it). Then the
// modules' errors.
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

// The worst distance, in float32 ulps of the float64 value, of float32 `got` from `want`
// over the points xs (both evaluated on them); the point where it is reached in `at`.
double worst_ulps(const Tensor& got32, const Tensor& want64, const std::vector<double>& xs, double& at) {
  const std::vector<float> got = got32.to_vector<float>();
  const std::vector<double> want = want64.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float w = static_cast<float>(want[i]);
    if (std::isinf(w)) {
      if (got[i] != w) worst = std::numeric_limits<double>::infinity(), at = xs[i];
      continue;
    }
    const double ulp = std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
    const double err = std::fabs(got[i] - want[i]) / std::max(ulp, 1e-45);
    if (err > worst) worst = err, at = xs[i];
  }
  return worst;
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

TEST_CASE("float32 tanh and sigmoid stay within a few ulps of their float64 values") {
  // Kiln's own float32 tanh and exp (vectorized) against the library's float64
  // functions, on a fine grid over the range where they are not yet constant, with the
  // points where tanh changes formula (|x| = 0.5) and saturates (9.01) among them.
  std::vector<double> xs;
  for (int i = -240000; i <= 240000; ++i) xs.push_back(i * 5e-5);
  for (double b : {0.5, 9.01}) {
    const float f = static_cast<float>(b);
    for (double v : {double{f}, double{std::nextafter(f, 0.0f)}, double{std::nextafter(f, 20.0f)}}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  const Tensor x = from_vector<double>(xs, {static_cast<int64_t>(xs.size())}).to(kFloat32);
  const Tensor x64 = x.to(kFloat64);
  struct Case {
    const char* name;
    Tensor got, want;
    double max_ulps;
  };
  // Error bounds: tanh's measured worst over every float is 4.4 ulps; sigmoid rounds a
  // division and a product more than exp's few.
  for (const Case& c : {Case{"tanh", tanh(x), tanh(x64), 5}, Case{"sigmoid", sigmoid(x), sigmoid(x64), 8}}) {
    CAPTURE(c.name);
    double at = 0;
    const double worst = worst_ulps(c.got, c.want, xs, at);
    CAPTURE(at);
    CHECK(worst <= c.max_ulps);
  }
}

TEST_CASE("float32 log, log1p, expm1, erf and softplus stay within a few ulps of float64") {
  // Kiln's own vectorized float32 forms (vec_math.h) against the library's float64
  // functions. The bounds are their worst over every float, measured exhaustively: log
  // 0.75 ulps, log1p 2.47, expm1 5.07 (just past |x| = 1, where exp(x) - 1 takes over
  // from the series), erf 2.92 (just past 0.5, where 1 - erfc does).
  auto grid = [](double from, double to, double step) {
    std::vector<double> v;
    for (double x = from; x <= to; x += step) v.push_back(x);
    return v;
  };
  auto with = [](std::vector<double> v, std::initializer_list<double> more) {
    for (double m : more) {
      const float f = static_cast<float>(m);
      for (float g : {f, std::nextafter(f, -1e30f), std::nextafter(f, 1e30f)}) v.push_back(g);
    }
    return v;
  };
  std::vector<double> log_xs = with(grid(-20, 20, 2e-4), {});
  for (double& x : log_xs) x = std::exp(x * 4.4);  // 1e-38 to 1e38, geometric
  log_xs = with(log_xs, {1.0, 2.0, 1.41421356, 0.70710678, 1e-45, 3e-42, 1.1e-38, 3.4e38});
  const std::vector<double> log1p_xs = with(grid(-0.9999, 10, 1e-4), {1e-30, -1e-20, 1e-8, -3e-8, 1e6, 3e30});
  const std::vector<double> expm1_xs = with(grid(-20, 20, 1e-4), {1.0, -1.0, 1e-30, -1e-12, 80, -90});
  const std::vector<double> erf_xs = with(grid(-6, 6, 5e-5), {0.5, -0.5, 1e-30, -1e-20});
  const std::vector<double> softplus_xs = with(grid(-40, 40, 1e-3), {20.0, -20.0});
  struct Case {
    const char* name;
    const std::vector<double>& xs;
    std::function<Tensor(const Tensor&)> f;
    double max_ulps;
  };
  const std::vector<Case> cases = {
      {"log", log_xs, [](const Tensor& t) { return log(t); }, 1},
      {"log1p", log1p_xs, [](const Tensor& t) { return log1p(t); }, 3},
      {"expm1", expm1_xs, [](const Tensor& t) { return expm1(t); }, 6},
      {"erf", erf_xs, [](const Tensor& t) { return erf(t); }, 3},
      // log1p(exp(x)): exp's few ulps and log1p's, through a derivative below 1.
      {"softplus", softplus_xs, [](const Tensor& t) { return softplus(t); }, 6},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Tensor x = from_vector<double>(c.xs, {static_cast<int64_t>(c.xs.size())}).to(kFloat32);
    double at = 0;
    const double worst = worst_ulps(c.f(x), c.f(x.to(kFloat64)), c.xs, at);
    CAPTURE(at);
    CHECK(worst <= c.max_ulps);
  }
  // Their edges, as the float64 library's.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto values = [](const Tensor& t) { return t.to_vector<float>(); };
  const Tensor edges = from_vector<float>({0.0f, -0.0f, -1.0f, -2.0f, inf, -inf, nan, 100.0f}, {8});
  const std::vector<float> lg = values(log(edges)), l1 = values(log1p(edges)), em = values(expm1(edges)),
                           er = values(erf(edges));
  CHECK(lg[0] == -inf);
  CHECK(lg[1] == -inf);
  CHECK(std::isnan(lg[2]));
  CHECK(lg[4] == inf);
  CHECK(std::isnan(lg[5]));
  CHECK(std::isnan(lg[6]));
  CHECK(l1[2] == -inf);
  CHECK(std::isnan(l1[3]));
  CHECK(l1[4] == inf);
  CHECK(std::isnan(l1[5]));
  CHECK(std::isnan(l1[6]));
  CHECK(em[4] == inf);
  CHECK(em[5] == -1.0f);
  CHECK(std::isnan(em[6]));
  CHECK(em[7] == inf);
  CHECK(er[4] == 1.0f);
  CHECK(er[5] == -1.0f);
  CHECK(std::isnan(er[6]));
  CHECK(std::signbit(er[1]));  // erf(-0) = -0
  CHECK(std::signbit(values(log1p(edges))[1]));  // log1p(-0) = -0
  CHECK(std::signbit(values(expm1(edges))[1]));  // expm1(-0) = -0
}

TEST_CASE("pow's integer exponents 2, 3, -1 and -2 are torch's products and quotients, bit for bit") {
  // torch computes these as x·x, x·x·x, 1/x and 1/(x·x) (checked against torch 2.15 on a
  // million float32 values: all equal), which round differently from powf: x·x·x differs
  // from the correctly rounded cube in about a quarter of them.
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = randn({4096}, TensorOptions(dt)) * 10.0;
    const Tensor sq = x * x;
    CHECK(equal(pow(x, 2.0), sq));
    CHECK(equal(pow(x, 3.0), sq * x));
    CHECK(equal(pow(x, -1.0), 1.0 / x));
    CHECK(equal(pow(x, -2.0), 1.0 / sq));
  }
  // Their edges stay pow's: 0 to a negative power is inf, a NaN stays NaN.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> e = pow(from_vector<float>({0.0f, -0.0f, NAN}, {3}), -2.0).to_vector<float>();
  CHECK(e[0] == inf);
  CHECK(e[1] == inf);
  CHECK(std::isnan(e[2]));
}

// ================================================================ empty reductions
TEST_CASE("logsumexp over an empty dim is differentiable (its values are rows of tests/op_table)") {
  // Differentiable: the gradient of an empty input is empty.
  Tensor v = zeros({3, 0}, kFloat64).requires_grad_();
  sum(logsumexp(v, {1})).backward();
  REQUIRE(v.grad().defined());
  CHECK(v.grad().shape() == Shape{3, 0});
}

// ================================================================ loss modules
TEST_CASE("the loss modules call their functions with their arguments") {
  for (const auto& tag : kTags) {
    const std::string p = "reg." + tag + ".";
    Tensor a = fx(p + "a"), b = fx(p + "b"), row = fx(p + "row");
    for (const auto& [rn, r] : kReds) {
      check_fx(nn::MSELoss(r)(a, b), p + "mse." + rn);
      check_fx(nn::L1Loss(r)(a, b), p + "l1." + rn);
      check_fx(nn::SmoothL1Loss(r)(a, b), p + "sl1." + rn);
      check_fx(nn::SmoothL1Loss(r, 0.5)(a, row), p + "sl1_b05.bc." + rn);
    }
    const std::string q = "bce." + tag + ".";
    Tensor x = fx(q + "x"), t = fx(q + "t"), w = fx(q + "weight"), pw = fx(q + "pos_weight");
    for (const auto& [rn, r] : kReds) {
      check_fx(nn::BCEWithLogitsLoss(Tensor(), r)(x, t), q + "plain." + rn);
      check_fx(nn::BCEWithLogitsLoss(w, r, pw)(x, t), q + "wpw." + rn);
    }
    const std::string k = "kl." + tag + ".";
    for (const auto& [rn, r] : kReds) {
      check_fx(nn::KLDivLoss(r)(fx(k + "i"), fx(k + "t")), k + rn);
      check_fx(nn::KLDivLoss(r, true)(fx(k + "i"), fx(k + "lt")), k + "log." + rn);
    }
    check_fx(nn::KLDivLoss(Reduction::BatchMean)(fx(k + "i"), fx(k + "t")), k + "batchmean");
    const std::string c = "ce." + tag + ".";
    Tensor cw = fx(c + "w");
    for (const auto& [rn, r] : kReds) {
      check_fx(nn::CrossEntropyLoss(cw, -100, 0.0, r)(fx(c + "x"), fx("ce.t")), c + rn + ".ce");
      check_fx(nn::CrossEntropyLoss(cw, 2, 0.3, r)(fx(c + "x"), fx("ce.t2")), c + rn + ".ce.ign2ls");
      check_fx(nn::NLLLoss(cw, -100, r)(fx(c + "lp"), fx("ce.t")), c + rn + ".nll");
    }
  }
}

// A row's inputs share one dtype; torch's promotion of mixed ones, and empty inputs:
TEST_CASE("mse_loss and l1_loss promote mixed dtypes and reduce empty inputs as torch") {
  check_fx(mse_loss(fx("reg.f32.a"), fx("reg.f64.b")), "reg.mixed.mse");
  check_fx(l1_loss(fx("reg.f32.a"), fx("reg.int"), Reduction::None), "reg.mixed.l1_int");
  check_fx(mse_loss(zeros({0}), zeros({0})), "reg.empty.mse");
  check_fx(l1_loss(zeros({0}), zeros({0}), Reduction::Sum), "reg.empty.l1.sum");
}

// A zero target's gradient is finite: the 0 · log 0 term contributes 0 (not NaN), so
// ∂/∂t (t log t - t x) at t = 0 is -x. (gradcheck cannot take differences at 0.)
TEST_CASE("kl_div's gradient at a zero target is finite") {
  Tensor t0 = from_vector<double>({0.0, 0.5, 0.5}, {3}).requires_grad_();
  kl_div(from_vector<double>({-1.0, -2.0, -0.5}, {3}), t0, Reduction::Sum).backward();
  CHECK(t0.grad().at({0}) == 1.0);
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

// (The loss functions' errors are in their rows of tests/op_table.)
TEST_CASE("losses: bad input is a clear error") {
  Tensor a = ones({3, 4});
  SUBCASE("the modules' arguments, reductions") {
    CHECK_ERROR_STARTS("[l1_loss]", nn::L1Loss(Reduction::BatchMean)(a, a), "batchmean");
    CHECK_ERROR_STARTS("[SmoothL1Loss]", nn::SmoothL1Loss(Reduction::Mean, -0.5), "-0.5");
    CHECK_ERROR_STARTS("[reduction]", reduction_from_string("avg"), "'avg'", "batchmean");
    CHECK(reduction_from_string("batchmean") == Reduction::BatchMean);
  }
  SUBCASE("a weight requiring grad is fine where nothing is recorded") {
    Tensor wg = ones({4}).requires_grad_();
    NoGradGuard no_grad;
    CHECK(binary_cross_entropy_with_logits(a, a, wg).defined());
  }
  SUBCASE("the modules' class weights") {
    Tensor t = zeros({3}, kInt64);
    CHECK_ERROR_STARTS("[cross_entropy]", nn::CrossEntropyLoss(ones({5}))(a, t), "4 classes", "(5,)");
    CHECK_ERROR_STARTS("[nll_loss]", nn::NLLLoss(ones({4}).requires_grad_())(a, t), "requires_grad");
  }
}
