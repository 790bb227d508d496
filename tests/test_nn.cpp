// Tests of framework/nn: every module and loss against PyTorch (tests/fixtures/nn_modules.txt
// holds torch's inputs, parameters as state_dict entries, outputs and gradients;
// tests/fixtures/nn_repr.txt holds torch's names and printed trees; both are made by
// tests/fixtures/make_nn_fixtures.py), float64 gradient checks of each module with respect
// to its input and its parameters and of each loss, the default initialisation and the
// init functions (statistics), the Module base (names, modes, state dicts, conversion),
// and the errors of bad input. Then module ergonomics and the Transformer package:
//   - a user module prints its class name without a type string; Sequential from a braced
//     list or from the modules; module(args…) for any forward; clone() as a deep copy;
//   - TransformerEncoder/Decoder from a layer module (deep copies, as _get_clones); the
//     seq2seq model's embedding scale and final norms; the positional table in float64;
//     the warm-up schedule's two step indexings (against torch's LambdaLR);
//   - a query that may attend to nothing gives zeros, not NaN (fused and unfused,
//     forward and backward; seed 004's first inference call);
//   - load_state_dict converts dtypes as torch's copy_; the trainer's gradient norm and
//     train_step without a DataLoader.
//   Their reference numbers: tests/fixtures/make_modules_api_fixtures.py (PyTorch 1.13).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;
using kiln::testing::error_of;

namespace {

// ---------------------------------------------------------------- fixtures
const testing::FixtureFile kFixtures("nn_modules.txt", "make_nn_fixtures.py");
Tensor fx(const std::string& name) { return kFixtures.get(name); }

// The parameters and buffers torch used, written as "<prefix>.sd.<key>".
nn::StateDict fx_state(const std::string& prefix) {
  const std::string p = prefix + ".sd.";
  nn::StateDict sd;
  for (const auto& [k, v] : kFixtures.all())
    if (k.rfind(p, 0) == 0) sd[k.substr(p.size())] = v;
  REQUIRE_MESSAGE(!sd.empty(), "no state_dict fixtures under " << p);
  return sd;
}

// nn_repr.txt: blocks "@@ name" followed by their lines.
const std::map<std::string, std::string>& reprs() {
  static const std::map<std::string, std::string> all = [] {
    const char* dir = std::getenv("KILN_FIXTURES");
    std::string path = std::string(dir ? dir : "tests/fixtures") + "/nn_repr.txt";
    std::ifstream in(path);
    KILN_CHECK(in.good(), "nn_repr", "cannot open ", path);
    std::map<std::string, std::string> out;
    std::string line, name;
    bool first = true;
    while (std::getline(in, line)) {
      if (line.rfind("@@ ", 0) == 0) {
        name = line.substr(3);
        out[name];
        first = true;
      } else if (!name.empty()) {
        if (!first) out[name] += "\n";
        out[name] += line;
        first = false;
      }
    }
    return out;
  }();
  return all;
}

std::string rx(const std::string& name) {
  auto it = reprs().find(name);
  if (it == reprs().end()) {
    FAIL("block '" << name << "' missing from nn_repr.txt; rerun make_nn_fixtures.py");
    return "";
  }
  return it->second;
}

std::vector<std::string> rx_lines(const std::string& name) {
  std::vector<std::string> out;
  std::istringstream in(rx(name));
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// ---------------------------------------------------------------- comparisons
using kiln::testing::Tol;
// check_matches(what, got, ref, tol) with a given tolerance, and below with the dtype's.
using kiln::testing::check_matches;
// Torch and Kiln compute the same formulas in the same precision with different BLAS
// kernels, math libraries and summation orders. float64: 1e-12 relative is a few
// thousand ulps. float32: 1e-5 relative is ~80 ulps, room for a Linear -> LayerNorm ->
// Linear chain where rounding differences compound, whatever the SIMD width. The absolute
// floors cover results near zero by cancellation, whose error is a few ulps of the O(1)
// terms: a LayerNorm output w * x_hat + b near 0, or torch's float32 GELU at x = -3,
// 0.5 x (1 + erf(x / sqrt 2)), which loses 1.8e-7 to 1 + erf ~ 0.003 (Kiln is closer to
// the exact value there). Any real bug is orders of magnitude larger.
constexpr Tol kTol64{1e-12, 1e-14};
constexpr Tol kTol32{1e-5, 1e-6};
Tol tol_for(DType t) { return t == kFloat64 ? kTol64 : kTol32; }

void check_matches(const std::string& what, const Tensor& got, const Tensor& ref) {
  kiln::testing::check_matches(what, got, ref, tol_for(ref.dtype()));
}

void check_fx(const Tensor& got, const std::string& name) { check_matches(name, got, fx(name)); }

// A fresh leaf with the values of t (for gradients of fixture inputs).
Tensor leaf_of(const Tensor& t) { return t.clone().detach().requires_grad_(); }

const std::vector<std::pair<std::string, DType>> kDtypes = {{"f64", kFloat64}, {"f32", kFloat32}};

// float64 gradcheck with the default tolerances (eps 1e-6, atol 1e-5, rtol 1e-3).
void check_grads(const std::string& what, const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  GradcheckOptions opts;
  opts.raise_exception = false;
  GradcheckResult r;
  std::string err = error_of([&] { r = gradcheck_result(f, inputs, opts); });
  CHECK_MESSAGE(err.empty(), what << ": " << err);
  CHECK_MESSAGE(r.ok, what << ": " << r.message);
}

// A module's gradients with respect to its input x and all its parameters (float64).
void check_module_grads(const std::string& what, nn::Module& m, const std::function<Tensor(const Tensor&)>& fwd,
                        const Tensor& x) {
  std::vector<Tensor> inputs{x};
  for (const Tensor& p : m.parameters()) {
    REQUIRE_MESSAGE(p.dtype() == kFloat64, what << ": parameter not float64");
    inputs.push_back(p);
  }
  check_grads(what, [&](const std::vector<Tensor>& in) { return fwd(in[0]); }, inputs);
}

std::vector<std::string> names_of(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, _] : list) out.push_back(n);
  return out;
}

// ---------------------------------------------------------------- statistics
struct Stats {
  double mean, std, min, max, max_abs;
};
Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double s = 0, mn = v[0], mx = v[0];
  for (double x : v) s += x, mn = std::min(mn, x), mx = std::max(mx, x);
  double mean = s / v.size(), ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return {mean, std::sqrt(ss / (v.size() - 1)), mn, mx, std::max(-mn, mx)};
}

// ---------------------------------------------------------------- a nested model
// Mirrors Block and Net of make_nn_fixtures.py.
struct Block : nn::UnaryModule {
  Block(int64_t d, int64_t hidden) : UnaryModule("Block"), d(d) {
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(d, 1e-6));
    linear1 = register_module("linear1", std::make_shared<nn::Linear>(d, hidden));
    act = register_module("act", std::make_shared<nn::GELU>());
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(0.1));
    linear2 = register_module("linear2", std::make_shared<nn::Linear>(hidden, d));
    scale = register_buffer("scale", arange(0, static_cast<double>(d), 1, kFloat32) * (1.0 / (d - 1)) + 0.5);
  }
  Tensor forward(const Tensor& x) override {
    return x + scale * (*linear2)((*dropout)((*act)((*linear1)((*norm)(x)))));
  }
  std::string extra_repr() const override { return "d_model=" + std::to_string(d); }

  int64_t d;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Linear> linear1, linear2;
  std::shared_ptr<nn::GELU> act;
  std::shared_ptr<nn::Dropout> dropout;
  Tensor scale;
};

struct Net : nn::Module {
  Net() : Module("Net") {
    embed = register_module("embed", std::make_shared<nn::Embedding>(10, 6, 0));
    layers = register_module("layers", std::make_shared<nn::ModuleList<Block>>());
    layers->push_back(std::make_shared<Block>(6, 12));
    layers->push_back(std::make_shared<Block>(6, 12));
    head = register_module("head", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
                                       std::make_shared<nn::LayerNorm>(6), std::make_shared<nn::Linear>(6, 10),
                                       std::make_shared<nn::LogSoftmax>(-1)}));
  }
  Tensor forward(const Tensor& idx) {
    Tensor x = (*embed)(idx);
    for (const auto& layer : *layers) x = (*layer)(x);
    return (*head)(x);
  }
  // A plain module's protected registration, exposed for the error tests.
  void add_param(const std::string& name) { register_parameter(name, zeros({1})); }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::ModuleList<Block>> layers;
  std::shared_ptr<nn::Sequential> head;
};

// One Linear under two names (make_nn_fixtures.py's Tied).
struct Tied : nn::Module {
  Tied() : Module("Tied") {
    auto lin = std::make_shared<nn::Linear>(3, 3);
    a = register_module("a", lin);
    c = register_module("c", std::make_shared<nn::Linear>(3, 2));
    b = register_module("b", lin);
  }
  std::shared_ptr<nn::Linear> a, b, c;
};

// An empty submodule slot (make_nn_fixtures.py's WithNone).
struct WithNone : nn::Module {
  WithNone() : Module("WithNone") {
    linear = register_module("linear", std::make_shared<nn::Linear>(2, 2));
    register_module<nn::Module>("norm", nullptr);
  }
  std::shared_ptr<nn::Linear> linear;
};

}  // namespace

// ================================================================ forward against torch
TEST_CASE("Linear matches torch for 1-D, 2-D and 3-D input, with and without bias, values and gradients") {
  for (const auto& [tag, dt] : kDtypes) {
    for (bool bias : {true, false}) {
      const std::string name = "linear." + tag + (bias ? "" : ".nobias");
      CAPTURE(name);
      auto m = std::make_shared<nn::Linear>(4, 5, bias);
      m->to(dt);
      m->load_state_dict(fx_state(name));
      CHECK(m->bias.defined() == bias);
      CHECK(m->named_parameters().size() == (bias ? 2u : 1u));
      for (int nd = 1; nd <= 3; ++nd) {
        const std::string n = std::to_string(nd);
        check_fx((*m)(fx(name + ".x" + n)), name + ".out" + n);
      }
      Tensor x = leaf_of(fx(name + ".x2"));
      (*m)(x).backward(fx(name + ".g"));
      check_fx(x.grad(), name + ".grad.x");
      check_fx(m->weight.grad(), name + ".grad.weight");
      if (bias) check_fx(m->bias.grad(), name + ".grad.bias");
    }
  }
}

TEST_CASE("linear: y = x Wᵀ + b for in_features = 0 (the bias, or zeros) and for strided input") {
  // linear writes the bias first and lets the GEMM accumulate onto it; an empty product
  // must leave exactly the bias.
  Tensor w0 = zeros({3, 0}), b = tensor({1.5, -2.0, 0.25}, kFloat32);
  CHECK(equal(linear(zeros({2, 0}), w0, b), stack({b, b})));
  CHECK(equal(linear(zeros({2, 0}), w0, Tensor()), zeros({2, 3})));
  // A transposed (non-contiguous) input against the composed formula.
  Generator g(11);
  Tensor x = randn({5, 4}, kFloat64, &g).t();  // (4, 5), strides (1, 4)
  Tensor w = randn({3, 5}, kFloat64, &g), bias = randn({3}, kFloat64, &g);
  CHECK(allclose(linear(x, w, bias), add(matmul(x, w.t()), bias), 1e-12, 1e-12));
  CHECK(allclose(linear(x, w, Tensor()), matmul(x, w.t()), 1e-12, 1e-12));
}

TEST_CASE("LayerNorm matches torch: 1-D and 2-D normalized_shape, no affine, eps; values and gradients") {
  for (const auto& [tag, dt] : kDtypes) {
    const std::string p = "ln." + tag + ".";
    std::vector<std::pair<std::string, std::shared_ptr<nn::LayerNorm>>> cases = {
        {"d1", std::make_shared<nn::LayerNorm>(6)},
        {"d2", std::make_shared<nn::LayerNorm>(Shape{3, 6})},
        {"noaffine", std::make_shared<nn::LayerNorm>(6, 1e-5, false)},
        {"eps", std::make_shared<nn::LayerNorm>(Shape{3, 6}, 0.25)},
    };
    for (auto& entry : cases) {
      auto& c = entry.first;
      auto& m = entry.second;
      CAPTURE(p + c);
      m->to(dt);
      if (m->elementwise_affine) {
        m->load_state_dict(fx_state(p + c));
      } else {
        CHECK(m->named_parameters().empty());
        CHECK(m->state_dict().empty());
        CHECK(!m->weight.defined());
      }
      Tensor x = leaf_of(fx(p + "x"));
      Tensor y = (*m)(x);
      check_fx(y, p + c + ".out");
      y.backward(fx(p + "g"));
      check_fx(x.grad(), p + c + ".grad.x");
      if (m->elementwise_affine) {
        check_fx(m->weight.grad(), p + c + ".grad.weight");
        check_fx(m->bias.grad(), p + c + ".grad.bias");
      }
    }
  }
  // Defaults as torch: weight ones, bias zeros.
  nn::LayerNorm ln(Shape{2, 3});
  CHECK(equal(ln.weight, ones({2, 3})));
  CHECK(equal(ln.bias, zeros({2, 3})));
  CHECK(ln.eps == 1e-5);
}

TEST_CASE("Embedding matches torch; the padding_idx row starts at zero and gets no gradient") {
  for (const auto& [tag, dt] : kDtypes) {
    const std::string p = "emb." + tag;
    auto m = std::make_shared<nn::Embedding>(7, 4, 2);
    m->to(dt);
    m->load_state_dict(fx_state(p));
    CHECK(fx_state(p).at("weight").select(0, 2).abs().sum().item() > 0);  // the row is read as it is
    Tensor y = (*m)(fx("emb.idx"));
    check_fx(y, p + ".out");
    y.backward(fx(p + ".g"));
    check_fx(m->weight.grad(), p + ".grad.weight");
    CHECK(equal(m->weight.grad().select(0, 2), zeros({4}, dt)));
    CHECK(m->weight.grad().select(0, 0).abs().sum().item() > 0);
  }
  manual_seed(11);
  nn::Embedding e(9, 5, 3);
  CHECK(equal(e.weight.select(0, 3), zeros({5})));
  for (int64_t r : {0, 1, 2, 4, 8}) CHECK(e.weight.select(0, r).abs().sum().item() > 0);
  nn::Embedding neg(9, 5, -2);  // counts from the end, as torch
  REQUIRE(neg.padding_idx.has_value());
  CHECK(*neg.padding_idx == 7);
  CHECK(equal(neg.weight.select(0, 7), zeros({5})));
  nn::Embedding none(9, 5);
  CHECK(!none.padding_idx.has_value());
}

TEST_CASE("Softmax, LogSoftmax, ReLU, GELU (exact and tanh) match torch") {
  for (const auto& [tag, dt] : kDtypes) {
    const std::string p = "act." + tag + ".";
    Tensor x = fx(p + "x");
    check_fx(nn::Softmax(-1)(x), p + "softmax.-1");
    check_fx(nn::Softmax(1)(x), p + "softmax.1");
    check_fx(nn::LogSoftmax(-1)(x), p + "log_softmax.-1");
    check_fx(nn::LogSoftmax(0)(x), p + "log_softmax.0");
    check_fx(nn::ReLU()(x), p + "relu");
    check_fx(nn::GELU()(x), p + "gelu");
    check_fx(nn::GELU("tanh")(x), p + "gelu_tanh");
    CHECK(equal(nn::Identity()(x), x));
  }
}

TEST_CASE("Sequential runs its modules in order, as torch (eval mode)") {
  for (const auto& entry : kDtypes) {
    const auto& tag = entry.first;
    const auto& dt = entry.second;
    CAPTURE(tag);
    nn::Sequential seq({std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::GELU>("tanh"),
                        std::make_shared<nn::LayerNorm>(8), std::make_shared<nn::Dropout>(0.25),
                        std::make_shared<nn::Linear>(8, 3, false), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Identity>()});
    seq.to(dt);
    seq.load_state_dict(fx_state("seq." + tag));
    seq.eval();
    Tensor x = fx("seq." + tag + ".x");
    check_fx(seq(x), "seq." + tag + ".out");
    CHECK(seq.size() == 7);
    CHECK(seq[4]->type_name() == "Linear");
    // In training mode the Dropout acts: the output is no longer torch's eval output.
    seq.train();
    manual_seed(1);
    CHECK(!allclose(seq(x), fx("seq." + tag + ".out")));
  }
}

TEST_CASE("nested model (Embedding, ModuleList of a custom block with a buffer, Sequential) matches torch") {
  auto net = std::make_shared<Net>();
  net->to(kFloat64);
  net->load_state_dict(fx_state("net.f64"));
  net->eval();
  Tensor idx = fx("net.idx");
  check_fx(net->forward(idx), "net.f64.out");
  // One training step's gradients: NLL with the class dim in the middle, (N, C, d1).
  Tensor loss = nll_loss(net->forward(idx).transpose(1, 2), fx("net.target"));
  check_fx(loss, "net.f64.loss");
  loss.backward();
  for (const auto& [n, p] : net->named_parameters()) check_fx(p.grad(), "net.f64.grad." + n);
  // The same weights rounded to float32, as torch's net.float().
  net->to(kFloat32);
  for (const auto& entry : net->state_dict()) {
    const auto& n = entry.first;
    const auto& t = entry.second;
    CHECK_MESSAGE(t.dtype() == kFloat32, n);
  }
  check_fx(net->forward(idx), "net.f32.out");
}

// ================================================================ Dropout
TEST_CASE("Dropout: identity in eval; in training zeroes ~p and scales survivors by 1/(1-p)") {
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    const int64_t n = 200000;
    Tensor x = ones({n}, dt);
    nn::Dropout d(0.3);
    d.eval();
    Tensor same = d(x);
    CHECK(equal(same, x));
    d.train();
    manual_seed(5);
    Tensor y = d(x);
    std::vector<double> v = y.to_vector<double>();
    int64_t zeros_n = 0, wrong = 0;
    const double scale = dt == kFloat32 ? static_cast<double>(static_cast<float>(1.0 / 0.7)) : 1.0 / 0.7;
    for (double e : v) {
      if (e == 0) ++zeros_n;
      else if (std::abs(e - scale) > 1e-15) ++wrong;
    }
    // The zero count is Binomial(n, 0.3): std sqrt(n p (1-p)) ~ 205, i.e. 0.001 of n.
    // 0.005 is five standard deviations.
    CHECK(std::abs(static_cast<double>(zeros_n) / n - 0.3) < 0.005);
    CHECK(wrong == 0);
    // The gradient is the same mask.
    Tensor xl = ones({n}, TensorOptions(dt).requires_grad());
    manual_seed(5);
    Tensor yl = d(xl);
    CHECK(equal(yl.detach(), y));
    yl.backward(ones({n}, dt));
    CHECK(equal(xl.grad(), y));
  }
}

TEST_CASE("Dropout: p = 0 and p = 1, the same seed gives the same mask") {
  Tensor x = randn({50, 40});
  nn::Dropout d0(0.0);
  CHECK(equal(d0(x), x));
  nn::Dropout d1(1.0);
  Tensor xl = leaf_of(x);
  Tensor y = d1(xl);
  CHECK(equal(y, zeros({50, 40})));
  y.backward(ones({50, 40}));
  CHECK(equal(xl.grad(), zeros({50, 40})));

  nn::Dropout d(0.5);
  manual_seed(42);
  Tensor a = d(x);
  Tensor b = d(x);  // the generator moved on: a new mask
  manual_seed(42);
  Tensor a2 = d(x);
  CHECK(equal(a, a2));
  CHECK(!equal(a, b));
  manual_seed(43);
  CHECK(!equal(d(x), a));
  // An explicit generator, as the functional form takes.
  Generator g1(7), g2(7);
  CHECK(equal(dropout(x, 0.5, true, &g1), dropout(x, 0.5, true, &g2)));
}

// ================================================================ losses against torch
TEST_CASE("CrossEntropyLoss, NLLLoss, MSELoss match torch: reductions, ignore_index, label_smoothing, layouts") {
  const std::vector<std::pair<std::string, Reduction>> reds = {
      {"none", Reduction::None}, {"mean", Reduction::Mean}, {"sum", Reduction::Sum}};
  Tensor t = fx("loss.t"), t2 = fx("loss.t2"), t3 = fx("loss.t3"), t1 = fx("loss.t1");
  for (const auto& [tag, dt] : kDtypes) {
    const std::string q = "loss." + tag + ".";
    Tensor x = fx(q + "x"), x3 = fx(q + "x3"), x1 = fx(q + "x1");
    Tensor lp = fx(q + "lp"), lp3 = fx(q + "lp3"), lp1 = fx(q + "lp1");
    Tensor ma = fx(q + "mse.a"), mb = fx(q + "mse.b");
    for (const auto& [rn, r] : reds) {
      const std::string p = q + rn + ".";
      check_fx(nn::CrossEntropyLoss(-100, 0.0, r)(x, t), p + "ce");
      check_fx(cross_entropy(x, t, -100, 0.0, r), p + "ce");
      check_fx(nn::CrossEntropyLoss(-100, 0.2, r)(x, t), p + "ce.ls");
      check_fx(nn::CrossEntropyLoss(2, 0.0, r)(x, t2), p + "ce.ign2");
      check_fx(nn::CrossEntropyLoss(2, 0.3, r)(x, t2), p + "ce.ign2ls");
      check_fx(nn::CrossEntropyLoss(-100, 0.0, r)(x3, t3), p + "ce.nd");
      check_fx(nn::CrossEntropyLoss(-100, 0.1, r)(x3, t3), p + "ce.ndls");
      check_fx(nn::CrossEntropyLoss(-100, 0.0, r)(x1, t1), p + "ce.1d");
      check_fx(nn::NLLLoss(-100, r)(lp, t), p + "nll");
      check_fx(nn::NLLLoss(2, r)(lp, t2), p + "nll.ign2");
      check_fx(nn::NLLLoss(-100, r)(lp3, t3), p + "nll.nd");
      check_fx(nn::NLLLoss(-100, r)(lp1, t1), p + "nll.1d");
      check_fx(nn::MSELoss(r)(ma, mb), p + "mse");
    }
    // Gradients of the mean losses with respect to their input.
    auto grad_of = [](const Tensor& in, const std::function<Tensor(const Tensor&)>& f) {
      Tensor v = leaf_of(in);
      f(v).backward();
      return v.grad();
    };
    check_fx(grad_of(x, [&](const Tensor& v) { return nn::CrossEntropyLoss(-100, 0.2)(v, t); }), q + "grad.ce.ls");
    check_fx(grad_of(x3, [&](const Tensor& v) { return nn::CrossEntropyLoss()(v, t3); }), q + "grad.ce.nd");
    check_fx(grad_of(lp, [&](const Tensor& v) { return nn::NLLLoss(2)(v, t2); }), q + "grad.nll.ign2");
    check_fx(grad_of(lp3, [&](const Tensor& v) { return nn::NLLLoss()(v, t3); }), q + "grad.nll.nd");
    check_fx(grad_of(ma, [&](const Tensor& v) { return nn::MSELoss()(v, mb); }), q + "grad.mse");
  }
  // Every target ignored: the mean is 0/0 = NaN, as torch.
  Tensor all_ignored = full({5}, -100, kInt64);
  check_fx(nn::CrossEntropyLoss()(fx("loss.f64.x"), all_ignored), "loss.f64.all_ignored.ce");
  check_fx(nn::NLLLoss()(fx("loss.f64.lp"), all_ignored), "loss.f64.all_ignored.nll");
  // The modules keep torch's defaults.
  nn::CrossEntropyLoss ce;
  CHECK(ce.ignore_index == -100);
  CHECK(ce.label_smoothing == 0.0);
  CHECK(ce.reduction == Reduction::Mean);
  CHECK(nn::NLLLoss().reduction == Reduction::Mean);
  CHECK(nn::MSELoss().reduction == Reduction::Mean);
}

TEST_CASE("CrossEntropyLoss with probability targets is refused with a clear error (class indices only)") {
  // torch accepts float targets as class probabilities; Kiln supports class indices only.
  std::string e = error_of([] { nn::CrossEntropyLoss()(randn({3, 4}), softmax(randn({3, 4}), 1)); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("int64") != std::string::npos);
  CHECK(e.find("float32") != std::string::npos);
}

// ================================================================ gradient checks (float64)
TEST_CASE("gradcheck: Linear w.r.t. input, weight and bias (1-D, 2-D, 3-D input; no bias)") {
  manual_seed(20);
  for (bool bias : {true, false}) {
    nn::Linear m(4, 3, bias);
    m.to(kFloat64);
    auto fwd = [&](const Tensor& x) { return m(x); };
    check_module_grads("Linear 1-D", m, fwd, testing::leaf64({4}, 1));
    check_module_grads("Linear 2-D", m, fwd, testing::leaf64({2, 4}, 2));
    check_module_grads("Linear 3-D", m, fwd, testing::leaf64({2, 2, 4}, 3));
    check_module_grads("Linear non-contiguous", m, fwd, testing::noncontiguous_leaf64({3, 4}, 4));
  }
}

TEST_CASE("gradcheck: LayerNorm w.r.t. input, weight and bias") {
  manual_seed(21);
  for (auto m : {std::make_shared<nn::LayerNorm>(5), std::make_shared<nn::LayerNorm>(Shape{2, 5}, 0.1),
                 std::make_shared<nn::LayerNorm>(5, 1e-5, false)}) {
    m->to(kFloat64);
    if (m->elementwise_affine) {
      NoGradGuard g;  // not ones/zeros, so that the parameter gradients are general
      m->weight.copy_(testing::leaf64(m->normalized_shape, 5).detach());
      m->bias.copy_(testing::leaf64(m->normalized_shape, 6).detach());
    }
    check_module_grads("LayerNorm " + m->extra_repr(), *m, [&](const Tensor& x) { return (*m)(x); },
                       testing::leaf64({3, 2, 5}, 7, 2.0));
  }
}

TEST_CASE("gradcheck: Embedding w.r.t. its weight (repeated indices accumulate)") {
  manual_seed(22);
  nn::Embedding m(6, 3);
  m.to(kFloat64);
  Tensor idx = from_vector<int64_t>({0, 5, 2, 2, 0, 5, 5, 1}, {2, 4});
  check_grads("Embedding", [&](const std::vector<Tensor>&) { return m(idx); }, {m.weight});
}

TEST_CASE("gradcheck: Softmax, LogSoftmax, ReLU, GELU, Dropout (fixed seed)") {
  Tensor x = testing::leaf64({3, 4, 5}, 8, 1.5);
  auto unary = [&](const std::string& what, nn::UnaryModule& m) {
    check_grads(what, [&](const std::vector<Tensor>& in) { return m(in[0]); }, {x});
  };
  nn::Softmax s0(0), s2(-1);
  nn::LogSoftmax l1(1), l2(-1);
  nn::ReLU relu;
  nn::GELU gelu, gelu_tanh("tanh");
  unary("Softmax(0)", s0);
  unary("Softmax(-1)", s2);
  unary("LogSoftmax(1)", l1);
  unary("LogSoftmax(-1)", l2);
  unary("ReLU", relu);
  unary("GELU", gelu);
  unary("GELU tanh", gelu_tanh);
  nn::Dropout d(0.4);
  // Every evaluation draws the same mask.
  check_grads("Dropout", [&](const std::vector<Tensor>& in) {
    manual_seed(9);
    return d(in[0]);
  }, {x});
}

TEST_CASE("gradcheck: Sequential and the nested model w.r.t. all parameters") {
  manual_seed(23);
  nn::Sequential seq({std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::GELU>("tanh"),
                      std::make_shared<nn::LayerNorm>(5), std::make_shared<nn::Linear>(5, 2)});
  seq.to(kFloat64);
  check_module_grads("Sequential", seq, [&](const Tensor& x) { return seq(x); }, testing::leaf64({4, 3}, 10));

  manual_seed(24);
  Net net;
  net.to(kFloat64);
  net.eval();
  Tensor idx = from_vector<int64_t>({1, 0, 4, 9, 7, 7}, {2, 3});
  Tensor target = from_vector<int64_t>({3, -100, 4, 0, 9, 1}, {2, 3});
  std::vector<Tensor> params = net.parameters();
  check_grads("Net (NLL loss)", [&](const std::vector<Tensor>&) {
    return nll_loss(net.forward(idx).transpose(1, 2), target);
  }, params);
}

TEST_CASE("gradcheck: CrossEntropyLoss, NLLLoss, MSELoss for every reduction") {
  Tensor x = testing::leaf64({5, 4}, 11, 2.0), x3 = testing::leaf64({2, 4, 3}, 12), x1 = testing::leaf64({4}, 13);
  Tensor t = from_vector<int64_t>({1, 0, -100, 3, 2}, {5});
  Tensor t2 = from_vector<int64_t>({1, 2, 2, 3, 0}, {5});
  Tensor t3 = from_vector<int64_t>({0, 3, 1, 2, -100, 3}, {2, 3});
  Tensor t1 = scalar_tensor(2, kInt64);
  Tensor a = testing::leaf64({3, 4}, 14), b = testing::leaf64({3, 4}, 15);
  for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    CAPTURE(static_cast<int>(r));
    auto ce = [&](const Tensor& in, const Tensor& tg, int64_t ii, double ls) {
      nn::CrossEntropyLoss loss(ii, ls, r);
      check_grads("CrossEntropyLoss", [&](const std::vector<Tensor>& v) { return loss(v[0], tg); }, {in});
    };
    ce(x, t, -100, 0.0);
    ce(x, t, -100, 0.2);
    ce(x, t2, 2, 0.3);
    ce(x3, t3, -100, 0.1);
    ce(x1, t1, -100, 0.0);
    auto nll = [&](const Tensor& in, const Tensor& tg, int64_t ii) {
      nn::NLLLoss loss(ii, r);
      check_grads("NLLLoss", [&](const std::vector<Tensor>& v) { return loss(v[0], tg); }, {in});
    };
    nll(x, t, -100);
    nll(x, t2, 2);
    nll(x3, t3, -100);
    nll(x1, t1, -100);
    nn::MSELoss mse(r);
    check_grads("MSELoss", [&](const std::vector<Tensor>& v) { return mse(v[0], v[1]); }, {a, b});
  }
}

// ================================================================ initialisation
TEST_CASE("Linear's default init is torch's: |w|, |b| <= 1/sqrt(in_features), uniform over the range") {
  manual_seed(30);
  nn::Linear m(300, 400);
  const double bound = fx("init.linear300.bound").item();
  Stats w = stats(m.weight), b = stats(m.bias);
  CHECK(w.max_abs <= bound);
  CHECK(b.max_abs <= bound);
  // 120000 uniform draws reach within 0.1% of the bound; torch's own layer does.
  CHECK(w.max_abs > 0.999 * bound);
  CHECK(fx("init.linear300.torch_max_abs_w").item() > 0.999 * bound);
  CHECK(b.max_abs > 0.9 * bound);  // 400 draws
  CHECK(w.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.01));
  CHECK(std::abs(w.mean) < 0.01 * bound);
  // Reproducible from the seed.
  manual_seed(30);
  nn::Linear again(300, 400);
  CHECK(equal(again.weight, m.weight));
  CHECK(equal(again.bias, m.bias));
  CHECK(!equal(nn::Linear(300, 400).weight, m.weight));
}

TEST_CASE("Embedding's default init is N(0, 1)") {
  manual_seed(31);
  nn::Embedding e(1000, 64);
  Stats s = stats(e.weight);
  // 64000 draws: the mean's std is 0.004, the std's relative std 0.003.
  CHECK(std::abs(s.mean) < 0.02);
  CHECK(s.std == doctest::Approx(1.0).epsilon(0.015));
  CHECK(s.max_abs > 3.5);  // tails exist (P(|z| > 3.5) * 64000 ~ 30)
}

TEST_CASE("SkipInitGuard and nn::skip_init: zeros instead of draws, the generator left alone, nested, per thread") {
  manual_seed(32);
  const Tensor drawn = nn::Linear(30, 40).weight;
  manual_seed(32);
  CHECK(!nn::init::is_init_skipped());
  {
    nn::init::SkipInitGuard skip;
    CHECK(nn::init::is_init_skipped());
    nn::Linear l(30, 40);
    CHECK(equal(l.weight, zeros({40, 30})));
    CHECK(equal(l.bias, zeros({40})));
    CHECK(equal(nn::Embedding(10, 4).weight, zeros({10, 4})));
    CHECK(equal(nn::init::xavier_normal_(empty({3, 5})), zeros({3, 5})));
    CHECK(equal(nn::LayerNorm(8).weight, ones({8})));  // constants are still set
    { nn::init::SkipInitGuard inner; }
    CHECK(nn::init::is_init_skipped());  // the inner guard restored, not cleared
    bool other_thread_skips = true;
    std::thread([&] { other_thread_skips = nn::init::is_init_skipped(); }).join();
    CHECK(!other_thread_skips);
  }
  CHECK(!nn::init::is_init_skipped());
  // nn::skip_init builds one module so, and draws nothing either.
  const auto blank = nn::skip_init<nn::Linear>(30, 40, false);
  CHECK(equal(blank->weight, zeros({40, 30})));
  CHECK(!blank->bias.defined());
  CHECK(!nn::init::is_init_skipped());
  // No draw was made under the guard: the next one is the first after the seed.
  CHECK(equal(nn::Linear(30, 40).weight, drawn));
}

TEST_CASE("init functions: fans, gains, bounds and stds as torch's; reproducible from manual_seed") {
  // Gains, from torch.nn.init.calculate_gain.
  CHECK(nn::init::calculate_gain("linear") == doctest::Approx(fx("init.gain.linear").item()));
  CHECK(nn::init::calculate_gain("sigmoid") == doctest::Approx(fx("init.gain.sigmoid").item()));
  CHECK(nn::init::calculate_gain("tanh") == doctest::Approx(fx("init.gain.tanh").item()));
  CHECK(nn::init::calculate_gain("relu") == doctest::Approx(fx("init.gain.relu").item()));
  CHECK(nn::init::calculate_gain("leaky_relu") == doctest::Approx(fx("init.gain.leaky_relu").item()));
  CHECK(nn::init::calculate_gain("leaky_relu", 0.3) == doctest::Approx(fx("init.gain.leaky_relu.0.3").item()));
  CHECK(nn::init::calculate_gain("selu") == doctest::Approx(fx("init.gain.selu").item()));

  for (const Shape& shape : {Shape{256, 1024}, Shape{64, 32, 3, 3}}) {
    std::string key;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) key += "x";
      key += std::to_string(shape[i]);
    }
    CAPTURE(key);
    const std::string p = "init." + key + ".";
    Tensor t = empty(shape);
    auto [fi, fo] = nn::init::fan_in_and_fan_out(t);
    CHECK(fi == fx(p + "fans").at({0}));
    CHECK(fo == fx(p + "fans").at({1}));
    // The relative precision of a std estimated from n draws is ~1/sqrt(2n): 0.14% for
    // 262144, 0.5% for 18432. The tolerances are about six of those.
    const double tol = t.numel() > 100000 ? 0.01 : 0.03;
    auto check_uniform = [&](const std::string& what, const Tensor& w, double bound) {
      Stats s = stats(w);
      CHECK_MESSAGE(s.max_abs <= bound, what);
      CHECK_MESSAGE(s.max_abs > (1 - tol) * bound, what);
      CHECK_MESSAGE(s.min < -(1 - tol) * bound, what);
      CHECK_MESSAGE(s.std == doctest::Approx(bound / std::sqrt(3.0)).epsilon(tol), what);
      CHECK_MESSAGE(std::abs(s.mean) < tol * bound, what);
    };
    auto check_normal = [&](const std::string& what, const Tensor& w, double std) {
      Stats s = stats(w);
      CHECK_MESSAGE(s.std == doctest::Approx(std).epsilon(tol), what);
      CHECK_MESSAGE(std::abs(s.mean) < tol * std, what);
      CHECK_MESSAGE(s.max_abs > 3 * std, what);  // a normal, not a clipped or uniform one
    };
    manual_seed(32);
    check_uniform("xavier_uniform_", nn::init::xavier_uniform_(empty(shape), nn::init::calculate_gain("tanh")),
                  fx(p + "xavier_uniform.bound").item());
    check_normal("xavier_normal_", nn::init::xavier_normal_(empty(shape), 0.5), fx(p + "xavier_normal.std").item());
    for (std::string mode : {"fan_in", "fan_out"}) {
      check_uniform("kaiming_uniform_ " + mode, nn::init::kaiming_uniform_(empty(shape), 0, mode, "relu"),
                    fx(p + "kaiming_uniform.relu." + mode + ".bound").item());
      check_normal("kaiming_normal_ " + mode, nn::init::kaiming_normal_(empty(shape), 0, mode, "relu"),
                   fx(p + "kaiming_normal.relu." + mode + ".std").item());
    }
    check_uniform("kaiming_uniform_ a=0.2", nn::init::kaiming_uniform_(empty(shape), 0.2),
                  fx(p + "kaiming_uniform.leaky0.2.bound").item());
    check_normal("kaiming_normal_ default", nn::init::kaiming_normal_(empty(shape)),
                 fx(p + "kaiming_normal.default.std").item());
  }

  Tensor u = nn::init::uniform_(empty({512, 512}, kFloat64), -2.0, 3.0);
  Stats su = stats(u);
  CHECK(su.min >= -2.0);
  CHECK(su.max < 3.0);
  CHECK(su.min < -1.99);
  CHECK(su.max > 2.99);
  CHECK(su.mean == doctest::Approx(0.5).epsilon(0.03));  // the mean's std is 0.0028
  CHECK(su.std == doctest::Approx(5.0 / std::sqrt(12.0)).epsilon(0.01));
  Stats sn = stats(nn::init::normal_(empty({512, 512}), 1.5, 0.5));
  CHECK(sn.mean == doctest::Approx(1.5).epsilon(0.005));  // the mean's std is 0.001
  CHECK(sn.std == doctest::Approx(0.5).epsilon(0.01));
  CHECK(equal(nn::init::constant_(empty({3, 4}), 0.25), full({3, 4}, 0.25)));
  CHECK(equal(nn::init::zeros_(randn({3, 4})), zeros({3, 4})));
  CHECK(equal(nn::init::ones_(randn({3, 4}, kFloat64)), ones({3, 4}, kFloat64)));

  // In place on a parameter that requires grad (without recording), handle returned.
  Tensor p = empty({8, 4}, TensorOptions().requires_grad());
  Tensor r = nn::init::xavier_normal_(p);
  CHECK(r.same_storage(p));
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());

  // Same seed, same numbers; the generator moves on otherwise.
  auto draw = [] {
    Tensor a = nn::init::kaiming_uniform_(empty({16, 8}));
    Tensor b = nn::init::normal_(empty({16, 8}));
    Tensor c = nn::init::xavier_uniform_(empty({16, 8}));
    return cat({a.flatten(), b.flatten(), c.flatten()});
  };
  manual_seed(77);
  Tensor first = draw();
  Tensor second = draw();
  manual_seed(77);
  CHECK(equal(draw(), first));
  CHECK(!equal(first, second));
}

// ================================================================ the Module base
TEST_CASE("named_parameters, named_buffers, named_modules, state_dict keys and counts are torch's") {
  Net net;
  std::vector<std::string> want_p, want_shapes;
  for (const std::string& line : rx_lines("net.named_parameters")) {
    want_p.push_back(line.substr(0, line.find(' ')));
    want_shapes.push_back(line.substr(line.find(' ') + 1));
  }
  nn::NamedTensors params = net.named_parameters();
  CHECK(names_of(params) == want_p);
  for (size_t i = 0; i < params.size() && i < want_shapes.size(); ++i)
    CHECK_MESSAGE(shape_str(params[i].second.shape()) == want_shapes[i], params[i].first);
  std::vector<std::string> want_b;
  for (const std::string& line : rx_lines("net.named_buffers")) want_b.push_back(line.substr(0, line.find(' ')));
  CHECK(names_of(net.named_buffers()) == want_b);
  std::vector<std::string> mods;
  for (const auto& [n, _] : net.named_modules()) mods.push_back(n);
  CHECK(mods == rx_lines("net.named_modules"));
  std::vector<std::string> sd_keys;
  for (const auto& [k, _] : net.state_dict()) sd_keys.push_back(k);
  std::vector<std::string> want_sd = rx_lines("net.state_dict");
  CHECK(std::set<std::string>(sd_keys.begin(), sd_keys.end()) == std::set<std::string>(want_sd.begin(), want_sd.end()));
  CHECK(sd_keys.size() == want_sd.size());
  CHECK(net.num_parameters() == std::stoll(rx("net.num_parameters")));
  CHECK(net.parameters().size() == want_p.size());
  CHECK(net.buffers().size() == want_b.size());

  // Not recursing: only the module's own.
  CHECK(net.named_parameters(false).empty());
  auto block0 = (*net.layers)[0];
  CHECK(block0->named_parameters(false).empty());
  CHECK(names_of(block0->named_buffers(false)) == std::vector<std::string>{"scale"});
  CHECK(names_of(block0->linear1->named_parameters(false)) == std::vector<std::string>{"weight", "bias"});
  CHECK(names_of(block0->named_parameters()).size() == 6);
  // Handles: what named_parameters gives is the module's own tensor.
  CHECK(params[0].second.impl() == net.embed->weight.impl());
}

TEST_CASE("a module registered under two names: its parameters listed once, every name in state_dict (as torch)") {
  Tied tied;
  std::vector<std::string> mods;
  for (const auto& [n, _] : tied.named_modules()) mods.push_back(n);
  CHECK(names_of(tied.named_parameters()) == rx_lines("tied.named_parameters"));
  CHECK(mods == rx_lines("tied.named_modules"));
  CHECK(tied.num_parameters() == std::stoll(rx("tied.num_parameters")));
  CHECK(tied.parameters().size() == 4);
  nn::StateDict sd = tied.state_dict();
  std::vector<std::string> want = rx_lines("tied.state_dict");
  std::set<std::string> keys;
  for (const auto& [k, _] : sd) keys.insert(k);
  CHECK(keys == std::set<std::string>(want.begin(), want.end()));
  // Loading writes the one tensor (both names carry the same values here).
  CHECK(tied.load_state_dict(sd).missing_keys.empty());
}

TEST_CASE("train() and eval() are recursive; zero_grad; apply visits children first") {
  Net net;
  auto modes = [&] {
    std::set<bool> s;
    for (const auto& [_, m] : net.named_modules()) s.insert(m->is_training());
    return s;
  };
  CHECK(modes() == std::set<bool>{true});
  net.eval();
  CHECK(modes() == std::set<bool>{false});
  net.train();
  CHECK(modes() == std::set<bool>{true});
  (*net.layers)[1]->eval();  // a subtree only
  CHECK(!(*net.layers)[1]->dropout->is_training());
  CHECK((*net.layers)[0]->dropout->is_training());
  CHECK(net.is_training());
  net.train(false);
  CHECK(modes() == std::set<bool>{false});

  Tensor idx = from_vector<int64_t>({1, 2, 3}, {1, 3});
  net.forward(idx).sum().backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad(false);
  for (const Tensor& p : net.parameters()) CHECK(equal(p.grad(), zeros_like(p)));
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());

  std::vector<std::string> order;
  net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  CHECK(order.size() == net.named_modules().size());
  REQUIRE(order.size() >= 3);
  CHECK(order.front() == "Embedding");  // the first leaf
  CHECK(order.back() == "Net");         // the root last
  // Re-initialising every Linear through apply.
  net.apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) nn::init::constant_(lin->weight, 0.5);
  });
  CHECK(equal((*net.layers)[1]->linear2->weight, full({6, 12}, 0.5)));
  CHECK(equal(std::static_pointer_cast<nn::Linear>((*net.head)[1])->weight, full({10, 6}, 0.5)));
}

TEST_CASE("num_parameters counts trainable ones on request; to(kFloat64) and back keeps handles and values") {
  manual_seed(40);
  Net net;
  const int64_t all = net.num_parameters();
  net.embed->weight.requires_grad_(false);
  CHECK(net.num_parameters(true) == all - 60);
  CHECK(net.num_parameters() == all);
  net.embed->weight.requires_grad_(true);

  nn::StateDict before;
  for (const auto& [k, v] : net.state_dict()) before[k] = v.clone();
  TensorImpl* weight_impl = net.embed->weight.impl();
  net.to(kFloat64);
  for (const auto& entry : net.named_parameters()) {
    const auto& n = entry.first;
    const auto& t = entry.second;
    CHECK_MESSAGE(t.dtype() == kFloat64, n);
    CHECK_MESSAGE(t.requires_grad(), n);
    CHECK_MESSAGE(t.is_leaf(), n);
  }
  for (const auto& entry : net.named_buffers()) {
    const auto& n = entry.first;
    const auto& t = entry.second;
    CHECK_MESSAGE(t.dtype() == kFloat64, n);
  }
  CHECK(net.embed->weight.impl() == weight_impl);  // the module's handles stay valid
  CHECK(net.embed->weight.dtype() == kFloat64);
  CHECK((*net.layers)[0]->scale.dtype() == kFloat64);
  // It computes in float64 now, gradients included.
  Tensor out = net.forward(from_vector<int64_t>({4, 5}, {2}));
  CHECK(out.dtype() == kFloat64);
  out.sum().backward();
  CHECK(net.embed->weight.grad().dtype() == kFloat64);
  net.to(kFloat32);
  for (const auto& kv : net.state_dict()) {
    const auto& k = kv.first;
    const auto& v = kv.second;
    CHECK_MESSAGE(v.dtype() == kFloat32, k);
    CHECK_MESSAGE(equal(v, before.at(k)), k);  // float32 -> float64 -> float32 is exact
  }
  CHECK(!net.embed->weight.grad().defined());  // a grad of the old dtype is dropped
}

TEST_CASE("state_dict shares storage; load_state_dict copies values and checks keys, shapes and dtypes") {
  manual_seed(41);
  Net a, b;
  nn::StateDict sa = a.state_dict();
  CHECK(sa.at("embed.weight").same_storage(a.embed->weight));
  CHECK(!sa.at("embed.weight").requires_grad());
  CHECK(!equal(a.embed->weight, b.embed->weight));
  nn::Module::LoadResult r = b.load_state_dict(sa);
  CHECK(r.missing_keys.empty());
  CHECK(r.unexpected_keys.empty());
  for (const auto& kv : b.state_dict()) {
    const auto& k = kv.first;
    const auto& v = kv.second;
    CHECK_MESSAGE(equal(v, sa.at(k)), k);
  }
  CHECK(!b.embed->weight.same_storage(a.embed->weight));  // copied, not aliased
  CHECK(b.embed->weight.requires_grad());
  // A non-contiguous source is copied by value.
  nn::StateDict strided = sa;
  strided["head.1.weight"] = sa.at("head.1.weight").t().contiguous().t();
  REQUIRE(!strided["head.1.weight"].is_contiguous());
  b.load_state_dict(strided);
  CHECK(equal(b.state_dict().at("head.1.weight"), sa.at("head.1.weight")));

  // Strict: every missing and unexpected key is named.
  nn::StateDict bad = sa;
  bad.erase("head.1.bias");
  bad.erase("layers.0.scale");
  bad["layers.2.norm.weight"] = ones({6});
  bad["extra"] = ones({1});
  Tensor w_before = b.head->named_parameters()[0].second.clone();
  std::string e = error_of([&] { b.load_state_dict(bad); });
  CHECK(e.find("[load_state_dict]") == 0);
  CHECK(e.find("Net") != std::string::npos);
  for (const char* k : {"head.1.bias", "layers.0.scale", "layers.2.norm.weight", "extra"})
    CHECK_MESSAGE(e.find(std::string("\"") + k + "\"") != std::string::npos, k << " not in: " << e);
  CHECK(e.find("missing") < e.find("\"head.1.bias\""));
  CHECK(e.find("unexpected") < e.find("\"extra\""));
  // Non-strict: returns them, loads the rest.
  {
    NoGradGuard g;
    b.embed->weight.zero_();
  }
  r = b.load_state_dict(bad, false);
  std::set<std::string> missing(r.missing_keys.begin(), r.missing_keys.end());
  std::set<std::string> unexpected(r.unexpected_keys.begin(), r.unexpected_keys.end());
  CHECK(missing == std::set<std::string>{"head.1.bias", "layers.0.scale"});
  CHECK(unexpected == std::set<std::string>{"extra", "layers.2.norm.weight"});
  CHECK(equal(b.embed->weight, sa.at("embed.weight")));

  // A shape mismatch names the key and both shapes, strict or not, and loads nothing.
  nn::StateDict wrong = sa;
  wrong["layers.1.linear1.weight"] = zeros({6, 12});
  {
    NoGradGuard g;
    b.embed->weight.zero_();
  }
  for (bool strict : {true, false}) {
    e = error_of([&] { b.load_state_dict(wrong, strict); });
    CHECK(e.find("[load_state_dict]") == 0);
    CHECK(e.find("layers.1.linear1.weight") != std::string::npos);
    CHECK(e.find("(6, 12)") != std::string::npos);
    CHECK(e.find("(12, 6)") != std::string::npos);
  }
  CHECK(equal(b.embed->weight, zeros({10, 6})));  // never half-loaded
  // Another floating dtype is converted on load, as torch's copy_ (not refused; the
  // conversion itself is tested with the module ergonomics, below).
  wrong = sa;
  wrong["head.0.bias"] = zeros({6}, kFloat64);
  CHECK(error_of([&] { b.check_state_dict(wrong); }).empty());
  // check_state_dict runs the same checks without copying.
  CHECK(!error_of([&] { b.check_state_dict(bad); }).empty());
  CHECK(b.check_state_dict(bad, false).missing_keys.size() == 2);
  CHECK(equal(b.embed->weight, zeros({10, 6})));
}

TEST_CASE("printing a model gives exactly torch's str(model)") {
  Net net;
  CHECK(net.str() == rx("net.str"));
  std::ostringstream os;
  os << net;
  CHECK(os.str() == rx("net.str"));

  auto inner = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Embedding>(5, 3), std::make_shared<nn::LayerNorm>(Shape{2, 3}, 1e-12, false)});
  nn::Sequential seq({std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::Dropout>(0.1), std::make_shared<nn::LayerNorm>(8),
                      std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Linear>(8, 3, false),
                      std::make_shared<nn::Softmax>(-1), std::make_shared<nn::LogSoftmax>(1),
                      std::make_shared<nn::Identity>()});
  seq.push_back(inner);
  CHECK(seq.str() == rx("seq.str"));

  WithNone with_none;
  CHECK(with_none.str() == rx("with_none.str"));
  CHECK(with_none.named_modules().size() == 2);  // the empty slot is no module
  CHECK(names_of(with_none.named_parameters()) == std::vector<std::string>{"linear.weight", "linear.bias"});

  std::vector<std::string> leaves = {
      nn::Embedding(10, 6, -1).str(), nn::Dropout(0.0).str(), nn::Dropout(1.0).str(), nn::Dropout(1e-3).str(),
      nn::GELU().str(), nn::LayerNorm(4, 0.1).str(), nn::Sequential().str(), nn::ModuleList<>().str(),
      nn::CrossEntropyLoss().str(), nn::CrossEntropyLoss(3, 0.1).str(), nn::NLLLoss().str(),
      nn::MSELoss(Reduction::Sum).str()};
  std::vector<std::string> want = rx_lines("leaves.str");
  REQUIRE(leaves.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(leaves[i] == want[i]);
}

TEST_CASE("ModuleList and Sequential: indexing, iteration, names") {
  nn::ModuleList<nn::Linear> list;
  CHECK(list.empty());
  list.push_back(std::make_shared<nn::Linear>(2, 3));
  list.push_back(std::make_shared<nn::Linear>(3, 4, false));
  CHECK(list.size() == 2);
  CHECK(list[1]->out_features == 4);
  int64_t n = 0;
  for (const auto& m : list) n += m->in_features;
  CHECK(n == 5);
  CHECK(names_of(list.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "1.weight"});
  std::string e = error_of([&] { (void)list[2]; });
  CHECK(e.find("[ModuleList]") == 0);
  CHECK(e.find("2") != std::string::npos);

  nn::Sequential seq;
  seq.push_back(std::make_shared<nn::Embedding>(5, 4));  // Embedding can open a Sequential
  seq.push_back(std::make_shared<nn::Linear>(4, 2));
  CHECK(seq(from_vector<int64_t>({0, 4, 1}, {3})).shape() == Shape{3, 2});
  e = error_of([&] { seq[5]; });
  CHECK(e.find("[Sequential]") == 0);
  CHECK(e.find("5") != std::string::npos);
  CHECK(error_of([&] { seq.push_back(nullptr); }).find("[Sequential]") == 0);
}

// ================================================================ bad input
TEST_CASE("bad input to the layers: errors name the op and what was given") {
  nn::Linear lin(4, 5);
  std::string e = error_of([&] { lin(ones({3, 3})); });
  CHECK(e.find("[Linear]") == 0);
  CHECK(e.find("4") != std::string::npos);
  CHECK(e.find("(3, 3)") != std::string::npos);
  e = error_of([&] { lin(ones({})); });
  CHECK(e.find("[Linear]") == 0);
  CHECK(e.find("()") != std::string::npos);
  e = error_of([&] { lin(ones({2, 4}, kFloat64)); });
  CHECK(e.find("[Linear]") == 0);
  CHECK(e.find("float64") != std::string::npos);
  CHECK(e.find("float32") != std::string::npos);
  e = error_of([&] { lin(ones({2, 4}, kInt64)); });
  CHECK(e.find("[Linear]") == 0);
  CHECK(e.find("int64") != std::string::npos);
  CHECK(error_of([] { nn::Linear(-1, 3); }).find("[Linear]") == 0);

  nn::LayerNorm ln(6);
  e = error_of([&] { ln(ones({2, 5})); });
  CHECK(e.find("[layer_norm]") == 0);
  CHECK(e.find("(2, 5)") != std::string::npos);
  CHECK(e.find("(6,)") != std::string::npos);
  e = error_of([&] { nn::LayerNorm(Shape{3, 6})(ones({2, 6, 3})); });
  CHECK(e.find("(2, 6, 3)") != std::string::npos);
  CHECK(e.find("(3, 6)") != std::string::npos);
  e = error_of([&] { ln(ones({2, 6}, kFloat64)); });
  CHECK(e.find("[layer_norm]") == 0);
  CHECK(e.find("float64") != std::string::npos);
  e = error_of([&] { ln(ones({2, 6}, kInt64)); });
  CHECK(e.find("[layer_norm]") == 0);
  CHECK(e.find("int64") != std::string::npos);

  nn::Embedding emb(7, 4);
  e = error_of([&] { emb(from_vector<int64_t>({1, 7}, {2})); });
  CHECK(e.find("[embedding]") == 0);
  CHECK(e.find("index 7") != std::string::npos);
  CHECK(e.find("7 rows") != std::string::npos);
  e = error_of([&] { emb(from_vector<int64_t>({-1}, {1})); });
  CHECK(e.find("index -1") != std::string::npos);
  e = error_of([&] { emb(ones({2})); });
  CHECK(e.find("[embedding]") == 0);
  CHECK(e.find("float32") != std::string::npos);
  e = error_of([] { nn::Embedding(7, 4, 7); });
  CHECK(e.find("[Embedding]") == 0);
  CHECK(e.find("padding_idx 7") != std::string::npos);
  CHECK(error_of([] { nn::Embedding(7, 4, -8); }).find("padding_idx -8") != std::string::npos);

  e = error_of([] { nn::Dropout(1.5); });
  CHECK(e.find("[Dropout]") == 0);
  CHECK(e.find("1.5") != std::string::npos);
  CHECK(error_of([] { nn::Dropout(-0.1); }).find("-0.1") != std::string::npos);
  e = error_of([] { nn::GELU("fast"); });
  CHECK(e.find("[GELU]") == 0);
  CHECK(e.find("'fast'") != std::string::npos);
  e = error_of([] { nn::Softmax(2)(ones({3, 4})); });
  CHECK(e.find("[softmax]") == 0);
  CHECK(e.find("dim 2") != std::string::npos);
  e = error_of([] { nn::Dropout(0.5)(ones({3}, kInt64)); });
  CHECK(e.find("[dropout]") == 0);
  CHECK(e.find("int64") != std::string::npos);
}

TEST_CASE("bad input to the losses: dtypes, target shapes, class indices") {
  Tensor x = randn({3, 4});
  Tensor t = from_vector<int64_t>({0, 3, 1}, {3});
  std::string e = error_of([&] { nn::CrossEntropyLoss()(x, t.to(kFloat32)); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("float32") != std::string::npos);
  e = error_of([&] { nn::CrossEntropyLoss()(ones({3, 4}, kInt64), t); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("int64") != std::string::npos);
  e = error_of([&] { nn::CrossEntropyLoss()(x, from_vector<int64_t>({0, 1}, {2})); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("(3,)") != std::string::npos);
  CHECK(e.find("(2,)") != std::string::npos);
  CHECK(e.find("(3, 4)") != std::string::npos);
  e = error_of([&] { nn::CrossEntropyLoss()(x, from_vector<int64_t>({0, 4, 1}, {3})); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("target 4") != std::string::npos);
  CHECK(e.find("4 classes") != std::string::npos);
  e = error_of([&] { nn::CrossEntropyLoss()(ones({3, 0}), t); });
  CHECK(e.find("[cross_entropy]") == 0);
  CHECK(e.find("no classes") != std::string::npos);
  e = error_of([] { nn::CrossEntropyLoss(-100, 1.5); });
  CHECK(e.find("[CrossEntropyLoss]") == 0);
  CHECK(e.find("1.5") != std::string::npos);

  Tensor lp = log_softmax(x, 1);
  e = error_of([&] { nn::NLLLoss()(lp, t.to(kFloat64)); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("float64") != std::string::npos);
  e = error_of([&] { nn::NLLLoss()(ones({3, 4}, kInt64), t); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("int64") != std::string::npos);
  e = error_of([&] { nn::NLLLoss()(lp, from_vector<int64_t>({0, 1, 2, 3}, {2, 2})); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("(2, 2)") != std::string::npos);
  e = error_of([&] { nn::NLLLoss()(lp, from_vector<int64_t>({0, -1, 1}, {3})); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("target -1") != std::string::npos);
  e = error_of([&] { nn::NLLLoss()(ones({3, 0}), t); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("no classes") != std::string::npos);
  e = error_of([&] { nn::NLLLoss()(ones({}), scalar_tensor(0, kInt64)); });
  CHECK(e.find("[nll_loss]") == 0);
  CHECK(e.find("()") != std::string::npos);

  e = error_of([&] { nn::MSELoss()(x, ones({4, 3})); });
  CHECK(e.find("[mse_loss]") == 0);
  CHECK(e.find("(3, 4)") != std::string::npos);
  CHECK(e.find("(4, 3)") != std::string::npos);
  e = error_of([&] { nn::MSELoss()(ones({2}, kInt64), ones({2}, kInt64)); });
  CHECK(e.find("[mse_loss]") == 0);
  CHECK(e.find("int64") != std::string::npos);
  CHECK(error_of([] { reduction_from_string("avg"); }).find("'avg'") != std::string::npos);
}

TEST_CASE("bad input to Module and init: names, dtypes, fans, modes") {
  Net net;
  std::string e = error_of([&] { net.add_param("embed"); });
  CHECK(e.find("[register]") == 0);
  CHECK(e.find("'embed'") != std::string::npos);
  CHECK(e.find("Net") != std::string::npos);
  e = error_of([&] { net.add_param("a.b"); });
  CHECK(e.find("'a.b'") != std::string::npos);
  CHECK(!error_of([&] { net.add_param(""); }).empty());
  net.add_param("extra");  // a fresh name is fine
  CHECK(net.named_parameters(false).size() == 1);
  e = error_of([&] { net.to(kInt64); });
  CHECK(e.find("[Module.to]") == 0);
  CHECK(e.find("int64") != std::string::npos);

  e = error_of([] { nn::init::xavier_uniform_(empty({5})); });
  CHECK(e.find("[init]") == 0);
  CHECK(e.find("(5,)") != std::string::npos);
  e = error_of([] { nn::init::kaiming_normal_(empty({3, 4}), 0, "fan_avg"); });
  CHECK(e.find("[kaiming]") == 0);
  CHECK(e.find("'fan_avg'") != std::string::npos);
  e = error_of([] { nn::init::calculate_gain("swish"); });
  CHECK(e.find("[calculate_gain]") == 0);
  CHECK(e.find("'swish'") != std::string::npos);
  e = error_of([] { nn::init::normal_(empty({3}, kInt64)); });
  CHECK(e.find("int64") != std::string::npos);
}

// A multilayer perceptron learns XOR to 100% (as examples/xor does), for
// several seeds, in float32 and float64.
TEST_CASE("an MLP learns XOR to 100% accuracy") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (uint64_t seed : {0, 1, 2}) {
      manual_seed(seed);
      Tensor x = tensor({{0, 0}, {0, 1}, {1, 0}, {1, 1}}, dt);
      Tensor y = from_vector<int64_t>({0, 1, 1, 0}, {4});
      auto model = std::make_shared<nn::Sequential>();
      model->push_back(std::make_shared<nn::Linear>(2, 8));
      model->push_back(std::make_shared<nn::ReLU>());
      model->push_back(std::make_shared<nn::Linear>(8, 2));
      model->to(dt);
      optim::AdamOptions o;
      o.lr = 0.05;
      optim::Adam opt(model->parameters(), o);
      nn::CrossEntropyLoss loss_fn;
      double first = 0, last = 0;
      for (int epoch = 0; epoch < 500; ++epoch) {
        Tensor loss = loss_fn(model->forward(x), y);
        if (epoch == 0) first = loss.item();
        last = loss.item();
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
      CAPTURE(seed);
      CHECK(last < 0.05 * first);
      NoGradGuard no_grad;
      CHECK(equal(argmax(model->forward(x), 1), y));
    }
  }
}

// ================================================================ module ergonomics, the Transformer package

namespace {

// The references of the module ergonomics and Transformer package cases (fx above reads
// nn_modules.txt's).
const std::map<std::string, Tensor>& modules_fixtures() {
  static const std::map<std::string, Tensor> all = testing::load_fixtures("modules_api.txt");
  return all;
}

Tensor modules_fx(const std::string& name) {
  auto it = modules_fixtures().find(name);
  if (it == modules_fixtures().end()) FAIL("modules_api.txt has no tensor " << name);
  return it->second;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

bool all_finite(const Tensor& t) {
  for (double v : t.to(kFloat64).to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// Two modules hold equal values under the same names, in separate tensors.
void check_deep_copy(const nn::Module& original, const nn::Module& copy) {
  nn::StateDict a = original.state_dict(), b = copy.state_dict();
  REQUIRE(a.size() == b.size());
  for (const auto& entry : a) {
    const auto& name = entry.first;
    const auto& t = entry.second;
    REQUIRE_MESSAGE(b.count(name), name);
    const Tensor& c = b.at(name);
    CHECK_MESSAGE(equal(t, c), name);
    CHECK_MESSAGE(t.dtype() == c.dtype(), name);
    CHECK_MESSAGE(!t.same_storage(c), name << " shares storage with the original");
  }
}

}  // namespace

// ======================================================================= user modules
namespace user {

struct MyNet : nn::Module {
  MyNet() {
    fc = register_module("fc", std::make_shared<nn::Linear>(2, 3));
    scale = register_buffer("scale", ones({3}));
  }
  Tensor forward(const Tensor& x) { return mul(fc->forward(x), scale); }
  std::shared_ptr<nn::Linear> fc;
  Tensor scale;
};

struct Named : nn::Module {
  Named() : nn::Module("CustomName") {}
};

template <int N>
struct Block : nn::Module {};

// A forward with two tensors and a default: Cloneable gives net(a, b) and clone().
struct Mixer : nn::Cloneable<Mixer> {
  Mixer() {
    left = register_module("left", std::make_shared<nn::Linear>(3, 4));
    right = register_module("right", std::make_shared<nn::Linear>(3, 4, false));
    shared = register_module("shared", std::make_shared<nn::LayerNorm>(4));
    register_module("shared_again", shared);  // one module under two names
    frozen = register_parameter("frozen", full({4}, 0.5), /*requires_grad=*/false);
    steps = register_buffer("steps", zeros({1}, TensorOptions(kInt64)));
  }
  Tensor forward(const Tensor& a, const Tensor& b, double mix = 1.0) {
    return shared->forward(add(left->forward(a), mul(right->forward(b), mix))) + frozen;
  }
  std::shared_ptr<nn::Linear> left, right;
  std::shared_ptr<nn::LayerNorm> shared;
  Tensor frozen, steps;
};

// No default constructor: clone() needs make_fresh().
struct Sized : nn::Cloneable<Sized> {
  explicit Sized(int64_t d) : d(d) { lin = register_module("lin", std::make_shared<nn::Linear>(d, d)); }
  Tensor forward(const Tensor& x) { return lin->forward(x); }
  int64_t d;
  std::shared_ptr<nn::Linear> lin;
};

struct SizedWithFresh : Sized {
  using Sized::Sized;
  std::shared_ptr<nn::Module> make_fresh() const override { return std::make_shared<SizedWithFresh>(d); }
};

}  // namespace user

TEST_CASE("a user module needs no type name: it prints its class name; a given name still wins") {
  user::MyNet net;
  CHECK(net.type_name() == "MyNet");
  CHECK(starts_with(net.str(), "MyNet(\n  (fc): Linear(in_features=2, out_features=3, bias=True)\n)"));
  CHECK(user::Named().type_name() == "CustomName");
  CHECK(user::Block<3>().type_name() == "Block<3>");
  // Looked up when asked, so a name used inside the derived constructor is the derived one.
  struct Twice : nn::Module {
    Twice() {
      register_buffer("b", zeros({1}));
      register_buffer("b", zeros({1}));
    }
  };
  std::string e = error_of([] { Twice t; });
  CHECK(e == "[register] 'b' is already registered in Twice");
  // Strict loading names the class in its message.
  user::MyNet other;
  nn::StateDict sd = other.state_dict();
  sd.erase("scale");
  CHECK(starts_with(error_of([&] { net.load_state_dict(sd); }),
                    "[load_state_dict] Error(s) in loading state_dict for MyNet: missing keys: \"scale\""));
}

TEST_CASE("Sequential from a braced list and from the modules themselves, as torch::nn::Sequential") {
  manual_seed(3);
  auto l1 = std::make_shared<nn::Linear>(4, 8);
  auto l2 = std::make_shared<nn::Linear>(8, 2);
  nn::Sequential listed({l1, std::make_shared<nn::ReLU>(), l2});
  nn::Sequential variadic(l1, std::make_shared<nn::ReLU>(), l2);
  nn::Sequential single(std::make_shared<nn::Linear>(4, 4));
  CHECK(listed.size() == 3);
  CHECK(variadic.size() == 3);
  CHECK(single.size() == 1);
  CHECK(listed[0] == l1);
  CHECK(variadic[2] == l2);
  Tensor x = randn({5, 4});
  Tensor want = l2->forward(relu(l1->forward(x)));
  CHECK(equal(listed(x), want));
  CHECK(equal(variadic.forward(x), want));
  auto names = variadic.named_parameters();
  REQUIRE(names.size() == 4);
  CHECK(names[0].first == "0.weight");
  CHECK(names[3].first == "2.bias");
}

TEST_CASE("module(args…) calls forward whatever its arguments") {
  manual_seed(4);
  user::Mixer mixer;
  Tensor a = randn({2, 3}), b = randn({2, 3});
  CHECK(equal(mixer(a, b), mixer.forward(a, b)));
  CHECK(equal(mixer(a, b, 0.5), mixer.forward(a, b, 0.5)));
  CHECK_FALSE(equal(mixer(a, b, 0.5), mixer(a, b)));

  // The Transformer's modules.
  tr::MultiheadAttention mha(8, 2);
  Tensor q = randn({3, 2, 8});
  tr::AttentionOutput o1 = mha(q, q, q), o2 = mha.forward(q, q, q);
  CHECK(equal(o1.output, o2.output));
  CHECK(equal(o1.weights, o2.weights));
  tr::TransformerLayerOptions lo;
  lo.d_model = 8, lo.nhead = 2, lo.dim_feedforward = 16, lo.dropout = 0.0;
  tr::TransformerEncoderLayer layer(lo);
  CHECK(equal(layer(q), layer.forward(q)));
  tr::SinusoidalPositionalEncoding pe(8, 0.0, 10);
  CHECK(pe.dropout->p == 0.0);  // a public member, as in LearnedPositionalEncoding
  Tensor x = randn({2, 3, 8});
  CHECK(equal(pe(x, 2), pe.forward(x, 2)));
  CHECK(equal(pe(x), pe.forward(x, 0)));
  // A UnaryModule as before.
  nn::Linear lin(3, 2);
  CHECK(equal(lin(a), lin.forward(a)));
}

TEST_CASE("clone() of a built-in module: new tensors, same values, flags and gradients") {
  manual_seed(5);
  auto lin = std::make_shared<nn::Linear>(3, 2);
  lin->bias.requires_grad_(false);
  Tensor x = randn({4, 3});
  sum(lin->forward(x)).backward();
  lin->eval();
  std::shared_ptr<nn::Module> copy = lin->clone();
  auto* c = dynamic_cast<nn::Linear*>(copy.get());
  REQUIRE(c != nullptr);
  check_deep_copy(*lin, *c);
  CHECK(c->weight.requires_grad());
  CHECK_FALSE(c->bias.requires_grad());
  CHECK_FALSE(c->is_training());
  REQUIRE(c->weight.grad().defined());
  CHECK(equal(c->weight.grad(), lin->weight.grad()));
  CHECK_FALSE(c->weight.grad().same_storage(lin->weight.grad()));
  // The members follow the registered tensors: the copy computes with its own weights.
  {
    NoGradGuard g;
    c->weight.fill_(0.25);
  }
  CHECK_FALSE(equal(lin->weight, c->weight));
  CHECK(equal(c->forward(x), linear(x, full({2, 3}, 0.25), c->bias)));
  // float64 stays float64.
  nn::LayerNorm ln(4);
  ln.to(kFloat64);
  auto ln2 = std::dynamic_pointer_cast<nn::LayerNorm>(ln.clone());
  REQUIRE(ln2);
  CHECK(ln2->weight.dtype() == kFloat64);
  CHECK(ln2->eps == ln.eps);
}

TEST_CASE("clone() of the activations SiLU, Softplus, Tanh, Sigmoid keeps their configuration") {
  nn::Sequential seq(std::make_shared<nn::SiLU>(), std::make_shared<nn::Softplus>(2.0, 10.0),
                     std::make_shared<nn::Tanh>(), std::make_shared<nn::Sigmoid>());
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(seq.clone());
  REQUIRE(copy);
  auto sp = std::dynamic_pointer_cast<nn::Softplus>((*copy)[1]);
  REQUIRE(sp);
  CHECK(sp->beta == 2.0);
  CHECK(sp->threshold == 10.0);
  Tensor x = randn({2, 3});
  CHECK(equal(copy->forward(x), seq.forward(x)));
}

TEST_CASE("clone() leaves the random generator where it was (as deepcopy draws nothing)") {
  manual_seed(6);
  nn::Linear big(64, 64);
  GeneratorState before = default_generator().get_state();
  auto copy = big.clone();
  GeneratorState after = default_generator().get_state();
  CHECK(before.seed == after.seed);
  CHECK(before.offset == after.offset);
}

TEST_CASE("clone() of a user module: Cloneable's one line; shared submodules stay shared once") {
  manual_seed(7);
  user::Mixer m;
  {
    NoGradGuard g;
    m.steps.fill_(3);
  }
  m.right->eval();
  std::shared_ptr<user::Mixer> c = m.clone();
  check_deep_copy(m, *c);
  CHECK(c->shared != m.shared);
  CHECK(c->named_children()[3].second == c->shared);  // "shared_again" is the same module in the copy
  CHECK(c->steps.dtype() == kInt64);
  CHECK(c->steps.item() == 3);
  CHECK_FALSE(c->frozen.requires_grad());
  CHECK(c->is_training());
  CHECK(c->left->is_training());
  CHECK_FALSE(c->right->is_training());
  Tensor a = randn({2, 3}), b = randn({2, 3});
  CHECK(equal((*c)(a, b, 0.3), m(a, b, 0.3)));

  // A Sequential holding one module twice: one clone, listed twice.
  auto relu = std::make_shared<nn::ReLU>();
  nn::Sequential seq({std::make_shared<nn::Linear>(3, 3), relu, std::make_shared<nn::Linear>(3, 3), relu});
  auto seq2 = std::dynamic_pointer_cast<nn::Sequential>(seq.clone());
  REQUIRE(seq2);
  CHECK((*seq2)[1] == (*seq2)[3]);
  CHECK((*seq2)[1] != relu);
  CHECK(equal(seq2->forward(a), seq.forward(a)));

  // Without a default constructor: make_fresh() says how to build one.
  user::SizedWithFresh s(3);
  auto s2 = s.clone();
  check_deep_copy(s, *s2);
  CHECK(dynamic_cast<user::SizedWithFresh*>(s2.get()) != nullptr);
}

TEST_CASE("clone() of a module whose constructor clones one layer several times keeps the copies apart") {
  // The constructor's own layer->clone() calls, made while the outer clone() runs, are
  // deep copies as anywhere else: the memo that keeps a shared submodule shared applies
  // to the original's children only.
  struct Stack : nn::Cloneable<Stack> {
    std::shared_ptr<transformer::TransformerEncoder> enc;
    Stack() {
      transformer::TransformerLayerOptions o;
      o.d_model = 8, o.nhead = 2, o.dim_feedforward = 16, o.dropout = 0.0;
      enc = register_module("enc", std::make_shared<transformer::TransformerEncoder>(
                                       std::make_shared<transformer::TransformerEncoderLayer>(o), 3));
    }
  };
  manual_seed(10);
  Stack s;
  {
    NoGradGuard g;
    for (size_t i = 0; i < 3; ++i) (*s.enc->layers)[i]->linear1->bias.fill_(static_cast<double>(i));
  }
  std::shared_ptr<Stack> c = s.clone();
  CHECK((*c->enc->layers)[0] != (*c->enc->layers)[1]);
  CHECK((*c->enc->layers)[1] != (*c->enc->layers)[2]);
  CHECK(c->parameters().size() == s.parameters().size());
  check_deep_copy(s, *c);
}

TEST_CASE("clone() of a module that cannot say how to build itself is an error saying what to do") {
  user::MyNet plain;
  CHECK(error_of([&] { plain.clone(); }) ==
        "[Module.clone] MyNet cannot be cloned: derive it from nn::Cloneable<MyNet> (which default-constructs it) "
        "or override make_fresh() to build one with the same configuration");
  user::Sized sized(2);
  CHECK(starts_with(error_of([&] { sized.clone(); }), "[Module.clone] Sized cannot be cloned"));
  // A make_fresh that builds another layout is caught by name.
  struct Liar : nn::Cloneable<Liar> {
    explicit Liar(int64_t n = 2) { register_parameter("w", zeros({n})); }
    std::shared_ptr<nn::Module> make_fresh() const override {
      auto m = std::make_shared<Liar>(2);
      m->register_buffer("extra", zeros({1}));
      return m;
    }
  };
  Liar liar(3);
  CHECK(error_of([&] { liar.clone(); }) ==
        "[Module.clone] make_fresh() of Liar built buffers [extra], the original has []");
}

// ================================================================ the Transformer package
namespace {

tr::TransformerLayerOptions small_layer() {
  tr::TransformerLayerOptions o;
  o.d_model = 8;
  o.nhead = 2;
  o.dim_feedforward = 16;
  o.dropout = 0.0;
  o.batch_first = true;
  return o;
}

}  // namespace

TEST_CASE("TransformerEncoder(layer, num_layers, norm) deep-copies the layer, as nn.TransformerEncoder") {
  manual_seed(8);
  auto layer = std::make_shared<tr::TransformerEncoderLayer>(small_layer());
  auto norm = std::make_shared<nn::LayerNorm>(8);
  tr::TransformerEncoder enc(layer, 3, norm);
  REQUIRE(enc.layers->size() == 3);
  CHECK(enc.norm == norm);  // used as given
  for (const auto& l : *enc.layers) {
    CHECK(l != layer);
    check_deep_copy(*layer, *l);  // identical initial weights, own tensors
  }
  check_deep_copy(*(*enc.layers)[0], *(*enc.layers)[2]);
  nn::StateDict sd = enc.state_dict();
  CHECK(sd.count("layers.2.self_attn.in_proj_weight"));
  CHECK(sd.count("layers.0.linear2.bias"));
  CHECK(sd.count("norm.weight"));
  Tensor x = randn({2, 5, 8});
  Tensor want = norm->forward((*enc.layers)[2]->forward((*enc.layers)[1]->forward(layer->forward(x))));
  check_matches("encoder of copies", enc(x), want, Tol{1e-6, 1e-6});
  // Without a norm; the options constructor still works.
  tr::TransformerEncoder bare(layer, 2);
  CHECK(bare.norm == nullptr);
  CHECK_FALSE(bare.state_dict().count("norm.weight"));
  tr::TransformerEncoder built(small_layer(), 2, true);
  CHECK(built.layers->size() == 2);
  CHECK(built.state_dict().count("norm.bias"));
  CHECK(error_of([&] { tr::TransformerEncoder(layer, -1); }) ==
        "[TransformerEncoder] num_layers must be non-negative, got -1");
  CHECK(error_of([&] { tr::TransformerEncoder(std::shared_ptr<tr::TransformerEncoderLayer>(), 2); }) ==
        "[TransformerEncoder] encoder_layer must not be null");
}

TEST_CASE("TransformerDecoder(layer, num_layers, norm) deep-copies the layer, as nn.TransformerDecoder") {
  manual_seed(9);
  auto layer = std::make_shared<tr::TransformerDecoderLayer>(small_layer());
  tr::TransformerDecoder dec(layer, 2, std::make_shared<nn::LayerNorm>(8));
  REQUIRE(dec.layers->size() == 2);
  for (const auto& l : *dec.layers) check_deep_copy(*layer, *l);
  CHECK(dec.state_dict().count("layers.1.multihead_attn.out_proj.weight"));
  Tensor t = randn({2, 4, 8}), mem = randn({2, 5, 8});
  Tensor want = dec.norm->forward(layer->forward(layer->forward(t, mem), mem));
  check_matches("decoder of copies", dec(t, mem), want, Tol{1e-6, 1e-6});
  CHECK(error_of([&] { tr::TransformerDecoder(std::shared_ptr<tr::TransformerDecoderLayer>(), 2); }) ==
        "[TransformerDecoder] decoder_layer must not be null");
  // The whole nn.Transformer clones too, custom parts included.
  tr::TransformerOptions o;
  o.d_model = 8, o.nhead = 2, o.dim_feedforward = 16, o.dropout = 0.0, o.batch_first = true;
  o.num_encoder_layers = 1;
  o.custom_decoder = std::make_shared<tr::TransformerDecoder>(layer, 1);
  tr::Transformer model(o);
  auto copy = model.clone();
  check_deep_copy(model, *copy);
  Tensor src = randn({2, 5, 8});
  check_matches("cloned Transformer", (*copy)(src, t), model(src, t), Tol{0, 0});
}

namespace {

tr::Seq2SeqOptions seed_like(int64_t vocab) {
  tr::Seq2SeqOptions o;
  o.src_vocab_size = vocab;
  o.tgt_vocab_size = vocab;
  o.d_model = 16;
  o.nhead = 4;
  o.num_encoder_layers = 2;
  o.num_decoder_layers = 2;
  o.dim_feedforward = 32;
  o.dropout = 0.1;
  o.max_len = 20;
  // Seeds 002/004: no sqrt(d_model) on the embeddings, no final norms.
  o.scale_embedding = false;
  o.final_norms = false;
  return o;
}

}  // namespace

TEST_CASE("Seq2SeqTransformer expresses seeds 002/004: embeddings unscaled, no final norms") {
  manual_seed(10);
  tr::Seq2SeqTransformer seed(seed_like(12));
  tr::Seq2SeqOptions paper_opts = seed_like(12);
  paper_opts.scale_embedding = true;
  paper_opts.final_norms = true;
  tr::Seq2SeqTransformer paper(paper_opts);
  nn::StateDict s = seed.state_dict(), p = paper.state_dict();
  CHECK_FALSE(s.count("transformer.encoder.norm.weight"));
  CHECK_FALSE(s.count("transformer.decoder.norm.weight"));
  CHECK(p.count("transformer.encoder.norm.weight"));
  CHECK(p.count("transformer.decoder.norm.bias"));
  CHECK(seed.transformer->encoder->norm == nullptr);
  CHECK(s.size() + 4 == p.size());

  seed.eval();
  Tensor src = from_vector<int64_t>({3, 4, 5, 0, 6, 7, 8, 9}, {2, 4});
  // encode = the encoder's layers over embedding + PE, nothing scaled, nothing after.
  Tensor x = seed.positional_encoding->forward(seed.src_embedding->forward(src));
  Tensor kpm = tr::key_padding_mask(src, 0);
  Tensor want = x;
  for (const auto& l : *seed.transformer->encoder->layers) want = l->forward(want, Tensor(), kpm);
  check_matches("unscaled encode", seed.encode(src), want, Tol{1e-6, 1e-6});
  // The paper's model scales by sqrt(16) = 4 and ends with a norm.
  paper.load_state_dict(p);
  paper.eval();
  Tensor xp = paper.positional_encoding->forward(mul(paper.src_embedding->forward(src), 4.0));
  Tensor wp = xp;
  for (const auto& l : *paper.transformer->encoder->layers) wp = l->forward(wp, Tensor(), kpm);
  check_matches("scaled encode", paper.encode(src), paper.transformer->encoder->norm->forward(wp), Tol{1e-6, 1e-6});

  // The model clones (options, structure and values).
  auto copy = seed.clone();
  check_deep_copy(seed, *copy);
  Tensor tgt = from_vector<int64_t>({1, 3, 4, 1, 5, 0}, {2, 3});
  check_matches("cloned seq2seq", (*copy)(src, tgt), seed(src, tgt), Tol{0, 0});
}

TEST_CASE("the positional table is computed in the module's dtype: float64 is not a widened float32 table") {
  const Tensor want64 = modules_fx("pe.f64"), want32 = modules_fx("pe.f32");  // (60, 16) from the seeds' formula
  tr::SinusoidalPositionalEncoding pe(16, 0.0, 60);
  CHECK(pe.pe.dtype() == kFloat32);
  check_matches("float32 table", pe.pe, want32, Tol{0, 2e-6});
  pe.to(kFloat64);
  REQUIRE(pe.pe.dtype() == kFloat64);
  check_matches("float64 table after to(kFloat64)", pe.pe, want64, Tol{0, 1e-13});
  // What the test rules out: the float32 table widened is off by more than 1e-9 somewhere.
  CHECK_FALSE(allclose(want32.to(kFloat64), want64, 0.0, 1e-9));
  check_matches("sinusoidal_table(…, kFloat64)", tr::sinusoidal_table(60, 16, kFloat64), want64, Tol{0, 1e-13});
  // And back, and through a whole model's to().
  pe.to(kFloat32);
  check_matches("float32 again", pe.pe, want32, Tol{0, 2e-6});
  tr::Seq2SeqOptions o = seed_like(10);
  o.d_model = 16;
  o.max_len = 60;
  tr::Seq2SeqTransformer model(o);
  model.to(kFloat64);
  const auto& table = dynamic_cast<tr::SinusoidalPositionalEncoding&>(*model.positional_encoding).pe;
  check_matches("model.to(kFloat64) table", table, want64, Tol{0, 1e-13});
  // Added to float64 embeddings exactly: x + PE in float64.
  Tensor x = zeros({1, 5, 16}, TensorOptions(kFloat64));
  model.eval();
  check_matches("PE added in float64", model.positional_encoding->forward(x), want64.narrow(0, 0, 5).unsqueeze(0),
                Tol{0, 1e-13});
  CHECK(error_of([] { tr::sinusoidal_table(4, 4, kInt64); }) == "[sinusoidal_table] dtype must be floating, got int64");
}

TEST_CASE("the warm-up schedule: LambdaLR's step indexing (default) and the paper's, on the first updates") {
  const std::vector<double> lambda_lr = modules_fx("noam.lambda_lr").to_vector<double>();
  const std::vector<double> paper = modules_fx("noam.paper").to_vector<double>();
  for (auto indexing : {optim::WarmupStepIndexing::LambdaLR, optim::WarmupStepIndexing::Paper}) {
    const bool is_paper = indexing == optim::WarmupStepIndexing::Paper;
    CAPTURE(is_paper);
    Tensor p = zeros({1}, TensorOptions().requires_grad());
    optim::Adam adam({p}, optim::AdamOptions{});
    optim::WarmupInverseSqrtLR sched(adam, 16, 4, 2.0, indexing);
    const std::vector<double>& want = is_paper ? paper : lambda_lr;
    for (size_t k = 0; k < want.size(); ++k) {
      // The lr update k + 1 uses.
      CHECK_MESSAGE(std::abs(adam.param_groups().front().get("lr") - want[k]) <= 1e-15 * want[k], "update " << k + 1);
      p.set_grad(ones({1}));
      adam.step();
      sched.step();
    }
  }
  // The paper's indexing peaks at update warmup_steps, LambdaLR's one update later.
  CHECK(paper[3] == doctest::Approx(2.0 / 4.0 / 2.0));
  CHECK(lambda_lr[4] == doctest::Approx(paper[3]));
}

// ================================================================ no silent NaN
TEST_CASE("attention: a query that may attend to nothing gives zeros, as current PyTorch (fused and unfused)") {
  const Tensor masked = modules_fx("attn.masked");  // (2, 4, 5), true = may not attend
  for (std::string dt : {"f64", "f32"}) {
    CAPTURE(dt);
    const Tol tol = dt == "f64" ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-6};
    const std::string p = "attn." + dt + ".";
    Tensor q = modules_fx(p + "q"), k = modules_fx(p + "k"), v = modules_fx(p + "v");
    tr::AttentionOutput unfused = tr::attention(q, k, v, masked);
    check_matches(p + "out (unfused)", unfused.output, modules_fx(p + "out"), tol);
    check_matches(p + "weights (unfused)", unfused.weights, modules_fx(p + "weights"), tol);
    Tensor fused = scaled_dot_product_attention(q, k, v, logical_not(masked));
    check_matches(p + "out (fused)", fused, modules_fx(p + "out"), tol);
    // A float mask of -inf says the same.
    Tensor additive = masked_fill(zeros(masked.shape(), TensorOptions(q.dtype())), masked, -INFINITY);
    check_matches(p + "out (fused, float mask)", scaled_dot_product_attention(q, k, v, additive),
                  modules_fx(p + "out"), tol);

    // Backward: finite, and zero for the dead queries (batch 0 row 1, batch 1 row 3).
    for (bool use_fused : {true, false}) {
      CAPTURE(use_fused);
      Tensor ql = q.detach().requires_grad_(), kl = k.detach().requires_grad_(), vl = v.detach().requires_grad_();
      Tensor out = use_fused ? scaled_dot_product_attention(ql, kl, vl, logical_not(masked))
                             : tr::attention(ql, kl, vl, masked).output;
      sum(mul(out, out)).backward();
      CHECK(all_finite(ql.grad()));
      CHECK(all_finite(kl.grad()));
      CHECK(all_finite(vl.grad()));
      CHECK(equal(ql.grad().select(0, 0).select(0, 1), zeros({6}, TensorOptions(q.dtype()))));
      CHECK(equal(ql.grad().select(0, 1).select(0, 3), zeros({6}, TensorOptions(q.dtype()))));
      CHECK_FALSE(equal(ql.grad().select(0, 0).select(0, 0), zeros({6}, TensorOptions(q.dtype()))));
    }
  }
}

TEST_CASE("gradcheck: the unfused attention with a fully masked query (float64)") {
  const Tensor masked = modules_fx("attn.masked");
  Tensor q = modules_fx("attn.f64.q").detach().requires_grad_(), k = modules_fx("attn.f64.k").detach().requires_grad_(),
         v = modules_fx("attn.f64.v").detach().requires_grad_();
  using V = const std::vector<Tensor>&;
  CHECK(gradcheck([&](V x) { return tr::attention(x[0], x[1], x[2], masked).output; }, {q, k, v}));
  CHECK(gradcheck([&](V x) { return tr::attention(x[0], x[1], x[2], masked).weights; }, {q, k, v}));
  // Non-contiguous query.
  Tensor qt = modules_fx("attn.f64.q").transpose(0, 1).contiguous().transpose(0, 1).detach().requires_grad_();
  REQUIRE_FALSE(qt.is_contiguous());
  CHECK(gradcheck([&](V x) { return tr::attention(x[0], x[1], x[2], masked).output; }, {qt, k, v}));
}

TEST_CASE("MultiheadAttention: every key padded gives finite, equal outputs with and without weights") {
  manual_seed(11);
  tr::MultiheadAttentionOptions mo;
  mo.batch_first = true;
  tr::MultiheadAttention mha(8, 2, mo);
  mha.eval();
  Tensor q = randn({2, 3, 8}), kv = randn({2, 4, 8});
  // Batch 0 may attend to no key at all; batch 1 to the first two.
  Tensor kpm = from_vector<bool>({1, 1, 1, 1, 0, 0, 1, 1}, {2, 4});
  tr::AttentionOutput with = mha(q, kv, kv, kpm, /*need_weights=*/true);
  tr::AttentionOutput without = mha(q, kv, kv, kpm, /*need_weights=*/false);
  CHECK(all_finite(with.output));
  CHECK(all_finite(with.weights));
  check_matches("fused vs unfused", without.output, with.output, Tol{1e-5, 1e-6});
  CHECK(equal(with.weights.select(0, 0), zeros({3, 4})));
  // The dead batch's output is out_proj of zeros: its bias (zero-initialised, as torch).
  check_matches("dead rows = out_proj(0)", with.output.select(0, 0), mha.out_proj->bias.expand({3, 8}), Tol{0, 0});
}

TEST_CASE("seed 004's first inference call model(src, [[0]]) with pad index 0 gives finite logits") {
  manual_seed(12);
  tr::Seq2SeqTransformer model(seed_like(12));
  model.eval();
  // As in seed 004: src starts with the pad id, the target is the single pad token, so
  // every key the decoder's self-attention could see is padding.
  Tensor src = from_vector<int64_t>({0, 2, 5, 6, 4, 3, 9, 5, 2, 9, 10, 1}, {1, 12});
  Tensor tgt = from_vector<int64_t>({0}, {1, 1});
  Tensor logits = model(src, tgt);
  CHECK(logits.shape() == Shape({1, 1, 12}));
  CHECK(all_finite(logits));
  // In training mode too, with a finite gradient everywhere.
  model.train();
  Tensor loss = sum(model(src, tgt));
  loss.backward();
  CHECK(std::isfinite(loss.item()));
  for (const auto& entry : model.named_parameters()) {
    const auto& name = entry.first;
    const auto& prm = entry.second;
    if (prm.grad().defined()) CHECK_MESSAGE(all_finite(prm.grad()), name);
  }
}

// ================================================================ state dicts and trainer
TEST_CASE("load_state_dict converts dtypes as torch's copy_: a float64 state into a float32 model") {
  nn::Linear lin(4, 3);
  nn::StateDict sd{{"weight", modules_fx("sd.weight.f64")}, {"bias", modules_fx("sd.bias.f64")}};
  Tensor handle = lin.weight;
  lin.load_state_dict(sd);
  CHECK(lin.weight.dtype() == kFloat32);
  CHECK(lin.weight.impl() == handle.impl());  // loaded in place
  check_matches("weight", lin.weight, modules_fx("sd.weight.loaded"), Tol{0, 0});
  check_matches("bias", lin.bias, modules_fx("sd.bias.loaded"), Tol{0, 0});
  // float32 into a float64 model: widened exactly.
  nn::Linear lin64(4, 3);
  lin64.to(kFloat64);
  lin64.load_state_dict(lin.state_dict());
  CHECK(lin64.weight.dtype() == kFloat64);
  check_matches("widened", lin64.weight, modules_fx("sd.weight.loaded").to(kFloat64), Tol{0, 0});
  // Through a safetensors file.
  nn::Linear lin_f(4, 3);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_nn_sd_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_state_dict(path, lin64);
  io::load_state_dict(path, lin_f);
  std::filesystem::remove(path);
  check_matches("from a float64 file", lin_f.weight, modules_fx("sd.weight.loaded"), Tol{0, 0});

  // Still refused: a wrong shape, and floating values into an integer buffer.
  nn::StateDict bad = sd;
  bad["weight"] = zeros({3, 5}, TensorOptions(kFloat64));
  CHECK(error_of([&] { lin.load_state_dict(bad); }) ==
        "[load_state_dict] size mismatch for weight: copying a param with shape (3, 5) from checkpoint, the shape "
        "in current model is (3, 4)");
  user::Mixer m;
  nn::StateDict ms = m.state_dict();
  ms["steps"] = full({1}, 2.5);
  CHECK(error_of([&] { m.load_state_dict(ms); }) ==
        "[load_state_dict] dtype mismatch for steps: checkpoint has float32, the model has int64 (floating values "
        "do not convert to an integer or bool tensor)");
  // Integers into an integer buffer of another width are fine; nothing was half-loaded.
  CHECK(m.steps.item() == 0);
}

TEST_CASE("Trainer: train_step(source, target) without a DataLoader, and the last gradient norm") {
  manual_seed(13);
  tr::Seq2SeqOptions mo = seed_like(12);
  mo.dropout = 0.0;
  tr::Seq2SeqTransformer model(mo);
  tr::TrainerOptions to;
  to.progress = false;
  to.warmup_steps = 4;
  to.clip_grad_norm = 1e9;  // computes the norm, clips nothing
  to.warmup_indexing = optim::WarmupStepIndexing::Paper;
  tr::Trainer trainer(model, to);
  CHECK(std::isnan(trainer.last_grad_norm()));
  // Paper indexing: the first update uses step 1.
  const double lr1 = trainer.optimizer().param_groups().front().get("lr");
  CHECK(lr1 == doctest::Approx(std::pow(16.0, -0.5) * 1.0 * std::pow(4.0, -1.5)));
  Tensor src = from_vector<int64_t>({3, 4, 5, 0, 6, 7, 8, 9}, {2, 4});
  Tensor tgt = from_vector<int64_t>({1, 5, 6, 2, 1, 7, 2, 0}, {2, 4});
  double loss0 = trainer.train_step(src, tgt);
  CHECK(std::isfinite(loss0));
  CHECK(trainer.global_step() == 1);
  // The norm of the gradients the step used (still in .grad(): no zero_grad after a step).
  double sq = 0;
  for (const Tensor& p : model.parameters())
    if (p.grad().defined()) sq += sum(mul(p.grad(), p.grad())).item();
  CHECK(trainer.last_grad_norm() > 0);
  CHECK(trainer.last_grad_norm() == doctest::Approx(std::sqrt(sq)).epsilon(1e-5));
  CHECK(trainer.optimizer().param_groups().front().get("lr") ==
        doctest::Approx(std::pow(16.0, -0.5) * 2.0 * std::pow(4.0, -1.5)));
  for (int i = 0; i < 20; ++i) trainer.train_step(src, tgt);
  CHECK(trainer.step_losses().back() < loss0);
  CHECK(error_of([&] { trainer.fit(); }) ==
        "[Trainer::fit] this trainer has no training DataLoader: build it with one, or call train_step(source, "
        "target)");
  CHECK(starts_with(error_of([&] { trainer.train_step(src, from_vector<int64_t>({1, 2}, {2, 1})); }),
                    "[teacher_forcing_pair] targets must be (batch, length >= 2)"));
}
