// Module ergonomics and the Transformer package (issue 12, items 5-8):
//   - a user module prints its class name without a type string; Sequential from a braced
//     list or from the modules; module(args…) for any forward; clone() as a deep copy;
//   - TransformerEncoder/Decoder from a layer module (deep copies, as _get_clones); the
//     seq2seq model's embedding scale and final norms; the positional table in float64;
//     the warm-up schedule's two step indexings (against torch's LambdaLR);
//   - a query that may attend to nothing gives zeros, not NaN (fused and unfused,
//     forward and backward; seed 004's first inference call);
//   - load_state_dict converts dtypes as torch's copy_; the trainer's gradient norm and
//     train_step without a DataLoader.
// Reference numbers: tests/fixtures/make_modules_api_fixtures.py (PyTorch 1.13).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;
using kiln::testing::check_matches;
using kiln::testing::error_of;
using kiln::testing::Tol;

namespace {

const std::map<std::string, Tensor>& fixtures() {
  static const std::map<std::string, Tensor> all = testing::load_fixtures("modules_api.txt");
  return all;
}

Tensor fx(const std::string& name) {
  auto it = fixtures().find(name);
  if (it == fixtures().end()) FAIL("modules_api.txt has no tensor " << name);
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
  const Tensor want64 = fx("pe.f64"), want32 = fx("pe.f32");  // (60, 16) from the seeds' formula
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
  const std::vector<double> lambda_lr = fx("noam.lambda_lr").to_vector<double>();
  const std::vector<double> paper = fx("noam.paper").to_vector<double>();
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
  const Tensor masked = fx("attn.masked");  // (2, 4, 5), true = may not attend
  for (std::string dt : {"f64", "f32"}) {
    CAPTURE(dt);
    const Tol tol = dt == "f64" ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-6};
    const std::string p = "attn." + dt + ".";
    Tensor q = fx(p + "q"), k = fx(p + "k"), v = fx(p + "v");
    tr::AttentionOutput unfused = tr::attention(q, k, v, masked);
    check_matches(p + "out (unfused)", unfused.output, fx(p + "out"), tol);
    check_matches(p + "weights (unfused)", unfused.weights, fx(p + "weights"), tol);
    Tensor fused = scaled_dot_product_attention(q, k, v, logical_not(masked));
    check_matches(p + "out (fused)", fused, fx(p + "out"), tol);
    // A float mask of -inf says the same.
    Tensor additive = masked_fill(zeros(masked.shape(), TensorOptions(q.dtype())), masked, -INFINITY);
    check_matches(p + "out (fused, float mask)", scaled_dot_product_attention(q, k, v, additive), fx(p + "out"), tol);

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
  const Tensor masked = fx("attn.masked");
  Tensor q = fx("attn.f64.q").detach().requires_grad_(), k = fx("attn.f64.k").detach().requires_grad_(),
         v = fx("attn.f64.v").detach().requires_grad_();
  using V = const std::vector<Tensor>&;
  CHECK(gradcheck([&](V x) { return tr::attention(x[0], x[1], x[2], masked).output; }, {q, k, v}));
  CHECK(gradcheck([&](V x) { return tr::attention(x[0], x[1], x[2], masked).weights; }, {q, k, v}));
  // Non-contiguous query.
  Tensor qt = fx("attn.f64.q").transpose(0, 1).contiguous().transpose(0, 1).detach().requires_grad_();
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
  nn::StateDict sd{{"weight", fx("sd.weight.f64")}, {"bias", fx("sd.bias.f64")}};
  Tensor handle = lin.weight;
  lin.load_state_dict(sd);
  CHECK(lin.weight.dtype() == kFloat32);
  CHECK(lin.weight.impl() == handle.impl());  // loaded in place
  check_matches("weight", lin.weight, fx("sd.weight.loaded"), Tol{0, 0});
  check_matches("bias", lin.bias, fx("sd.bias.loaded"), Tol{0, 0});
  // float32 into a float64 model: widened exactly.
  nn::Linear lin64(4, 3);
  lin64.to(kFloat64);
  lin64.load_state_dict(lin.state_dict());
  CHECK(lin64.weight.dtype() == kFloat64);
  check_matches("widened", lin64.weight, fx("sd.weight.loaded").to(kFloat64), Tol{0, 0});
  // Through a safetensors file.
  nn::Linear lin_f(4, 3);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_h5_sd_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_state_dict(path, lin64);
  io::load_state_dict(path, lin_f);
  std::filesystem::remove(path);
  check_matches("from a float64 file", lin_f.weight, fx("sd.weight.loaded"), Tol{0, 0});

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
