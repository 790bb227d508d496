// Optimizers (SGD, Adam, AdamW), learning-rate schedules and gradient clipping:
// - a few steps on a tiny fixed problem match torch.optim (tests/fixtures/optim.txt, made
//   by make_optim_fixtures.py), every variant (maximize too), parameter groups, float64
//   and float32;
// - each schedule against its formula, and torch.optim.lr_scheduler's (StepLR, LambdaLR,
//   MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR,
//   CosineAnnealingWarmRestarts, SequentialLR, ReduceLROnPlateau) against PyTorch's sequences (optim.txt,
//   lr_schedules.txt);
// - state_dict / load_state_dict resume bitwise, and bad state dicts are refused;
// - clip_grad_norm_ / clip_grad_value_ against PyTorch; the documented errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using namespace kiln::optim;
using kiln::testing::error_of;

namespace {

constexpr int kSteps = 6;  // STEPS in make_optim_fixtures.py
const char* const kParamNames[] = {"W1", "b1", "W2", "b2"};
// float64 runs agree with PyTorch to rounding (1e-10, well inside the 1e-6 required);
// float32 runs to float32 rounding of values of order one.
constexpr double kTol64 = 1e-10;
constexpr double kTol32 = 1e-6;

const std::map<std::string, Tensor>& fixtures() {
  static const auto f = kiln::testing::load_fixtures("optim.txt");
  return f;
}

const Tensor& fx(const std::string& name) {
  auto it = fixtures().find(name);
  REQUIRE_MESSAGE(it != fixtures().end(), "fixture '" << name << "' missing from optim.txt");
  return it->second;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double d = std::abs(x[i] - y[i]);
    if (!(d <= m)) m = d;  // NaN wins
  }
  return m;
}

// The problem of make_optim_fixtures.py: loss = mean((tanh(X W1 + b1) W2 + b2 - Y)^2).
struct Net {
  Tensor X, Y;
  std::vector<Tensor> params;  // W1 (3, 4), b1 (4), W2 (4, 2), b2 (2)

  explicit Net(DType dt = kFloat64) : X(fx("data.X").to(dt)), Y(fx("data.Y").to(dt)) {
    for (const char* n : kParamNames) params.push_back(fx(std::string("init.") + n).to(dt).clone().requires_grad_());
  }
  // A second net starting from this one's current parameters.
  Net copy() const {
    Net n(X.dtype());
    for (size_t i = 0; i < params.size(); ++i) n.params[i] = params[i].detach().clone().requires_grad_();
    return n;
  }
  Tensor loss() const {
    Tensor h = tanh(matmul(X, params[0]) + params[1]);
    return mean(pow(matmul(h, params[2]) + params[3] - Y, 2.0));
  }
  // zero_grad, forward, backward, step; returns the loss before the step.
  double train_step(Optimizer& opt) const {
    opt.zero_grad();
    Tensor l = loss();
    l.backward();
    opt.step();
    return l.item();
  }
  std::vector<ParamGroup> two_groups(std::map<std::string, double> o0, std::map<std::string, double> o1) const {
    return {ParamGroup({params[0], params[1]}, std::move(o0)), ParamGroup({params[2], params[3]}, std::move(o1))};
  }
};

// Runs kSteps steps and compares the loss before each step, the parameters after it and
// (with a schedule) the groups' lr after the schedule's step with the fixture's "<c>.*".
void check_against_torch(const std::string& c, const Net& net, Optimizer& opt, double tol,
                         LRScheduler* sched = nullptr) {
  const Tensor& losses = fx(c + ".loss");
  for (int k = 1; k <= kSteps; ++k) {
    INFO("case " << c << ", step " << k);
    double l = net.train_step(opt);
    CHECK(std::abs(l - losses.at({k - 1})) <= tol);
    if (sched) {
      sched->step();
      const Tensor& lrs = fx(c + ".lr");
      for (size_t g = 0; g < opt.param_groups().size(); ++g)
        CHECK(opt.param_groups()[g].get("lr") ==
              doctest::Approx(lrs.at({k - 1, static_cast<int64_t>(g)})).epsilon(1e-14));
    }
    for (size_t i = 0; i < 4; ++i) {
      double d = max_abs_diff(net.params[i], fx(c + "." + std::to_string(k) + "." + kParamNames[i]));
      CHECK_MESSAGE(d <= tol, kParamNames[i] << " differs from PyTorch by " << d);
    }
  }
}

SGDOptions sgd(double lr, double momentum = 0, double dampening = 0, double wd = 0, bool nesterov = false) {
  SGDOptions o;
  o.lr = lr;
  o.momentum = momentum;
  o.dampening = dampening;
  o.weight_decay = wd;
  o.nesterov = nesterov;
  return o;
}

AdamOptions adam(double lr, double wd = 0, bool amsgrad = false, double beta1 = 0.9, double beta2 = 0.999,
                 double eps = 1e-8) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = wd;
  o.amsgrad = amsgrad;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.eps = eps;
  return o;
}

std::vector<double> lrs_of(const Optimizer& opt) {
  std::vector<double> out;
  for (const auto& g : opt.param_groups()) out.push_back(g.get("lr"));
  return out;
}

bool same_state(const OptimizerState& a, const OptimizerState& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end() || !equal(t, it->second)) return false;
  }
  return true;
}

}  // namespace

// ------------------------------------------------------------------ against torch.optim

TEST_CASE("SGD matches torch.optim.SGD step by step (float64)") {
  Net net;
  SUBCASE("plain") {
    SGD opt(net.params, sgd(0.1));
    check_against_torch("sgd", net, opt, kTol64);
  }
  SUBCASE("momentum") {
    SGD opt(net.params, sgd(0.1, 0.9));
    check_against_torch("sgd_momentum", net, opt, kTol64);
  }
  SUBCASE("momentum with dampening") {
    SGD opt(net.params, sgd(0.1, 0.9, 0.5));
    check_against_torch("sgd_dampening", net, opt, kTol64);
  }
  SUBCASE("nesterov") {
    SGD opt(net.params, sgd(0.1, 0.9, 0, 0, true));
    check_against_torch("sgd_nesterov", net, opt, kTol64);
  }
  SUBCASE("weight decay") {
    SGD opt(net.params, sgd(0.1, 0, 0, 0.05));
    check_against_torch("sgd_wd", net, opt, kTol64);
  }
  SUBCASE("momentum, dampening and weight decay") {
    SGD opt(net.params, sgd(0.1, 0.8, 0.1, 0.05));
    check_against_torch("sgd_momentum_wd", net, opt, kTol64);
  }
  SUBCASE("nesterov with weight decay") {
    SGD opt(net.params, sgd(0.1, 0.8, 0, 0.05, true));
    check_against_torch("sgd_nesterov_wd", net, opt, kTol64);
  }
  SUBCASE("maximize, nesterov, weight decay") {
    SGDOptions o = sgd(0.02, 0.8, 0, 0.05, true);
    o.maximize = true;
    SGD opt(net.params, o);
    check_against_torch("sgd_maximize", net, opt, kTol64);
  }
}

TEST_CASE("Adam and AdamW match torch.optim step by step (float64)") {
  Net net;
  SUBCASE("Adam, defaults but lr") {
    Adam opt(net.params, adam(0.05));
    check_against_torch("adam", net, opt, kTol64);
  }
  SUBCASE("Adam with L2 weight decay") {
    Adam opt(net.params, adam(0.05, 0.1));
    check_against_torch("adam_wd", net, opt, kTol64);
  }
  SUBCASE("Adam amsgrad, other betas and eps") {
    Adam opt(net.params, adam(0.05, 0, true, 0.8, 0.9, 1e-6));
    check_against_torch("adam_amsgrad", net, opt, kTol64);
  }
  SUBCASE("AdamW (decoupled weight decay)") {
    AdamW opt(net.params, adam(0.05, 0.1));
    check_against_torch("adamw", net, opt, kTol64);
  }
  SUBCASE("AdamW amsgrad") {
    AdamW opt(net.params, adam(0.05, 0.1, true, 0.8, 0.9));
    check_against_torch("adamw_amsgrad", net, opt, kTol64);
  }
  SUBCASE("Adam maximize, weight decay, amsgrad") {
    AdamOptions o = adam(0.05, 0.1, true);
    o.maximize = true;
    Adam opt(net.params, o);
    check_against_torch("adam_maximize", net, opt, kTol64);
  }
  SUBCASE("AdamW maximize") {
    AdamOptions o = adam(0.05, 0.1);
    o.maximize = true;
    AdamW opt(net.params, o);
    check_against_torch("adamw_maximize", net, opt, kTol64);
  }
}

// Adam updates the parameters the fused kernel takes in runs (one backend call, one
// launch on a GPU, for all of a group's parameters of one dtype, device and step count).
// Each parameter must come out bit for bit as when it is the only one an optimizer steps:
// sizes around the parallel grain (8192 elements), empty and one-element ones, two dtypes,
// a non-contiguous one (the composed path, between two runs) and one whose first gradient
// comes a step late (its step count differs, so it needs its own bias corrections).
TEST_CASE("Adam's multi-tensor pass leaves every parameter as stepping it alone does") {
  const std::vector<std::pair<Shape, DType>> specs = {
      {{0}, kFloat32},    {{1}, kFloat32},     {{7}, kFloat32},  {{8195}, kFloat32}, {{4, 6}, kFloat32},
      {{13}, kFloat64},   {{40000}, kFloat32}, {{3}, kFloat32},  {{8192}, kFloat64}, {{50001}, kFloat32}};
  const size_t late = 7, strided = 4;  // the {3} parameter's first gradient comes at step 2
  for (int variant = 0; variant < 2; ++variant) {
    CAPTURE(variant);
    const AdamOptions o = variant == 0 ? adam(0.01) : adam(0.01, 0.05, true, 0.8, 0.95);
    Generator gen(11);
    std::vector<Tensor> initial, together, alone;
    for (size_t i = 0; i < specs.size(); ++i) {
      initial.push_back(randn(specs[i].first, TensorOptions(specs[i].second), &gen));
      // The (4, 6) one with transposed strides (1, 4): not contiguous.
      auto copy = [&] { return i == strided ? initial[i].t().contiguous().t() : initial[i].clone(); };
      together.push_back(copy().requires_grad_());
      alone.push_back(copy().requires_grad_());
    }
    REQUIRE_FALSE(together[strided].is_contiguous());
    Tensor contiguous_twin = initial[strided].clone().requires_grad_();
    std::unique_ptr<Optimizer> opt = variant == 0 ? std::unique_ptr<Optimizer>(new Adam(together, o))
                                                  : std::unique_ptr<Optimizer>(new AdamW(together, o));
    std::vector<std::unique_ptr<Optimizer>> singles;
    for (const Tensor& p : alone) {
      if (variant == 0) singles.push_back(std::make_unique<Adam>(std::vector<Tensor>{p}, o));
      else singles.push_back(std::make_unique<AdamW>(std::vector<Tensor>{p}, o));
    }
    std::unique_ptr<Optimizer> twin_opt = variant == 0 ? std::unique_ptr<Optimizer>(new Adam({contiguous_twin}, o))
                                                       : std::unique_ptr<Optimizer>(new AdamW({contiguous_twin}, o));
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < specs.size(); ++i) {
        together[i].zero_grad();
        alone[i].zero_grad();
        if (i == late && step == 0) continue;
        Tensor g = randn(specs[i].first, TensorOptions(specs[i].second), &gen);
        together[i].set_grad(g);
        alone[i].set_grad(g.clone());
        if (i == strided) contiguous_twin.set_grad(g.clone());
      }
      opt->step();
      for (auto& single : singles) single->step();
      twin_opt->step();
    }
    // The strided parameter took the composed form: torch's arithmetic, other roundings.
    // A contiguous copy of it, stepped alone with the same gradients, took the kernel.
    CHECK(allclose(together[strided], contiguous_twin, 1e-5, 1e-6));
    CHECK_FALSE(equal(contiguous_twin, initial[strided]));
    for (size_t i = 0; i < specs.size(); ++i) {
      CAPTURE(i);
      CHECK(equal(together[i], alone[i]));
      if (together[i].numel() > 0) CHECK_FALSE(equal(together[i], initial[i]));
    }
    CHECK(opt->state_dict().at("state.7.step").item() == 2.0);
  }
}

// torch's maximize flips the gradient's sign before anything else reads it, so a step
// that maximizes on g is, bit for bit, the step that minimizes on -g: on the fused kernel
// (contiguous parameters, one multi-tensor run) and on the composed form (a strided one),
// with weight decay, amsgrad, momentum and nesterov.
TEST_CASE("maximize: each step is the minimizing step of the negated gradient, bit for bit") {
  using Make = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, bool)>;
  auto check = [](const Make& make) {
    Generator gen(21);
    const Tensor init[] = {randn({6, 5}, TensorOptions(kFloat32), &gen), randn({9}, TensorOptions(kFloat32), &gen),
                           randn({4, 6}, TensorOptions(kFloat64), &gen)};
    std::vector<Tensor> up, down;
    for (const Tensor& t : init) {
      const bool strided = t.dim() == 2 && t.size(0) == 4;  // transposed strides: the composed form
      auto copy = [&] { return (strided ? t.t().contiguous().t() : t.clone()).requires_grad_(); };
      up.push_back(copy());
      down.push_back(copy());
    }
    REQUIRE_FALSE(up[2].is_contiguous());
    std::unique_ptr<Optimizer> ascend = make(up, true), descend = make(down, false);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < up.size(); ++i) {
        Tensor g = randn(init[i].shape(), TensorOptions(init[i].dtype()), &gen);
        up[i].set_grad(g);
        down[i].set_grad(neg(g));
      }
      ascend->step();
      descend->step();
    }
    for (size_t i = 0; i < up.size(); ++i) {
      CAPTURE(i);
      CHECK(equal(up[i], down[i]));
      CHECK_FALSE(equal(up[i], init[i]));
    }
    CHECK(ascend->param_groups()[0].get("maximize") == 1.0);
  };
  SUBCASE("Adam, L2 weight decay, amsgrad") {
    check([](std::vector<Tensor> ps, bool maximize) {
      AdamOptions o = adam(0.05, 0.1, true);
      o.maximize = maximize;
      return std::unique_ptr<Optimizer>(new Adam(std::move(ps), o));
    });
  }
  SUBCASE("AdamW") {
    check([](std::vector<Tensor> ps, bool maximize) {
      AdamOptions o = adam(0.05, 0.1);
      o.maximize = maximize;
      return std::unique_ptr<Optimizer>(new AdamW(std::move(ps), o));
    });
  }
  SUBCASE("SGD, nesterov momentum and weight decay") {
    check([](std::vector<Tensor> ps, bool maximize) {
      SGDOptions o = sgd(0.1, 0.8, 0, 0.05, true);
      o.maximize = maximize;
      return std::unique_ptr<Optimizer>(new SGD(std::move(ps), o));
    });
  }
  SUBCASE("a group's own option") {
    check([](std::vector<Tensor> ps, bool maximize) {
      return std::unique_ptr<Optimizer>(
          new Adam({ParamGroup(std::move(ps), {{"maximize", maximize ? 1.0 : 0.0}})}, adam(0.05)));
    });
  }
}

TEST_CASE("parameter groups keep their own lr and weight_decay, the rest from the defaults") {
  Net net;
  SUBCASE("SGD") {
    SGD opt(net.two_groups({{"lr", 0.1}, {"weight_decay", 0.01}}, {{"lr", 0.02}}), sgd(0.5, 0.9));
    REQUIRE(opt.param_groups().size() == 2);
    CHECK(opt.param_groups()[0].get("lr") == 0.1);
    CHECK(opt.param_groups()[0].get("momentum") == 0.9);
    CHECK(opt.param_groups()[1].get("lr") == 0.02);
    CHECK(opt.param_groups()[1].get("weight_decay") == 0.0);
    check_against_torch("sgd_groups", net, opt, kTol64);
  }
  SUBCASE("AdamW") {
    AdamW opt(net.two_groups({{"lr", 0.05}, {"weight_decay", 0.1}}, {{"lr", 0.01}, {"weight_decay", 0.0}}),
              adam(0.5, 0.3));
    check_against_torch("adamw_groups", net, opt, kTol64);
  }
  SUBCASE("a group added later takes the defaults") {
    Tensor extra = zeros({3}, TensorOptions().requires_grad());
    SGD opt({net.params[0]}, sgd(0.3, 0.5));
    opt.add_param_group(ParamGroup({extra}, {{"lr", 0.7}}));
    REQUIRE(opt.param_groups().size() == 2);
    CHECK(opt.param_groups()[1].get("lr") == 0.7);
    CHECK(opt.param_groups()[1].get("momentum") == 0.5);
    extra.set_grad(ones({3}, kFloat32));
    opt.step();
    CHECK(extra.to_vector<double>() == std::vector<double>(3, static_cast<double>(-0.7f)));
  }
  SUBCASE("ParamGroup::get names a missing option") {
    CHECK_ERROR(ParamGroup(std::vector<Tensor>{}).get("lr"), "[optimizer]", "no option 'lr'");
  }
}

TEST_CASE("float32 parameters match torch.optim in float32") {
  Net net(kFloat32);
  SUBCASE("SGD nesterov with weight decay") {
    SGD opt(net.params, sgd(0.1, 0.9, 0, 0.05, true));
    check_against_torch("f32_sgd", net, opt, kTol32);
  }
  SUBCASE("Adam amsgrad with weight decay") {
    Adam opt(net.params, adam(0.05, 0.1, true));
    check_against_torch("f32_adam", net, opt, kTol32);
  }
  SUBCASE("state stays float32, the step count float64") {
    Adam opt(net.params, adam(0.05));
    net.train_step(opt);
    auto sd = opt.state_dict();
    CHECK(sd.at("state.0.exp_avg").dtype() == kFloat32);
    CHECK(sd.at("state.3.exp_avg_sq").dtype() == kFloat32);
    CHECK(sd.at("state.0.step").dtype() == kFloat64);
    for (const auto& p : net.params) CHECK(p.dtype() == kFloat32);
  }
}

// ------------------------------------------------------------------ semantics

TEST_CASE("zero_grad sets gradients to none by default, or zeroes them in place") {
  Net net;
  SGD opt(net.params, sgd(0.1));
  net.loss().backward();
  for (const auto& p : net.params) REQUIRE(p.grad().defined());

  SUBCASE("set_to_none (the default, as torch 2)") {
    opt.zero_grad();
    for (const auto& p : net.params) CHECK_FALSE(p.grad().defined());
    // A step now changes nothing: parameters without a gradient are skipped.
    Net ref;
    opt.step();
    for (size_t i = 0; i < 4; ++i) CHECK(equal(net.params[i], ref.params[i]));
  }
  SUBCASE("zeroing keeps the same gradient tensors") {
    std::vector<Tensor> before;
    for (const auto& p : net.params) before.push_back(p.grad());
    opt.zero_grad(/*set_to_none=*/false);
    for (size_t i = 0; i < 4; ++i) {
      Tensor g = net.params[i].grad();
      REQUIRE(g.defined());
      CHECK(g.same_storage(before[i]));
      CHECK(equal(g, zeros_like(net.params[i])));
    }
    // The next backward accumulates into zeros: the gradient is the fresh one.
    net.loss().backward();
    Net ref;
    ref.loss().backward();
    for (size_t i = 0; i < 4; ++i) CHECK(equal(net.params[i].grad(), ref.params[i].grad()));
  }
  SUBCASE("only the optimizer's parameters") {
    Tensor other = ones({2}, TensorOptions(kFloat64).requires_grad());
    other.set_grad(ones({2}, kFloat64));
    opt.zero_grad();
    CHECK(other.grad().defined());
  }
}

TEST_CASE("parameters without a gradient are skipped and get no state") {
  Net net;
  Tensor frozen = full({2}, 3.0, kFloat64);  // does not require grad: accepted, as in torch.optim
  std::vector<Tensor> params = net.params;
  params.push_back(frozen);
  SUBCASE("SGD with momentum") {
    SGD opt(params, sgd(0.1, 0.9));
    net.params[1].requires_grad_(false);  // b1 frozen after construction: no gradient either
    for (int k = 0; k < 2; ++k) net.train_step(opt);
    CHECK(equal(net.params[1], fx("init.b1")));
    CHECK(equal(frozen, full({2}, 3.0, kFloat64)));
    auto sd = opt.state_dict();
    CHECK(sd.count("state.0.momentum_buffer") == 1);
    CHECK(sd.count("state.1.momentum_buffer") == 0);
    CHECK(sd.count("state.4.momentum_buffer") == 0);
  }
  SUBCASE("Adam") {
    Adam opt(params, adam(0.1));
    net.train_step(opt);
    CHECK(equal(frozen, full({2}, 3.0, kFloat64)));
    auto sd = opt.state_dict();
    CHECK(sd.count("state.3.exp_avg") == 1);
    CHECK(sd.count("state.4.exp_avg") == 0);
    CHECK(sd.count("state.4.step") == 0);
  }
}

TEST_CASE("optimizer steps and clipping record no graph") {
  REQUIRE(is_grad_enabled());
  Net net;
  std::unique_ptr<Optimizer> opts[] = {
      std::make_unique<SGD>(net.params, sgd(0.1, 0.9, 0, 0.01, true)),
      std::make_unique<Adam>(net.params, adam(0.01, 0.01, true)),
      std::make_unique<AdamW>(net.params, adam(0.01, 0.01)),
  };
  for (auto& opt : opts) {
    opt->zero_grad();
    net.loss().backward();
    clip_grad_norm_(net.params, 0.01);
    clip_grad_value_(net.params, 0.001);
    opt->step();
    CHECK(is_grad_enabled());  // the guard was undone
    for (const auto& p : net.params) {
      CHECK(p.is_leaf());
      CHECK(p.grad_fn() == nullptr);
      CHECK(p.requires_grad());
      CHECK_FALSE(p.grad().requires_grad());
    }
    for (const auto& kt : opt->state_dict()) {
      const auto& k = kt.first;
      const auto& t = kt.second;
      INFO(k);
      CHECK_FALSE(t.requires_grad());
    }
  }
  // The updated parameters still train: a new forward builds a graph from them.
  Tensor l = net.loss();
  CHECK(l.requires_grad());
}

TEST_CASE("Adam: amsgrad switched on after some steps starts its maximum then") {
  Net net;
  Adam opt(net.params, adam(0.05));
  net.train_step(opt);
  CHECK(opt.state_dict().count("state.0.max_exp_avg_sq") == 0);
  opt.param_groups()[0].options["amsgrad"] = 1;
  net.train_step(opt);
  auto sd = opt.state_dict();
  REQUIRE(sd.count("state.0.max_exp_avg_sq") == 1);
  CHECK(equal(sd.at("state.0.max_exp_avg_sq"), sd.at("state.0.exp_avg_sq")));
  CHECK(sd.at("state.0.step").item() == 2.0);
}

TEST_CASE("AdamW's defaults helper has torch's weight decay") {
  AdamOptions o = adamw_defaults();
  CHECK(o.weight_decay == 0.01);
  CHECK(o.lr == 1e-3);
  CHECK(o.beta1 == 0.9);
  CHECK(o.beta2 == 0.999);
  CHECK(o.eps == 1e-8);
  CHECK_FALSE(o.amsgrad);
}

TEST_CASE("AdamW's defaults are torch's: braced options decay by 0.01, an AdamOptions by its own") {
  // A zero gradient leaves only the decoupled decay: p *= 1 - lr · weight_decay.
  auto decay_after_step = [](auto make) {
    Tensor p = from_vector<double>({2.0, -4.0}, {2}).requires_grad_();
    auto opt = make(std::vector<Tensor>{p});
    p.set_grad(zeros({2}, kFloat64));
    opt.step();
    std::vector<double> v = p.to_vector<double>();
    CHECK(v[1] == doctest::Approx(-2 * v[0]).epsilon(1e-15));  // the same factor for both
    return (1 - v[0] / 2.0) / 0.1;  // the weight decay at lr 0.1
  };
  auto wd = [](double w) { return doctest::Approx(w).epsilon(1e-12); };
  CHECK(decay_after_step([](std::vector<Tensor> ps) { return AdamW(ps, {.lr = 0.1}); }) == wd(0.01));
  CHECK(decay_after_step([](std::vector<Tensor> ps) { return AdamW(ps, AdamWOptions{.lr = 0.1}); }) == wd(0.01));
  AdamOptions helper = adamw_defaults();
  helper.lr = 0.1;
  CHECK(decay_after_step([&](std::vector<Tensor> ps) { return AdamW(ps, helper); }) == wd(0.01));
  // AdamOptions is Adam's: weight_decay 0 unless set, also when given to AdamW.
  CHECK(decay_after_step([](std::vector<Tensor> ps) { return AdamW(ps, AdamOptions{.lr = 0.1}); }) == 0.0);
  CHECK(decay_after_step([](std::vector<Tensor> ps) {
          return AdamW(ps, AdamOptions{.lr = 0.1, .weight_decay = 0.5});
        }) == wd(0.5));
  CHECK(AdamW(std::vector<Tensor>{zeros({1}).requires_grad_()}, {}).param_groups()[0].options ==
        AdamW(std::vector<Tensor>{zeros({1}).requires_grad_()}, adamw_defaults()).param_groups()[0].options);
}

// ------------------------------------------------------------------ state dicts

TEST_CASE("state_dict names state and options as documented") {
  Net net;
  Adam opt(net.two_groups({{"lr", 0.05}}, {{"weight_decay", 0.2}}), adam(0.01, 0, true));
  auto empty = opt.state_dict();
  CHECK(empty.count("param_groups.0.lr") == 1);
  CHECK(empty.count("state.0.step") == 0);  // no state before the first step
  for (int k = 0; k < 3; ++k) net.train_step(opt);
  auto sd = opt.state_dict();
  CHECK(sd.size() == 2 * 7 + 4 * 4);  // 7 options per group, 4 tensors per parameter
  CHECK(sd.at("param_groups.0.lr").item() == 0.05);
  CHECK(sd.at("param_groups.1.lr").item() == 0.01);
  CHECK(sd.at("param_groups.1.weight_decay").item() == 0.2);
  CHECK(sd.at("param_groups.0.amsgrad").item() == 1.0);
  CHECK(sd.at("param_groups.1.maximize").item() == 0.0);
  CHECK(sd.at("param_groups.0.beta2").dtype() == kFloat64);
  CHECK(sd.at("param_groups.0.beta2").dim() == 0);
  for (int i = 0; i < 4; ++i) {
    INFO("parameter " << i);
    std::string s = "state." + std::to_string(i) + ".";
    CHECK(sd.at(s + "step").item() == 3.0);
    CHECK(sd.at(s + "exp_avg").shape() == net.params[i].shape());
    CHECK(sd.at(s + "exp_avg_sq").shape() == net.params[i].shape());
    CHECK(sd.at(s + "max_exp_avg_sq").shape() == net.params[i].shape());
  }
}

TEST_CASE("save and restore optimizer state: the resumed run equals the uninterrupted one bitwise") {
  auto check_resume = [](DType dt, std::function<std::unique_ptr<Optimizer>(const Net&, bool)> make) {
    Net a(dt);
    auto opt_a = make(a, false);
    for (int k = 0; k < 3; ++k) a.train_step(*opt_a);
    OptimizerState sd = opt_a->state_dict();

    Net b = a.copy();
    auto opt_b = make(b, true);  // other hyper-parameters: the state dict brings them back
    opt_b->load_state_dict(sd);
    CHECK(lrs_of(*opt_b) == lrs_of(*opt_a));
    for (int k = 0; k < 4; ++k) {
      double la = a.train_step(*opt_a), lb = b.train_step(*opt_b);
      CHECK(la == lb);
    }
    for (size_t i = 0; i < 4; ++i) CHECK(equal(a.params[i], b.params[i]));
    CHECK(same_state(opt_a->state_dict(), opt_b->state_dict()));
  };
  SUBCASE("SGD nesterov, float32") {
    check_resume(kFloat32, [](const Net& n, bool other) -> std::unique_ptr<Optimizer> {
      return std::make_unique<SGD>(n.params, other ? sgd(0.5, 0.1, 0, 0, true) : sgd(0.1, 0.9, 0, 0.01, true));
    });
  }
  SUBCASE("SGD momentum with dampening, two groups, float64") {
    check_resume(kFloat64, [](const Net& n, bool other) -> std::unique_ptr<Optimizer> {
      return std::make_unique<SGD>(n.two_groups({{"lr", other ? 1.0 : 0.1}}, {{"dampening", 0.3}}),
                                   sgd(0.05, 0.9, other ? 0.0 : 0.2));
    });
  }
  SUBCASE("Adam amsgrad, float64") {
    check_resume(kFloat64, [](const Net& n, bool other) -> std::unique_ptr<Optimizer> {
      return std::make_unique<Adam>(n.params, other ? adam(0.001) : adam(0.05, 0.01, true, 0.8, 0.9));
    });
  }
  SUBCASE("AdamW, two groups, float32") {
    check_resume(kFloat32, [](const Net& n, bool other) -> std::unique_ptr<Optimizer> {
      return std::make_unique<AdamW>(n.two_groups({{"lr", 0.03}}, {{"weight_decay", other ? 0.0 : 0.2}}),
                                     adam(0.01, 0.05));
    });
  }
  SUBCASE("the loaded state is a copy") {
    Net a;
    SGD opt_a(a.params, sgd(0.1, 0.9));
    a.train_step(opt_a);
    auto sd = opt_a.state_dict();
    Net b = a.copy();
    SGD opt_b(b.params, sgd(0.1, 0.9));
    opt_b.load_state_dict(sd);
    Tensor buf = sd.at("state.0.momentum_buffer").clone();
    sd.at("state.0.momentum_buffer").fill_(123.0);
    CHECK(equal(opt_b.state_dict().at("state.0.momentum_buffer"), buf));
  }
  SUBCASE("a loaded state replaces the state there was") {
    Net a;
    SGD opt(a.params, sgd(0.1, 0.9));
    auto fresh = opt.state_dict();
    a.train_step(opt);
    REQUIRE(opt.state_dict().count("state.0.momentum_buffer") == 1);
    opt.load_state_dict(fresh);
    CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);
  }
}

TEST_CASE("bad optimizer state dicts are refused before anything changes") {
  Net net;
  Adam opt(net.two_groups({{"lr", 0.05}}, {}), adam(0.01, 0, true));
  for (int k = 0; k < 2; ++k) net.train_step(opt);
  const OptimizerState good = opt.state_dict();
  OptimizerState sd = good;
  // Each of these must throw and leave `opt` as it was (compared below).
  Net other;
  Adam target(other.two_groups({{"lr", 0.5}}, {}), adam(0.02));
  const OptimizerState target_before = target.state_dict();

  SUBCASE("a missing option") {
    sd.erase("param_groups.1.eps");
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "lacks 'param_groups.1.eps'");
  }
  SUBCASE("missing per-parameter state") {
    sd.erase("state.2.exp_avg_sq");
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "lacks 'state.2.exp_avg_sq'");
  }
  SUBCASE("a state tensor of the wrong shape") {
    sd["state.1.exp_avg"] = zeros({2, 2}, kFloat64);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "'state.1.exp_avg'", "(2, 2)", "parameter 1",
                "(4,)");
  }
  SUBCASE("a step that is not one value") {
    sd["state.0.step"] = zeros({3}, kFloat64);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "'state.0.step'", "one value", "(3,)");
  }
  SUBCASE("an option that is not one value") {
    sd["param_groups.0.lr"] = zeros({2}, kFloat64);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "'param_groups.0.lr'", "one value");
  }
  SUBCASE("more groups than the optimizer has") {
    Adam one(other.params, adam(0.02));
    CHECK_ERROR(one.load_state_dict(sd), "[load_state_dict]", "parameter group 1", "has 1 groups");
  }
  SUBCASE("fewer groups than the optimizer has") {
    Adam one(net.params, adam(0.02));
    for (int k = 0; k < 2; ++k) net.train_step(one);
    Net n3;
    Adam three({ParamGroup({n3.params[0]}), ParamGroup({n3.params[1], n3.params[2]}), ParamGroup({n3.params[3]})},
               adam(0.02));
    CHECK_ERROR(three.load_state_dict(one.state_dict()), "[load_state_dict]", "lacks 'param_groups.1.",
                "3 parameter groups");
  }
  SUBCASE("state for a parameter the optimizer does not have") {
    sd["state.4.exp_avg"] = zeros({2}, kFloat64);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "state for parameter 4", "has 4 parameters");
  }
  SUBCASE("state of another optimizer") {
    SGD sgd_opt(other.params, sgd(0.1, 0.9));
    CHECK_ERROR(sgd_opt.load_state_dict(sd), "[load_state_dict]", "unknown option", "for SGD");
    Net n2;
    SGD momentum(n2.params, sgd(0.1, 0.9));
    n2.train_step(momentum);
    CHECK_ERROR(target.load_state_dict(momentum.state_dict()), "[load_state_dict]");
    OptimizerState mixed = good;
    mixed["state.0.momentum_buffer"] = zeros({3, 4}, kFloat64);
    CHECK_ERROR(target.load_state_dict(mixed), "[load_state_dict]", "unexpected state 'state.0.momentum_buffer'",
                "for Adam");
  }
  SUBCASE("unknown or malformed keys") {
    sd["lr"] = scalar_tensor(0.1);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "unexpected optimizer key 'lr'");
    sd = good;
    sd["state.x.exp_avg"] = zeros({3, 4}, kFloat64);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "malformed optimizer key 'state.x.exp_avg'");
    sd = good;
    sd["param_groups.0"] = scalar_tensor(0.1);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "malformed optimizer key 'param_groups.0'");
    sd = good;
    sd["param_groups.0.momentum"] = scalar_tensor(0.1);
    CHECK_ERROR(target.load_state_dict(sd), "[load_state_dict]", "unknown option 'param_groups.0.momentum'");
  }
  SUBCASE("options out of range") {
    sd["param_groups.1.lr"] = scalar_tensor(-1.0);
    CHECK_ERROR(target.load_state_dict(sd), "[Adam] invalid learning rate: -1");
    sd = good;
    sd["param_groups.0.beta2"] = scalar_tensor(1.5);
    CHECK_ERROR(target.load_state_dict(sd), "[Adam] invalid beta parameter at index 1: 1.5");
    sd = good;
    sd["param_groups.1.maximize"] = scalar_tensor(0.5);
    CHECK_ERROR(target.load_state_dict(sd), "[Adam] invalid maximize value: 0.5");
  }
  // Whatever was refused, the target is as it was and still loads the good state.
  CHECK(same_state(target.state_dict(), target_before));
  CHECK(lrs_of(target) == std::vector<double>{0.5, 0.02});
  target.load_state_dict(good);
  CHECK(same_state(target.state_dict(), good));
}

// A state dict written before an option existed (maximize came after the first files)
// loads, the option taking torch's default (false) as torch's __setstate__ gives it, also
// where this optimizer was made maximizing; a file that has it sets it.
TEST_CASE("a state dict without maximize loads with maximize false; one with it sets it") {
  Net a;
  Adam writer(a.params, adam(0.01));
  for (int k = 0; k < 2; ++k) a.train_step(writer);
  Net b = a.copy();
  AdamOptions up = adam(0.01);
  up.maximize = true;
  Adam reader(b.params, up);
  OptimizerState old = writer.state_dict();
  REQUIRE(old.erase("param_groups.0.maximize") == 1);
  CHECK(reader.param_groups()[0].get("maximize") == 1.0);
  reader.load_state_dict(old);
  CHECK(reader.param_groups()[0].get("maximize") == 0.0);
  CHECK(same_state(reader.state_dict(), writer.state_dict()));
  // From here both minimize: the same steps.
  for (int k = 0; k < 2; ++k) {
    a.train_step(writer);
    b.train_step(reader);
  }
  for (size_t i = 0; i < 4; ++i) CHECK(equal(a.params[i], b.params[i]));
  OptimizerState on = writer.state_dict();
  on["param_groups.0.maximize"] = scalar_tensor(1.0);
  reader.load_state_dict(on);
  CHECK(reader.param_groups()[0].get("maximize") == 1.0);
  // SGD too; an option that is not newer than the file is still required.
  Net c;
  SGD sgd_writer(c.params, sgd(0.1, 0.9)), sgd_reader(Net().params, sgd(0.1));
  c.train_step(sgd_writer);
  OptimizerState s = sgd_writer.state_dict();
  s.erase("param_groups.0.maximize");
  sgd_reader.load_state_dict(s);
  CHECK(sgd_reader.param_groups()[0].get("momentum") == 0.9);
  CHECK(sgd_reader.param_groups()[0].get("maximize") == 0.0);
  s.erase("param_groups.0.momentum");
  CHECK_ERROR(sgd_reader.load_state_dict(s), "[load_state_dict]", "lacks 'param_groups.0.momentum'");
}

// ------------------------------------------------------------------ LR schedules

TEST_CASE("schedules driving an optimizer match torch.optim.lr_scheduler") {
  Net net;
  SUBCASE("StepLR on SGD momentum") {
    SGD opt(net.params, sgd(0.1, 0.9));
    StepLR sched(opt, 2, 0.5);
    check_against_torch("steplr", net, opt, kTol64, &sched);
  }
  SUBCASE("LambdaLR on Adam, two groups") {
    Adam opt(net.two_groups({{"lr", 0.05}}, {{"lr", 0.01}}), adam(0.1));
    LambdaLR sched(opt, [](int64_t s) { return 1.0 / (1.0 + 0.5 * static_cast<double>(s)); });
    check_against_torch("lambdalr", net, opt, kTol64, &sched);
  }
}

TEST_CASE("StepLR and LambdaLR give PyTorch's lr sequence, per group") {
  Tensor q0 = zeros({1}, TensorOptions().requires_grad()), q1 = zeros({1}, TensorOptions().requires_grad());
  SGD opt({ParamGroup({q0}, {{"lr", 0.1}}), ParamGroup({q1}, {{"lr", 0.03}})}, sgd(1.0));
  std::unique_ptr<LRScheduler> sched;
  std::string name;
  SUBCASE("StepLR") {
    sched = std::make_unique<StepLR>(opt, 3, 0.7);
    name = "seq.steplr";
  }
  SUBCASE("LambdaLR") {
    sched = std::make_unique<LambdaLR>(opt, [](int64_t s) { return std::pow(0.95, static_cast<double>(s)); });
    name = "seq.lambdalr";
  }
  const Tensor& seq = fx(name);
  REQUIRE(seq.shape() == Shape{21, 2});
  for (int64_t s = 0; s <= 20; ++s) {
    INFO(name << " step " << s);
    if (s > 0) sched->step();
    CHECK(sched->last_step() == s);
    auto last = sched->get_last_lr();
    REQUIRE(last.size() == 2);
    for (int64_t g = 0; g < 2; ++g) {
      CHECK(last[g] == doctest::Approx(seq.at({s, g})).epsilon(1e-14));
      CHECK(opt.param_groups()[g].get("lr") == last[g]);
    }
  }
}

// torch's other closed-form schedules (tests/fixtures/lr_schedules.txt, made by
// make_lr_schedule_fixtures.py): lr at construction and after each of 20 steps, groups of
// lr 0.1 and 0.03. torch updates these step by step from the current lr (a product of
// ratios of the same formula), Kiln evaluates the formula. torch's products drift: up to
// 4.3e-15 relative after 20 steps (the cosine climbing back from its minimum, where its
// 0.0505 is 0.050500000000000218), so the two are held to 1e-14 relative, and are both 0
// where the formula is. (The formula itself is checked to rounding below.)
TEST_CASE("MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR, the cosines, SequentialLR: torch's lrs") {
  static const auto fixtures = kiln::testing::load_fixtures("lr_schedules.txt");
  using Make = std::function<std::unique_ptr<LRScheduler>(Optimizer&)>;
  const std::vector<std::pair<std::string, Make>> cases = {
      {"multistep",
       [](Optimizer& o) { return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{7, 3, 12, 7}, 0.5); }},
      {"multistep_default", [](Optimizer& o) { return std::make_unique<MultiStepLR>(o, std::vector<int64_t>{4, 9}); }},
      {"exponential", [](Optimizer& o) { return std::make_unique<ExponentialLR>(o, 0.9); }},
      {"constant", [](Optimizer& o) { return std::make_unique<ConstantLR>(o, 0.25, 4); }},
      {"constant_default", [](Optimizer& o) { return std::make_unique<ConstantLR>(o); }},
      {"linear", [](Optimizer& o) { return std::make_unique<LinearLR>(o, 0.2, 0.9, 6); }},
      {"linear_default", [](Optimizer& o) { return std::make_unique<LinearLR>(o); }},
      {"polynomial", [](Optimizer& o) { return std::make_unique<PolynomialLR>(o, 8, 2.0); }},
      {"polynomial_default", [](Optimizer& o) { return std::make_unique<PolynomialLR>(o); }},
      {"cosine", [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 8, 0.001); }},
      {"cosine_default", [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 5); }},
      {"restarts", [](Optimizer& o) { return std::make_unique<CosineAnnealingWarmRestarts>(o, 6, 1, 0.002); }},
      {"restarts_mult", [](Optimizer& o) { return std::make_unique<CosineAnnealingWarmRestarts>(o, 3, 2); }},
      {"sequential",
       [](Optimizer& o) {
         return std::make_unique<SequentialLR>(
             o, std::vector<std::shared_ptr<LRScheduler>>{std::make_shared<LinearLR>(o, 0.1, 1.0, 5),
                                                          std::make_shared<CosineAnnealingLR>(o, 10, 0.001)},
             std::vector<int64_t>{5});
       }},
      {"sequential3",
       [](Optimizer& o) {
         return std::make_unique<SequentialLR>(
             o, std::vector<std::shared_ptr<LRScheduler>>{std::make_shared<ConstantLR>(o, 0.5, 10),
                                                          std::make_shared<ExponentialLR>(o, 0.8),
                                                          std::make_shared<StepLR>(o, 2, 0.5)},
             std::vector<int64_t>{4, 9});
       }},
  };
  REQUIRE(std::count_if(fixtures.begin(), fixtures.end(), [](const auto& f) { return f.first.starts_with("sched."); }) ==
          static_cast<std::ptrdiff_t>(cases.size()));
  for (const auto& c : cases) {
    // A name, not a structured binding: clang 14's lambdas (INFO's) cannot capture one.
    const std::string& name = c.first;
    SUBCASE(name.c_str()) {
      const auto it = fixtures.find("sched." + name);
      REQUIRE(it != fixtures.end());
      const Tensor& seq = it->second;
      REQUIRE(seq.shape() == Shape{21, 2});
      Tensor q0 = zeros({1}, TensorOptions().requires_grad()), q1 = zeros({1}, TensorOptions().requires_grad());
      SGD opt({ParamGroup({q0}, {{"lr", 0.1}}), ParamGroup({q1}, {{"lr", 0.03}})}, sgd(1.0));
      std::unique_ptr<LRScheduler> sched = c.second(opt);
      for (int64_t s = 0; s <= 20; ++s) {
        INFO(name << " step " << s);
        if (s > 0) sched->step();
        const auto last = sched->get_last_lr();
        REQUIRE(last.size() == 2);
        for (int64_t g = 0; g < 2; ++g) {
          const double want = seq.at({s, g});
          CHECK(std::abs(last[g] - want) <= 1e-14 * std::abs(want) + 1e-18);
        }
      }
    }
  }
}

// ReduceLROnPlateau fed a metric that falls, then wanders on a plateau (lr_schedules.txt):
// each group's lr, the best metric and the two counters after every step are torch's,
// bit for bit (the same products in the same order).
TEST_CASE("ReduceLROnPlateau follows torch's, step by step") {
  static const auto fixtures = kiln::testing::load_fixtures("lr_schedules.txt");
  auto fixture = [&](const std::string& name) -> const Tensor& {
    const auto it = fixtures.find(name);
    REQUIRE_MESSAGE(it != fixtures.end(), name << " missing from lr_schedules.txt");
    return it->second;
  };
  using O = ReduceLROnPlateauOptions;
  const std::vector<std::pair<std::string, O>> cases = {
      {"default", {}},
      {"patience3", {.patience = 3}},
      {"max_abs",
       {.mode = O::Mode::Max, .factor = 0.5, .patience = 2, .threshold = 0.01, .threshold_mode = O::ThresholdMode::Abs,
        .cooldown = 2, .min_lr = {0.02, 0.001}}},
      {"min_abs_eps",
       {.factor = 0.5, .patience = 1, .threshold = 0.001, .threshold_mode = O::ThresholdMode::Abs, .min_lr = {0.01},
        .eps = 0.004}},
      {"rel_cooldown", {.factor = 0.7, .patience = 0, .threshold = 0.05, .cooldown = 3}},
  };
  const std::vector<double> metric = fixture("plateau.metric").to_vector<double>();
  REQUIRE(metric.size() == 40);
  for (const auto& c : cases) {
    const std::string& name = c.first;
    SUBCASE(name.c_str()) {
      const Tensor& lr = fixture("plateau." + name + ".lr");
      const auto best = fixture("plateau." + name + ".best").to_vector<double>();
      const auto bad = fixture("plateau." + name + ".bad").to_vector<int64_t>();
      const auto cooldown = fixture("plateau." + name + ".cooldown").to_vector<int64_t>();
      Tensor q0 = zeros({1}, TensorOptions().requires_grad()), q1 = zeros({1}, TensorOptions().requires_grad());
      SGD opt({ParamGroup({q0}, {{"lr", 0.1}}), ParamGroup({q1}, {{"lr", 0.03}})}, sgd(1.0));
      ReduceLROnPlateau sched(opt, c.second);
      const double sign = c.second.mode == O::Mode::Max ? -1.0 : 1.0;  // max watches the negated loss
      int reductions = 0;
      for (size_t k = 0; k < metric.size(); ++k) {
        INFO(name << " step " << k + 1);
        const double before = opt.param_groups()[1].get("lr");
        sched.step(sign * metric[k]);
        reductions += opt.param_groups()[1].get("lr") < before;
        const auto last = sched.get_last_lr();
        CHECK(last[0] == lr.at({static_cast<int64_t>(k), 0}));
        CHECK(last[1] == lr.at({static_cast<int64_t>(k), 1}));
        CHECK(sched.state().best == best[k]);
        CHECK(sched.state().num_bad_epochs == bad[k]);
        CHECK(sched.state().cooldown_counter == cooldown[k]);
        CHECK(sched.state().last_step == static_cast<int64_t>(k + 1));
      }
      if (name != "default") CHECK(reductions >= 2);  // the fixture's cases do reduce
    }
  }
}

TEST_CASE("ReduceLROnPlateau: NaN metrics, resuming, bad options") {
  Tensor q = zeros({1}, TensorOptions().requires_grad());
  SGD opt({q}, sgd(0.1));
  ReduceLROnPlateau sched(opt, {.patience = 1});
  CHECK(sched.state().best == std::numeric_limits<double>::infinity());
  sched.step(1.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  sched.step(nan);  // never an improvement: two in a row reduce
  CHECK(opt.param_groups()[0].get("lr") == 0.1);
  sched.step(nan);
  CHECK(opt.param_groups()[0].get("lr") == doctest::Approx(0.01).epsilon(1e-15));
  CHECK(sched.state().best == 1.0);

  // A copy resumed from the state (and the lr, which the optimizer's state holds) goes on
  // as the original does.
  Tensor q2 = zeros({1}, TensorOptions().requires_grad());
  SGD opt2({q2}, sgd(opt.param_groups()[0].get("lr")));
  ReduceLROnPlateau resumed(opt2, {.patience = 1});
  resumed.load_state(sched.state());
  for (double m : {1.5, 0.5, 0.6, 0.7, 0.4}) {
    sched.step(m);
    resumed.step(m);
    CHECK(opt2.param_groups()[0].get("lr") == opt.param_groups()[0].get("lr"));
    CHECK(resumed.state().best == sched.state().best);
  }
  CHECK_ERROR(resumed.load_state({.best = nan}), "[ReduceLROnPlateau] a state needs a best that is a number");
  CHECK_ERROR(resumed.load_state({.best = 1.0, .num_bad_epochs = -1}), "[ReduceLROnPlateau]", "num_bad_epochs -1");

  CHECK_ERROR(ReduceLROnPlateau(opt, {.factor = 1.0}), "[ReduceLROnPlateau] factor must be in [0, 1), got 1");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.factor = nan}), "[ReduceLROnPlateau] factor must be in [0, 1), got nan");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.patience = -1}), "[ReduceLROnPlateau] patience must be non-negative, got -1");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.threshold = -0.1}), "[ReduceLROnPlateau] threshold must be finite");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.cooldown = -2}), "[ReduceLROnPlateau] cooldown must be non-negative, got -2");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.min_lr = {0.1, 0.2}}),
              "[ReduceLROnPlateau] expected 1 or 1 min_lr values (one per parameter group), got 2");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.min_lr = {-1.0}}), "[ReduceLROnPlateau] min_lr must be finite and non-negative");
  CHECK_ERROR(ReduceLROnPlateau(opt, {.eps = nan}), "[ReduceLROnPlateau] eps must be finite");
}

TEST_CASE("each schedule follows its formula") {
  Tensor q0 = zeros({1}, TensorOptions().requires_grad()), q1 = zeros({1}, TensorOptions().requires_grad());
  SGD opt({ParamGroup({q0}, {{"lr", 0.1}}), ParamGroup({q1}, {{"lr", 0.02}})}, sgd(1.0));
  const double base[2] = {0.1, 0.02};
  auto check_all = [&](LRScheduler& sched, int64_t steps, const std::function<double(int64_t, double)>& formula) {
    for (int64_t s = 0; s <= steps; ++s) {
      if (s > 0) sched.step();
      for (size_t g = 0; g < 2; ++g) {
        double want = formula(s, base[g]);
        double got = opt.param_groups()[g].get("lr");
        if (!(std::abs(got - want) <= 1e-13 * std::abs(want))) {
          FAIL_CHECK("step " << s << " group " << g << ": lr " << got << ", formula " << want);
          return;
        }
        CHECK(sched.lr_at(s, base[g]) == got);
      }
    }
  };
  SUBCASE("LambdaLR: base * fn(step)") {
    LambdaLR sched(opt, [](int64_t s) { return s % 2 ? 1.0 / static_cast<double>(s) : 2.0; });
    check_all(sched, 100, [](int64_t s, double b) { return b * (s % 2 ? 1.0 / static_cast<double>(s) : 2.0); });
  }
  SUBCASE("StepLR: base * gamma^floor(step / step_size)") {
    StepLR sched(opt, 7, 0.3);
    check_all(sched, 100, [](int64_t s, double b) { return b * std::pow(0.3, std::floor(s / 7.0)); });
    CHECK(sched.lr_at(6, 1.0) == 1.0);
    CHECK(sched.lr_at(7, 1.0) == 0.3);
    CHECK(sched.lr_at(13, 1.0) == 0.3);
    CHECK(sched.lr_at(14, 1.0) == doctest::Approx(0.09).epsilon(1e-15));
  }
  SUBCASE("torch's closed forms past the fixtures' 20 steps") {
    CosineAnnealingLR cosine(opt, 10, 0.01);
    check_all(cosine, 100, [](int64_t s, double b) {
      return 0.01 + (b - 0.01) * (1 + std::cos(M_PI * static_cast<double>(s) / 10.0)) / 2;
    });
    CHECK(cosine.lr_at(10, 0.1) == doctest::Approx(0.01).epsilon(1e-15));  // eta_min at T_max
    CHECK(cosine.lr_at(20, 0.1) == doctest::Approx(0.1).epsilon(1e-15));   // back at base: no restart
    CHECK(cosine.lr_at(25, 0.1) == doctest::Approx(cosine.lr_at(5, 0.1)).epsilon(1e-14));
    ExponentialLR exponential(opt, 0.97);
    check_all(exponential, 100, [](int64_t s, double b) { return b * std::pow(0.97, static_cast<double>(s)); });
    MultiStepLR multistep(opt, {30, 10, 10}, 0.5);
    CHECK(multistep.lr_at(9, 1.0) == 1.0);
    CHECK(multistep.lr_at(10, 1.0) == 0.25);  // a milestone listed twice counts twice
    CHECK(multistep.lr_at(30, 1.0) == 0.125);
    CHECK(multistep.lr_at(1000, 1.0) == 0.125);
    LinearLR linear(opt, 0.5, 1.0, 4);
    CHECK(linear.lr_at(2, 1.0) == 0.75);
    CHECK(linear.lr_at(4, 1.0) == 1.0);
    CHECK(linear.lr_at(1000, 1.0) == 1.0);
    PolynomialLR polynomial(opt, 4, 2.0);
    CHECK(polynomial.lr_at(2, 1.0) == 0.25);
    CHECK(polynomial.lr_at(4, 1.0) == 0.0);
    CHECK(polynomial.lr_at(1000, 1.0) == 0.0);
    ConstantLR constant(opt, 0.5, 3);
    CHECK(constant.lr_at(2, 1.0) == 0.5);
    CHECK(constant.lr_at(3, 1.0) == 1.0);
    // Warm restarts: cycles of 4, 8, 16 steps start at 0, 4, 12, 28.
    CosineAnnealingWarmRestarts restarts(opt, 4, 2, 0.0);
    for (int64_t start : {0, 4, 12, 28}) CHECK(restarts.lr_at(start, 1.0) == 1.0);
    CHECK(restarts.lr_at(8, 1.0) == doctest::Approx(0.5).epsilon(1e-15));   // half way through 4..12
    CHECK(restarts.lr_at(20, 1.0) == doctest::Approx(0.5).epsilon(1e-15));  // half way through 12..28
    CHECK(restarts.lr_at(27, 1.0) < 0.01);
    CosineAnnealingWarmRestarts every5(opt, 5);
    CHECK(every5.lr_at(1000, 1.0) == 1.0);
    CHECK(every5.lr_at(1003, 1.0) == every5.lr_at(3, 1.0));
    // Each part from its own step 0 at its milestone.
    SequentialLR sequential(opt, {std::make_shared<LinearLR>(opt, 0.5, 1.0, 2), std::make_shared<ExponentialLR>(opt, 0.5)},
                            {3});
    const double want[] = {0.5, 0.75, 1.0, 1.0, 0.5, 0.25};
    for (int64_t s = 0; s < 6; ++s) CHECK(sequential.lr_at(s, 1.0) == want[s]);
    sequential.step();
    CHECK(opt.param_groups()[0].get("lr") == 0.75 * 0.1);
  }
  SUBCASE("WarmupInverseSqrtLR: factor * d^-0.5 * min(s^-0.5, s * warmup^-1.5), every group alike") {
    const double d = 512, w = 4000, factor = 2.0;
    WarmupInverseSqrtLR sched(opt, 512, 4000, factor);
    auto noam = [&](int64_t step, double) {
      double s = static_cast<double>(std::max<int64_t>(step, 1));
      return factor / std::sqrt(d) * std::min(1.0 / std::sqrt(s), s / (w * std::sqrt(w)));
    };
    check_all(sched, 12000, noam);
    // The peak is at the end of warm-up: factor / sqrt(d_model * warmup).
    CHECK(sched.lr_at(4000, 0.1) == doctest::Approx(2.0 / std::sqrt(512.0 * 4000.0)).epsilon(1e-14));
    CHECK(sched.lr_at(3999, 0.1) < sched.lr_at(4000, 0.1));
    CHECK(sched.lr_at(4001, 0.1) < sched.lr_at(4000, 0.1));
    // Linear during warm-up, 1/sqrt(step) after.
    CHECK(sched.lr_at(2000, 0.1) == doctest::Approx(sched.lr_at(1000, 0.1) * 2).epsilon(1e-14));
    CHECK(sched.lr_at(16000, 0.1) == doctest::Approx(sched.lr_at(4000, 0.1) / 2).epsilon(1e-14));
    // Step 0 counts as step 1 (the paper's formula is undefined there).
    CHECK(sched.lr_at(0, 0.1) == sched.lr_at(1, 0.1));
    CHECK(sched.lr_at(1, 0.1) > 0);
  }
  SUBCASE("CosineWarmupLR: linear warm-up, cosine to base * min_ratio, then flat") {
    const int64_t w = 10, total = 50;
    const double min_ratio = 0.1;
    CosineWarmupLR sched(opt, w, total, min_ratio);
    CHECK(opt.param_groups()[0].get("lr") == 0.0);  // step 0 of warm-up
    check_all(sched, 70, [&](int64_t s, double b) {
      if (s < w) return b * static_cast<double>(s) / static_cast<double>(w);
      double p = std::min(1.0, static_cast<double>(s - w) / static_cast<double>(total - w));
      return b * (min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * p)));
    });
    CHECK(sched.lr_at(5, 0.1) == doctest::Approx(0.05).epsilon(1e-15));
    CHECK(sched.lr_at(10, 0.1) == doctest::Approx(0.1).epsilon(1e-15));
    CHECK(sched.lr_at(30, 0.1) == doctest::Approx(0.1 * (0.1 + 0.9 * 0.5)).epsilon(1e-14));
    CHECK(sched.lr_at(50, 0.1) == doctest::Approx(0.01).epsilon(1e-14));
    CHECK(sched.lr_at(1000, 0.1) == doctest::Approx(0.01).epsilon(1e-14));
    for (int64_t s = w; s < total; ++s) CHECK(sched.lr_at(s + 1, 1.0) < sched.lr_at(s, 1.0));
    CosineWarmupLR no_warmup(opt, 0, 20);
    CHECK(no_warmup.lr_at(0, 1.0) == 1.0);
    CHECK(no_warmup.lr_at(20, 1.0) == doctest::Approx(0.0));
  }
}

TEST_CASE("the optimizer steps with the lr the schedule set") {
  // grad 1 on every step: SGD moves each parameter by exactly its group's current lr.
  Tensor q0 = zeros({1}, TensorOptions(kFloat64).requires_grad());
  Tensor q1 = zeros({1}, TensorOptions(kFloat64).requires_grad());
  SGD opt({ParamGroup({q0}, {{"lr", 0.1}}), ParamGroup({q1}, {{"lr", 0.02}})}, sgd(1.0));
  CosineWarmupLR sched(opt, 3, 10, 0.2);
  double want0 = 0, want1 = 0;
  for (int64_t s = 0; s < 12; ++s) {
    q0.set_grad(ones({1}, kFloat64));
    q1.set_grad(ones({1}, kFloat64));
    want0 -= sched.lr_at(s, 0.1);
    want1 -= sched.lr_at(s, 0.02);
    opt.step();
    sched.step();
    CHECK(q0.item() == doctest::Approx(want0).epsilon(1e-15));
    CHECK(q1.item() == doctest::Approx(want1).epsilon(1e-15));
  }
  CHECK(want0 != 0);
}

TEST_CASE("schedules resume: set_last_step, and the base lr survives the optimizer's state dict") {
  Net a;
  SGD opt_a(a.two_groups({{"lr", 0.1}}, {{"lr", 0.02}}), sgd(0.1, 0.9));
  StepLR sched_a(opt_a, 2, 0.5);
  for (int k = 0; k < 5; ++k) {
    a.train_step(opt_a);
    sched_a.step();
  }
  CHECK(sched_a.last_step() == 5);
  CHECK(lrs_of(opt_a) == std::vector<double>{0.1 * 0.25, 0.02 * 0.25});
  const OptimizerState sd = opt_a.state_dict();
  CHECK(sd.at("param_groups.0.initial_lr").item() == 0.1);
  CHECK(sd.at("param_groups.1.initial_lr").item() == 0.02);

  Net b = a.copy();
  SGD opt_b(b.two_groups({{"lr", 0.1}}, {{"lr", 0.02}}), sgd(0.1, 0.9));
  std::unique_ptr<StepLR> sched_b;
  SUBCASE("schedule made before loading") {
    sched_b = std::make_unique<StepLR>(opt_b, 2, 0.5);
    opt_b.load_state_dict(sd);
  }
  SUBCASE("schedule made after loading starts from initial_lr, not the lr reached") {
    opt_b.load_state_dict(sd);
    sched_b = std::make_unique<StepLR>(opt_b, 2, 0.5);
    CHECK(lrs_of(opt_b) == std::vector<double>{0.1, 0.02});  // step 0 of the schedule
  }
  sched_b->set_last_step(5);
  CHECK(sched_b->last_step() == 5);
  CHECK(lrs_of(opt_b) == lrs_of(opt_a));
  for (int k = 0; k < 4; ++k) {
    CHECK(a.train_step(opt_a) == b.train_step(opt_b));
    sched_a.step();
    sched_b->step();
    CHECK(lrs_of(opt_b) == lrs_of(opt_a));
  }
  for (size_t i = 0; i < 4; ++i) CHECK(equal(a.params[i], b.params[i]));
  CHECK(lrs_of(opt_b) == std::vector<double>{0.1 * 0.0625, 0.02 * 0.0625});
  // set_last_step goes backwards too.
  sched_b->set_last_step(0);
  CHECK(lrs_of(opt_b) == std::vector<double>{0.1, 0.02});
}

TEST_CASE("a schedule made after the lr was changed by hand keeps the first base lr") {
  Tensor q = zeros({1}, TensorOptions().requires_grad());
  SGD opt({q}, sgd(0.4));
  { StepLR first(opt, 1, 0.5); first.step(); }
  CHECK(lrs_of(opt) == std::vector<double>{0.2});
  StepLR second(opt, 10, 0.1);  // as torch: base lrs come from "initial_lr"
  CHECK(lrs_of(opt) == std::vector<double>{0.4});
}

// ------------------------------------------------------------------ gradient clipping

TEST_CASE("clip_grad_norm_ matches torch.nn.utils.clip_grad_norm_") {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* tag;
    double max_norm, norm_type;
    bool clips;
  };
  for (Case c : {Case{"l2_clip", 1.0, 2.0, true}, Case{"l2_noclip", 100.0, 2.0, false},
                 Case{"inf_clip", 0.5, inf, true}, Case{"inf_noclip", 10.0, inf, false}}) {
    for (DType dt : {kFloat64, kFloat32}) {
      std::string tag = std::string("clip.") + c.tag + (dt == kFloat64 ? ".f64" : ".f32");
      INFO(tag);
      const double tol = dt == kFloat64 ? 1e-12 : 1e-6;
      std::vector<Tensor> ps;
      for (int i = 0; i < 3; ++i) {
        Tensor g = fx("clip.g" + std::to_string(i));
        ps.push_back(zeros(g.shape(), TensorOptions(dt).requires_grad()));
        ps.back().set_grad(g.to(dt).clone());
      }
      Tensor untouched = zeros({2}, TensorOptions(dt).requires_grad());  // no grad: skipped
      ps.insert(ps.begin() + 1, untouched);
      double total = clip_grad_norm_(ps, c.max_norm, c.norm_type);
      double want = fx(tag + ".total").item();
      CHECK(total == doctest::Approx(want).epsilon(tol));
      CHECK((total > c.max_norm) == c.clips);
      CHECK_FALSE(untouched.grad().defined());
      for (int i = 0; i < 3; ++i) {
        const Tensor& g = ps[i < 1 ? i : i + 1].grad();
        CHECK(g.dtype() == dt);
        CHECK(max_abs_diff(g, fx(tag + ".g" + std::to_string(i))) <= tol);
        if (!c.clips) CHECK(equal(g, fx("clip.g" + std::to_string(i)).to(dt)));  // not touched
      }
    }
  }
}

TEST_CASE("clip_grad_norm_: the threshold, edge cases and non-finite gradients") {
  Tensor p = zeros({2}, TensorOptions(kFloat64).requires_grad());
  auto set = [&](double x, double y) { p.set_grad(from_vector<double>({x, y}, {2})); };
  SUBCASE("scales to max_norm when the norm is above it, leaves it alone below") {
    set(3, 4);
    CHECK(clip_grad_norm_({p}, 5.1) == 5.0);
    CHECK(p.grad().to_vector<double>() == std::vector<double>{3, 4});
    CHECK(clip_grad_norm_({p}, 4.0) == 5.0);
    const double coef = 4.0 / (5.0 + 1e-6);  // torch's formula
    CHECK(p.grad().at({0}) == doctest::Approx(3 * coef).epsilon(1e-15));
    CHECK(p.grad().at({1}) == doctest::Approx(4 * coef).epsilon(1e-15));
    CHECK(std::hypot(p.grad().at({0}), p.grad().at({1})) == doctest::Approx(4.0).epsilon(1e-6));
  }
  SUBCASE("the norm is global, over all parameters together") {
    Tensor q = zeros({1}, TensorOptions(kFloat64).requires_grad());
    set(2, 4);
    q.set_grad(full({1}, 4.0, kFloat64));
    CHECK(clip_grad_norm_({p, q}, 3.0) == 6.0);
    CHECK(q.grad().item() == doctest::Approx(4.0 * 3.0 / 6.0).epsilon(1e-6));
    CHECK(p.grad().at({0}) == doctest::Approx(2.0 * 3.0 / 6.0).epsilon(1e-6));
  }
  SUBCASE("no gradients: norm 0") {
    CHECK(clip_grad_norm_({p}, 1.0) == 0.0);
    CHECK(clip_grad_norm_({}, 1.0) == 0.0);
  }
  SUBCASE("max_norm 0 zeroes the gradients") {
    set(-1, 2);
    clip_grad_norm_({p}, 0.0);
    CHECK(p.grad().to_vector<double>() == std::vector<double>{0, 0});
  }
  SUBCASE("a NaN gradient gives a NaN norm, for either norm type") {
    Tensor q = zeros({1}, TensorOptions(kFloat64).requires_grad());
    q.set_grad(full({1}, 1.0, kFloat64));
    set(std::nan(""), 1);
    CHECK(std::isnan(clip_grad_norm_({p, q}, 1.0)));
    set(std::nan(""), 1);
    CHECK(std::isnan(clip_grad_norm_({p, q}, 1.0, std::numeric_limits<double>::infinity())));
    set(std::nan(""), 1);
    CHECK(std::isnan(clip_grad_norm_({q, p}, 1.0, std::numeric_limits<double>::infinity())));
  }
  SUBCASE("an infinite gradient gives an infinite norm") {
    set(std::numeric_limits<double>::infinity(), 1);
    CHECK(std::isinf(clip_grad_norm_({p}, 1.0)));
  }
}

TEST_CASE("clip_grad_value_ clamps every element into [-v, v]") {
  std::vector<Tensor> ps;
  for (int i = 0; i < 3; ++i) {
    Tensor g = fx("clip.g" + std::to_string(i));
    ps.push_back(zeros(g.shape(), TensorOptions(kFloat64).requires_grad()));
    ps.back().set_grad(g.clone());
  }
  ps.push_back(zeros({2}, TensorOptions(kFloat64).requires_grad()));  // no grad: skipped
  clip_grad_value_(ps, 0.7);
  bool some_clamped = false;
  for (int i = 0; i < 3; ++i) {
    Tensor before = fx("clip.g" + std::to_string(i));
    CHECK(equal(ps[i].grad(), fx("clip.value.g" + std::to_string(i))));
    auto b = before.to_vector<double>(), a = ps[i].grad().to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j) {
      CHECK(a[j] == std::min(0.7, std::max(-0.7, b[j])));
      some_clamped |= std::abs(b[j]) > 0.7;
    }
  }
  CHECK(some_clamped);
  CHECK_FALSE(ps[3].grad().defined());
}

// ------------------------------------------------------------------ errors

TEST_CASE("bad optimizer options name the optimizer and the value") {
  Net net;
  const auto& ps = net.params;
  SUBCASE("SGD") {
    CHECK_ERROR(SGD(ps, sgd(-0.1)), "[SGD] invalid learning rate: -0.1");
    CHECK_ERROR(SGD(ps, sgd(0.1, -0.5)), "[SGD] invalid momentum value: -0.5");
    CHECK_ERROR(SGD(ps, sgd(0.1, 0, 0, -0.01)), "[SGD] invalid weight_decay value: -0.01");
    CHECK_ERROR(SGD(ps, sgd(0.1, 0, 0, 0, true)), "[SGD] nesterov momentum requires a momentum and zero dampening",
                "momentum 0", "dampening 0");
    CHECK_ERROR(SGD(ps, sgd(0.1, 0.9, 0.5, 0, true)), "[SGD] nesterov", "momentum 0.9", "dampening 0.5");
    CHECK_ERROR(SGD(ps, sgd(std::nan(""))), "[SGD] invalid learning rate: nan");
    // in a group's own options too
    CHECK_ERROR(SGD(net.two_groups({}, {{"lr", -2.0}}), sgd(0.1)), "[SGD] invalid learning rate: -2");
  }
  SUBCASE("Adam and AdamW") {
    CHECK_ERROR(Adam(ps, adam(-1e-3)), "[Adam] invalid learning rate: -0.001");
    CHECK_ERROR(Adam(ps, adam(1e-3, 0, false, 1.0)), "[Adam] invalid beta parameter at index 0: 1");
    CHECK_ERROR(Adam(ps, adam(1e-3, 0, false, -0.1)), "[Adam] invalid beta parameter at index 0: -0.1");
    CHECK_ERROR(Adam(ps, adam(1e-3, 0, false, 0.9, 1.5)), "[Adam] invalid beta parameter at index 1: 1.5");
    CHECK_ERROR(Adam(ps, adam(1e-3, 0, false, 0.9, 0.999, -1e-8)), "[Adam] invalid epsilon value: -1e-08");
    CHECK_ERROR(Adam(ps, adam(1e-3, -0.1)), "[Adam] invalid weight_decay value: -0.1");
    CHECK_ERROR(AdamW(ps, adam(-0.5)), "[AdamW] invalid learning rate: -0.5");
    CHECK_ERROR(AdamW(net.two_groups({{"beta2", 1.0}}, {}), adam(0.1)), "[AdamW] invalid beta parameter at index 1: 1");
  }
  SUBCASE("flags are 0 or 1") {
    CHECK_ERROR(Adam(net.two_groups({{"maximize", 0.5}}, {}), adam(0.1)),
                "[Adam] invalid maximize value: 0.5 (a flag is 0 or 1)");
    CHECK_ERROR(AdamW(net.two_groups({}, {{"amsgrad", 2.0}}), adam(0.1)), "[AdamW] invalid amsgrad value: 2");
    CHECK_ERROR(SGD(net.two_groups({{"maximize", -1.0}}, {}), sgd(0.1)), "[SGD] invalid maximize value: -1");
    CHECK_ERROR(SGD(net.two_groups({{"nesterov", 0.5}}, {}), sgd(0.1, 0.9)), "[SGD] invalid nesterov value: 0.5");
  }
  SUBCASE("groups added later are checked too") {
    SGD opt({ps[0]}, sgd(0.1));
    CHECK_ERROR(opt.add_param_group(ParamGroup({ps[1]}, {{"lr", -3.0}})), "[SGD] invalid learning rate: -3");
    CHECK_ERROR(opt.add_param_group(ParamGroup({ps[1]}, {{"nesterov", 1.0}})), "[SGD] nesterov");
    CHECK(opt.param_groups().size() == 1);  // nothing was added
    Adam a({ps[0]}, adam(0.1));
    CHECK_ERROR(a.add_param_group(ParamGroup({ps[1]}, {{"eps", -1.0}})), "[Adam] invalid epsilon value: -1");
  }
  SUBCASE("unknown options") {
    CHECK_ERROR(Adam(net.two_groups({{"momentum", 0.9}}, {}), adam(0.1)), "[Adam] unknown option 'momentum'");
    SGD opt({ps[0]}, sgd(0.1));
    CHECK_ERROR(opt.add_param_group(ParamGroup({ps[1]}, {{"betas", 0.9}})), "[SGD] unknown option 'betas'");
  }
}

TEST_CASE("bad parameter lists name the problem") {
  Net net;
  SUBCASE("empty") {
    CHECK_ERROR(SGD(std::vector<Tensor>{}, sgd(0.1)), "[SGD] optimizer got an empty parameter list");
    CHECK_ERROR(Adam(std::vector<ParamGroup>{}, adam(0.1)), "[Adam] optimizer got an empty parameter list");
    CHECK_ERROR(AdamW(std::vector<ParamGroup>{ParamGroup(std::vector<Tensor>{})}, adam(0.1)), "[AdamW]", "empty parameter list");
  }
  SUBCASE("a non-leaf tensor") {
    Tensor y = net.params[0] * 2.0;
    CHECK_ERROR(SGD({net.params[1], y}, sgd(0.1)), "[SGD] can't optimize a non-leaf tensor", "parameter 1 of group 0");
  }
  SUBCASE("a non-float tensor") {
    CHECK_ERROR(Adam({ones({2}, kInt64)}, adam(0.1)), "[Adam] can't optimize a tensor of dtype int64",
                "parameter 0");
  }
  SUBCASE("an undefined tensor") {
    CHECK_ERROR(SGD({net.params[0], Tensor()}, sgd(0.1)), "[SGD]", "parameter 1", "undefined");
  }
  SUBCASE("a parameter twice") {
    std::vector<ParamGroup> twice = {ParamGroup({net.params[0]}), ParamGroup({net.params[1], net.params[0]})};
    CHECK_ERROR(SGD(twice, sgd(0.1)), "[SGD] some parameters appear in more than one parameter group");
    SGD opt(net.params, sgd(0.1));
    CHECK_ERROR(opt.add_param_group(ParamGroup({net.params[2]})), "more than one parameter group");
  }
}

TEST_CASE("bad schedule and clipping arguments") {
  Tensor q = zeros({1}, TensorOptions().requires_grad());
  SGD opt({q}, sgd(0.1));
  CHECK_ERROR(StepLR(opt, 0), "[StepLR] step_size must be positive, got 0");
  CHECK_ERROR(StepLR(opt, -3, 0.5), "[StepLR] step_size must be positive, got -3");
  CHECK_ERROR(LambdaLR(opt, nullptr), "[LambdaLR] needs a function");
  CHECK_ERROR(WarmupInverseSqrtLR(opt, 0, 4000), "[WarmupInverseSqrtLR]", "got 0 and 4000");
  CHECK_ERROR(WarmupInverseSqrtLR(opt, 512, -1), "[WarmupInverseSqrtLR]", "got 512 and -1");
  CHECK_ERROR(CosineWarmupLR(opt, 10, 10), "[CosineWarmupLR] need 0 <= warmup_steps < total_steps, got 10 and 10");
  CHECK_ERROR(CosineWarmupLR(opt, -1, 10), "[CosineWarmupLR]", "got -1 and 10");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_ERROR(MultiStepLR(opt, {3, -1}), "[MultiStepLR] milestones must be non-negative, got -1");
  CHECK_ERROR(MultiStepLR(opt, {3}, nan), "[MultiStepLR] gamma must be finite, got nan");
  CHECK_ERROR(ExponentialLR(opt, std::numeric_limits<double>::infinity()), "[ExponentialLR] gamma must be finite");
  CHECK_ERROR(ConstantLR(opt, 1.5), "[ConstantLR] factor must be in [0, 1], got 1.5");
  CHECK_ERROR(ConstantLR(opt, nan), "[ConstantLR] factor must be in [0, 1], got nan");
  CHECK_ERROR(ConstantLR(opt, 0.5, -1), "[ConstantLR] total_iters must be non-negative, got -1");
  CHECK_ERROR(LinearLR(opt, 0.0), "[LinearLR] start_factor must be in (0, 1], got 0");
  CHECK_ERROR(LinearLR(opt, 0.5, 1.5), "[LinearLR] end_factor must be in [0, 1], got 1.5");
  CHECK_ERROR(LinearLR(opt, 0.5, 1.0, 0), "[LinearLR] total_iters must be positive, got 0");
  CHECK_ERROR(PolynomialLR(opt, 0), "[PolynomialLR] total_iters must be positive, got 0");
  CHECK_ERROR(PolynomialLR(opt, 5, nan), "[PolynomialLR] power must be finite, got nan");
  CHECK_ERROR(CosineAnnealingLR(opt, 0), "[CosineAnnealingLR] T_max must be positive, got 0");
  CHECK_ERROR(CosineAnnealingWarmRestarts(opt, 0), "[CosineAnnealingWarmRestarts] T_0 must be positive, got 0");
  CHECK_ERROR(CosineAnnealingWarmRestarts(opt, 5, 0), "[CosineAnnealingWarmRestarts] T_mult must be at least 1, got 0");
  CHECK_ERROR(CosineAnnealingWarmRestarts(opt, 5, 1, nan), "[CosineAnnealingWarmRestarts] eta_min must be finite");
  CHECK_ERROR(CosineAnnealingLR(opt, 10, -nan), "[CosineAnnealingLR] eta_min must be finite");
  auto linear = std::make_shared<LinearLR>(opt, 0.5, 1.0, 2);
  auto cosine = std::make_shared<CosineAnnealingLR>(opt, 4);
  using Parts = std::vector<std::shared_ptr<LRScheduler>>;
  CHECK_ERROR(SequentialLR(opt, {}, {}), "[SequentialLR] needs at least one schedule");
  CHECK_ERROR(SequentialLR(opt, Parts{linear, cosine}, {}),
              "[SequentialLR] needs one milestone fewer than schedules, got 2 schedules and 0 milestones");
  CHECK_ERROR(SequentialLR(opt, Parts{linear, nullptr}, {2}), "[SequentialLR] schedule 1 is null");
  CHECK_ERROR(SequentialLR(opt, Parts{linear, cosine, linear}, {3, 3}),
              "[SequentialLR] milestones must be positive and rise strictly, got 3 at 1");
  CHECK_ERROR(SequentialLR(opt, Parts{linear, cosine}, {0}), "got 0 at 0");
  Tensor other_q = zeros({1}, TensorOptions().requires_grad());
  SGD other({other_q}, sgd(0.1));
  CHECK_ERROR(SequentialLR(other, Parts{linear, cosine}, {2}),
              "[SequentialLR] schedule 0 drives another optimizer than this one");
  opt.param_groups()[0].options["lr"] = 0.1;  // (the two parts set it when made)
  StepLR sched(opt, 2);
  CHECK_ERROR(sched.set_last_step(-1), "[LRScheduler] step must be non-negative, got -1");
  CHECK(sched.last_step() == 0);

  q.set_grad(ones({1}));
  CHECK_ERROR(clip_grad_norm_({q}, -1.0), "[clip_grad_norm_] max_norm must be non-negative, got -1");
  CHECK_ERROR(clip_grad_norm_({q}, 1.0, 1.0), "[clip_grad_norm_] norm_type must be 2 or inf, got 1");
  CHECK_ERROR(clip_grad_norm_({q}, 1.0, -std::numeric_limits<double>::infinity()), "[clip_grad_norm_]",
              "got -inf");
  CHECK_ERROR(clip_grad_value_({q}, -0.5), "[clip_grad_value_] clip_value must be non-negative, got -0.5");
  CHECK(q.grad().item() == 1.0);  // nothing was clipped
}
