// Activation checkpointing (autograd/activation_checkpoint.h) and the saved-tensor hooks it is built on
// (autograd/saved_hooks.h): a checkpointed function gives the outputs and gradients of the
// plain one bit for bit (dropout's masks too), holds less after the forward pass, runs
// twice and no more, nests, works under autocast and with retain_graph, and refuses a
// second run that differs from the first and inputs changed in place.
#include <doctest/doctest.h>

#include <any>
#include <memory>
#include <optional>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
using kiln::testing::error_of;
namespace tr = kiln::transformer;

namespace {

int64_t allocated() { return memory_stats().allocated_bytes; }

// A block with a bit of everything that saves tensors: linear, layer norm, relu_dropout,
// dropout, exp, a product of two activations. x (rows, 16) -> (rows, 16).
struct Block {
  Tensor w1, b1, w2, ln_w, ln_b;
  explicit Block(DType dtype) {
    Generator g(3);
    TensorOptions o(dtype);
    w1 = (randn({32, 16}, o, &g) * 0.2).requires_grad_();
    b1 = (randn({32}, o, &g) * 0.1).requires_grad_();
    w2 = (randn({16, 32}, o, &g) * 0.2).requires_grad_();
    ln_w = (randn({16}, o, &g) * 0.1 + 1.0).requires_grad_();
    ln_b = (randn({16}, o, &g) * 0.1).requires_grad_();
  }
  std::vector<Tensor> params() const { return {w1, b1, w2, ln_w, ln_b}; }
  Tensor forward(const Tensor& x) const {
    Tensor h = relu_dropout(linear(layer_norm(x, {16}, ln_w, ln_b), w1, b1), 0.2);
    Tensor y = linear(h, w2);
    return dropout(y * exp(y * 0.1), 0.1) + x;
  }
};

std::vector<std::vector<double>> grads_of(const std::vector<Tensor>& leaves) {
  std::vector<std::vector<double>> g;
  for (const Tensor& t : leaves) g.push_back(t.grad().to_vector<double>());
  return g;
}

struct Run {
  std::vector<double> out;
  std::vector<std::vector<double>> grads;
  int64_t held_after_forward = 0;
  uint64_t rng_offset_after = 0;
  int calls = 0;  // of the block's forward
};

// Three blocks in a row, each checkpointed or not, on the same input and random stream.
Run run_blocks(DType dtype, bool checkpointed, bool autocast = false) {
  manual_seed(11);
  Block blocks[] = {Block(dtype), Block(dtype), Block(dtype)};
  Tensor x = randn({64, 16}, TensorOptions(dtype)).requires_grad_();
  Run r;
  const int64_t before = allocated();
  Tensor out;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(kBFloat16);
    Tensor h = x;
    for (const Block& b : blocks) {
      auto f = [&b, &r](const Tensor& in) {
        ++r.calls;
        return b.forward(in);
      };
      h = checkpointed ? utils::checkpoint(f, h) : f(h);
    }
    out = h.sum();
  }
  r.held_after_forward = allocated() - before;
  out.backward();
  r.out = out.to_vector<double>();
  std::vector<Tensor> leaves = {x};
  for (const Block& b : blocks)
    for (const Tensor& p : b.params()) leaves.push_back(p);
  r.grads = grads_of(leaves);
  r.rng_offset_after = default_generator().get_state().offset;
  return r;
}

}  // namespace

TEST_CASE("checkpoint: the plain run's output, gradients and random stream, bit for bit, for less memory") {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dtype));
    const Run plain = run_blocks(dtype, false), ckpt = run_blocks(dtype, true);
    CHECK(ckpt.out == plain.out);
    REQUIRE(ckpt.grads.size() == plain.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      CAPTURE(i);
      CHECK(ckpt.grads[i] == plain.grads[i]);
    }
    // The second runs drew the same numbers again and left the generator where it was.
    CHECK(ckpt.rng_offset_after == plain.rng_offset_after);
    CHECK(plain.calls == 3);
    CHECK(ckpt.calls == 6);  // each block once more, in backward
    // Plain: every block's activations (several (64, 32) and (64, 16) tensors each) are
    // held after forward; checkpointed: the blocks' outputs and inputs only.
    const int64_t elem = dtype == kFloat64 ? 8 : 4;
    CHECK(ckpt.held_after_forward + 3 * 64 * 32 * elem < plain.held_after_forward);
  }
}

TEST_CASE("checkpoint under autocast: the plain run's bits") {
  const Run plain = run_blocks(kFloat32, false, true), ckpt = run_blocks(kFloat32, true, true);
  CHECK(ckpt.out == plain.out);
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    CAPTURE(i);
    CHECK(ckpt.grads[i] == plain.grads[i]);
  }
}

TEST_CASE("checkpoint: float64 gradient check through a checkpointed block") {
  manual_seed(5);
  const Block b(kFloat64);
  std::vector<Tensor> inputs = {randn({6, 16}, TensorOptions(kFloat64)).requires_grad_()};
  for (const Tensor& p : b.params()) inputs.push_back(p);
  CHECK(gradcheck(
      [&](const std::vector<Tensor>& in) {
        Block local = b;
        local.w1 = in[1], local.b1 = in[2], local.w2 = in[3], local.ln_w = in[4], local.ln_b = in[5];
        manual_seed(9);  // dropout: the same masks at every point the check evaluates
        // By value: the second run comes in backward, after this function has returned.
        return utils::checkpoint([local](const Tensor& t) { return local.forward(t); }, in[0]);
      },
      inputs));
}

TEST_CASE("checkpoint: several inputs and outputs, an input without grad, nested checkpoints, retain_graph") {
  auto run = [](int mode) {  // 0 plain, 1 checkpointed, 2 nested
    manual_seed(4);
    Tensor a = randn({5, 7}, TensorOptions(kFloat64)).requires_grad_();
    Tensor b = randn({7, 3}, TensorOptions(kFloat64)).requires_grad_();
    Tensor mask = randn({5, 3}, TensorOptions(kFloat64)) > 0;  // no grad
    auto inner = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0]) * in[0]}; };
    auto f = [&](const std::vector<Tensor>& in) {
      Tensor p = matmul(in[0], in[1]);
      Tensor q = mode == 2 ? utils::checkpoint(inner, {p})[0] : inner({p})[0];
      return std::vector<Tensor>{q.masked_fill(in[2], 0.0), sigmoid(p).sum(1)};
    };
    std::vector<Tensor> out = mode == 0 ? f({a, b, mask}) : utils::checkpoint(f, {a, b, mask});
    Tensor loss = out[0].pow(2).sum() + out[1].sum();
    loss.backward(Tensor(), /*retain_graph=*/true);
    loss.backward();  // a second pass over the same graph adds the same gradients again
    return std::vector<std::vector<double>>{a.grad().to_vector<double>(), b.grad().to_vector<double>(),
                                            out[0].to_vector<double>(), out[1].to_vector<double>()};
  };
  const auto plain = run(0);
  CHECK(run(1) == plain);
  CHECK(run(2) == plain);
}

// Kiln's dropout keeps its seed and offset for backward, not its mask, so its gradient is
// the first run's either way; a saved tensor made from random numbers (exp of noise added
// here) is what the generator's state decides.
TEST_CASE("checkpoint: preserve_rng_state off draws new numbers in the second run") {
  auto grad_of = [](bool checkpointed, bool preserve) {
    manual_seed(8);
    Tensor x = randn({200}, TensorOptions(kFloat64)).requires_grad_();
    auto f = [](const Tensor& t) { return dropout(exp(t + randn({200}, TensorOptions(kFloat64))), 0.5); };
    Tensor y = checkpointed ? utils::checkpoint(f, x, {.preserve_rng_state = preserve}) : f(x);
    y.sum().backward();
    return x.grad().to_vector<double>();
  };
  const auto plain = grad_of(false, true);
  CHECK(grad_of(true, true) == plain);
  CHECK(grad_of(true, false) != plain);
}

TEST_CASE("checkpoint: without grad mode the function runs once and records nothing") {
  Tensor x = randn({4}).requires_grad_();
  int calls = 0;
  Tensor y;
  {
    NoGradGuard no_grad;
    y = utils::checkpoint([&](const Tensor& t) { ++calls; return t * 2.0; }, x);
  }
  CHECK(calls == 1);
  CHECK_FALSE(y.requires_grad());
}

TEST_CASE("checkpoint: a second run that differs, inputs changed in place and an empty function are refused") {
  SUBCASE("another number of saved tensors") {
    int calls = 0;
    Tensor x = randn({4}, TensorOptions(kFloat64)).requires_grad_();
    Tensor y = utils::checkpoint([&](const Tensor& t) { return ++calls == 1 ? exp(t) : exp(exp(t)); }, x);
    CHECK_ERROR_STARTS("[checkpoint]", y.sum().backward(), "saved more tensors", "same operations");
  }
  SUBCASE("a saved tensor of another shape") {
    int calls = 0;
    Tensor x = randn({4, 6}, TensorOptions(kFloat64)).requires_grad_();
    Tensor y = utils::checkpoint([&](const Tensor& t) { return exp(++calls == 1 ? t : t.t()).sum(); }, x);
    CHECK_ERROR_STARTS("[checkpoint]", y.backward(), "shape (6, 4)", "shape (4, 6)");
  }
  SUBCASE("fewer saved tensors") {
    int calls = 0;
    Tensor x = randn({4}, TensorOptions(kFloat64)).requires_grad_();
    Tensor y = utils::checkpoint([&](const Tensor& t) { return ++calls == 1 ? exp(exp(t)) : exp(t) * 1.0; }, x);
    CHECK_ERROR_STARTS("[checkpoint]", y.sum().backward(), "saved 1 tensors", "the first 2");
  }
  SUBCASE("an input changed in place after the forward") {
    Tensor w = randn({4}, TensorOptions(kFloat64)).requires_grad_();
    Tensor x = w * 1.0;
    Tensor y = utils::checkpoint([](const Tensor& t) { return exp(t); }, x);
    { NoGradGuard no_grad; x.add_(1.0); }
    CHECK_ERROR_STARTS("[checkpoint]", y.sum().backward(), "input 0", "modified by an inplace operation",
                       "expected version 0");
  }
  SUBCASE("an input changed in place by the function") {
    Tensor x = randn({4}, TensorOptions(kFloat64));
    CHECK_ERROR_STARTS("[checkpoint]", utils::checkpoint([](const Tensor& t) { return Tensor(t).mul_(2.0); }, x),
                       "by the checkpointed function");
  }
  SUBCASE("an empty function") {
    CHECK_ERROR_STARTS("[checkpoint]", utils::checkpoint(std::function<Tensor(const Tensor&)>(), randn({2})),
                       "empty");
  }
}

TEST_CASE("SavedTensorsHooks: pack once per saved tensor, unpack in backward, checked on the way back") {
  Tensor x = randn({3, 4}, TensorOptions(kFloat64)).requires_grad_();
  int packs = 0, unpacks = 0;
  Tensor y;
  {
    SavedTensorsHooks hooks(
        [&](const Tensor& t) -> std::any {
          ++packs;
          return t.clone();  // a copy: the original may go
        },
        [&](const std::any& kept) {
          ++unpacks;
          return std::any_cast<Tensor>(kept);
        });
    y = exp(x) * x;  // exp saves its output, mul both operands
  }
  CHECK(packs == 3);
  y.sum().backward();
  CHECK(unpacks == 3);
  CHECK(allclose(x.grad(), exp(x) * (x + 1.0)));

  SUBCASE("an unpack of another shape is refused, naming the op") {
    Tensor z;
    {
      SavedTensorsHooks hooks([](const Tensor& t) -> std::any { return t; },
                              [](const std::any& kept) { return std::any_cast<Tensor>(kept).reshape({-1}); });
      z = exp(x);
    }
    CHECK_ERROR_STARTS("[exp]", z.sum().backward(), "unpack hook", "shape (12,)", "shape (3, 4)");
  }
  SUBCASE("empty hooks are refused") {
    CHECK_ERROR_STARTS("[SavedTensorsHooks]",
                       SavedTensorsHooks(PackHook(), [](const std::any&) { return Tensor(); }), "empty pack");
  }
}

namespace {

// A small Seq2SeqTransformer: 40 words, two encoder and two decoder layers, 64 wide
// feed-forward blocks.
tr::Seq2SeqOptions small_model(int64_t d_model, int64_t nhead) {
  tr::Seq2SeqOptions o;
  o.src_vocab_size = o.tgt_vocab_size = 40;
  o.d_model = d_model;
  o.nhead = nhead;
  o.num_encoder_layers = o.num_decoder_layers = 2;
  o.dim_feedforward = 64;
  o.max_len = 32;
  return o;
}

// One training step's loss and gradients, and the bytes held after its forward pass.
struct ModelStep {
  std::vector<std::vector<double>> values;
  int64_t held_after_forward = 0;
};

ModelStep model_step(const tr::Seq2SeqOptions& o, bool autocast = false) {
  tr::Seq2SeqTransformer model(o);
  model.train();
  Tensor src = randint(1, 40, {6, 10}), tgt = randint(1, 40, {6, 9});
  const int64_t base = allocated();
  Tensor loss;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(kBFloat16);
    loss = cross_entropy(model.forward(src, tgt.slice(1, 0, 8)).reshape({-1, 40}), tgt.slice(1, 1, 9).reshape({-1}));
  }
  ModelStep r;
  r.held_after_forward = allocated() - base;
  loss.backward();
  r.values = {loss.to_vector<double>()};
  for (const Tensor& p : model.parameters()) r.values.push_back(p.grad().to_vector<double>());
  return r;
}

}  // namespace

TEST_CASE("checkpointed Transformer layers: the plain step's loss and gradients, a lower peak") {
  auto step = [](bool checkpointed) {
    manual_seed(21);
    tr::Seq2SeqOptions o = small_model(32, 4);
    o.checkpoint_layers = checkpointed;
    return model_step(o);
  };
  const ModelStep plain = step(false), ckpt = step(true);
  CHECK(ckpt.values == plain.values);
  CHECK(ckpt.held_after_forward * 2 < plain.held_after_forward);
}

namespace {

// A feed-forward block as the Transformer's: layer_norm -> [linear -> relu_dropout] ->
// linear, the bracket checkpointed with recompute_outputs or not, in float64, float32 or
// under autocast; the layer norm's recipes on or off.
struct FeedForwardRun {
  std::vector<std::vector<double>> grads;  // of x and the four weights
  int64_t held_after_forward = 0;
  int64_t held_at_w2_grad = 0;  // in backward, once the second linear's weight has its gradient
  int calls = 0;
};

FeedForwardRun run_feed_forward(DType dtype, bool autocast, bool checkpointed, bool recipes, bool nested = false,
                                bool backward_twice = false) {
  manual_seed(21);
  Generator g(8);
  TensorOptions o(dtype);
  Tensor x = randn({64, 16}, o, &g).requires_grad_();
  Tensor w1 = (randn({32, 16}, o, &g) * 0.3).requires_grad_(), b1 = (randn({32}, o, &g) * 0.1).requires_grad_();
  Tensor w2 = (randn({16, 32}, o, &g) * 0.3).requires_grad_(), ln_w = (randn({16}, o, &g) + 1.0).requires_grad_();
  set_recompute_saved(recipes);
  FeedForwardRun r;
  auto hidden = [w1, b1, &r](const Tensor& in) {
    ++r.calls;
    return relu_dropout(linear(in, w1, b1), 0.25);
  };
  utils::CheckpointOptions freeing;
  freeing.recompute_outputs = true;
  const int64_t before = allocated();
  Tensor out;
  {
    std::optional<AutocastGuard> guard;
    if (autocast) guard.emplace(kBFloat16);
    Tensor y = layer_norm(x, {16}, ln_w);
    Tensor h;
    if (!checkpointed) {
      h = hidden(y);
    } else if (nested) {  // inside an outer checkpoint the inner one leaves no recipe
      h = utils::checkpoint([&](const Tensor& in) { return utils::checkpoint(hidden, in, freeing); }, y);
    } else {
      h = utils::checkpoint(hidden, y, freeing);
    }
    out = linear(h, w2).sum();
  }
  r.held_after_forward = allocated() - before;
  HookHandle hook = w2.register_post_accumulate_grad_hook([&r, before](const Tensor&) {
    r.held_at_w2_grad = allocated() - before;
  });
  out.backward(Tensor(), /*retain_graph=*/backward_twice);
  if (backward_twice) out.backward();
  hook.remove();
  reset_recompute_saved();
  r.grads = grads_of({x, w1, b1, w2, ln_w});
  return r;
}

}  // namespace

// recompute_outputs: the second linear saves h (or, under autocast, the bfloat16 copy
// relu_dropout cached for it) as a recipe that reads the checkpoint's second run, so
// nothing of h is held after forward, and the run that fills the checkpoint's own saved
// tensors is the one the recipe reads (the function runs twice, not three times). An input
// that is a layer norm's output with a recipe is kept as that recipe, not its memory.
TEST_CASE("checkpoint recompute_outputs: a consumer keeps the output's recipe, not its memory; the plain bits") {
  struct Mode {
    DType dtype;
    bool autocast;
  };
  for (const Mode m : {Mode{kFloat64, false}, Mode{kFloat32, false}, Mode{kFloat32, true}}) {
    CAPTURE(dtype_name(m.dtype));
    CAPTURE(m.autocast);
    const int64_t h_bytes = 64 * 32 * (m.autocast ? 2 : dtype_size(m.dtype));  // what linear(h) keeps of h
    const int64_t y_bytes = 64 * 16 * dtype_size(m.dtype);
    const FeedForwardRun plain = run_feed_forward(m.dtype, m.autocast, false, false);
    for (bool recipes : {false, true}) {
      CAPTURE(recipes);
      const FeedForwardRun kept = run_feed_forward(m.dtype, m.autocast, false, recipes);
      const FeedForwardRun freed = run_feed_forward(m.dtype, m.autocast, true, recipes);
      CHECK(kept.grads == plain.grads);
      CHECK(freed.grads == plain.grads);
      CHECK(freed.calls == 2);
      // Under autocast without recipes the plain linear1 also keeps its weight's bfloat16
      // copy (the checkpointed one only in a slot, gone with the guard's cache; with
      // recipes both keep it as a recipe) and y's bfloat16 copy where the checkpoint keeps
      // y itself.
      int64_t expected = h_bytes;
      if (m.autocast && !recipes) expected += 32 * 16 * 2 + 64 * 16 * 2 - 64 * 16 * 4;
      CHECK(kept.held_after_forward - freed.held_after_forward == expected);
      // In backward, once linear2's weight has its gradient (the second run has been made):
      // the checkpoint holds y (rebuilt by its recipe, or kept in float32 where the plain
      // autocast linear1 kept y's bfloat16 copy) and, with the recipes under autocast, the
      // second run's copies of y and of linear1's weight in slots (the second run leaves
      // no recipes: it saves what the first saved), where the plain run has rebuilt nothing
      // yet. Not the second run's float32 output under autocast: no consumer holds its recipe.
      int64_t in_backward = m.autocast || recipes ? y_bytes : 0;
      if (m.autocast && recipes) in_backward += 64 * 16 * 2 + 32 * 16 * 2;
      CHECK(freed.held_at_w2_grad - kept.held_at_w2_grad == in_backward);
    }
    // The checkpoint's input, y, kept by its recipe when the recipes are on, and under
    // autocast linear2's weight copy too.
    CHECK(run_feed_forward(m.dtype, m.autocast, true, false).held_after_forward -
              run_feed_forward(m.dtype, m.autocast, true, true).held_after_forward ==
          y_bytes + (m.autocast ? 16 * 32 * 2 : 0));
    const FeedForwardRun nested = run_feed_forward(m.dtype, m.autocast, true, true, true);
    CHECK(nested.grads == plain.grads);
    // The outer checkpoint's ops all save under the inner one's hooks: only the inner runs again.
    CHECK(nested.calls == 2);
  }
}

// With retain_graph the recipes and the second run's tensors serve the second backward too.
TEST_CASE("checkpoint recompute_outputs: backward twice with retain_graph") {
  for (bool autocast : {false, true}) {
    CAPTURE(autocast);
    const DType dtype = autocast ? kFloat32 : kFloat64;
    const FeedForwardRun plain = run_feed_forward(dtype, autocast, false, true, false, true);
    const FeedForwardRun freed = run_feed_forward(dtype, autocast, true, true, false, true);
    CHECK(freed.grads == plain.grads);
    CHECK(freed.calls == 2);
    // Twice the gradients of one backward.
    const FeedForwardRun once = run_feed_forward(dtype, autocast, false, true);
    REQUIRE(once.grads.size() == plain.grads.size());
    for (size_t i = 0; i < once.grads.size(); ++i) {
      for (size_t j = 0; j < once.grads[i].size(); ++j) CHECK(plain.grads[i][j] == 2 * once.grads[i][j]);
    }
  }
}

TEST_CASE("checkpoint recompute_outputs: an input returned as it is, and a function that saves nothing") {
  Tensor x = randn({4, 3}, TensorOptions(kFloat64)).requires_grad_();
  utils::CheckpointOptions freeing;
  freeing.recompute_outputs = true;
  Tensor same = utils::checkpoint([](const Tensor& t) { return t; }, x, freeing);
  Tensor doubled = utils::checkpoint([](const Tensor& t) { return t * 2.0; }, x, freeing);  // Mul by a number saves nothing
  Tensor w = randn({3, 3}, TensorOptions(kFloat64)).requires_grad_();
  (linear(same, w) + linear(doubled, w)).sum().backward();
  // d/dx sum(x w^T + 2 x w^T) = 3 · (column sums of w), on every row.
  const std::vector<double> col = w.detach().sum({0}).to_vector<double>();
  const std::vector<double> gx = x.grad().to_vector<double>();
  for (size_t i = 0; i < gx.size(); ++i) CHECK(gx[i] == doctest::Approx(3.0 * col[i % 3]).epsilon(1e-12));
}

// checkpoint_feed_forward: each layer's hidden feed-forward layer through a checkpoint with
// recompute_outputs. The plain step's loss and gradients, bit for bit, and nothing of the
// (rows, dim_feedforward) activations held after forward: with the recipes on (as on a GPU)
// exactly their bytes less than the plain step, whose norms' outputs are recipes too.
TEST_CASE("checkpoint_feed_forward: the plain step's bits, each layer's hidden activation not held") {
  for (bool autocast : {false, true}) {
    CAPTURE(autocast);
    auto step = [autocast](std::optional<bool> checkpointed, bool recipes = true) {
      manual_seed(12);
      tr::Seq2SeqOptions o = small_model(16, 2);
      o.checkpoint_feed_forward = checkpointed;
      set_recompute_saved(recipes);
      const ModelStep r = model_step(o, autocast);
      reset_recompute_saved();
      return r;
    };
    const ModelStep plain = step(false), ckpt = step(true);
    CHECK(ckpt.values == plain.values);
    // Two encoder layers over 6 x 10 tokens and two decoder layers over 6 x 8, 64 wide
    // (the weights' bfloat16 copies are recipes on both sides).
    CHECK(plain.held_after_forward - ckpt.held_after_forward == (2 * 60 + 2 * 48) * 64 * (autocast ? 2 : 4));
    // Unset, the model decides: checkpointed under autocast where saved activations are
    // written again (here by set_recompute_saved(true), as on a GPU), else not.
    const ModelStep by_default = step(std::nullopt);
    CHECK(by_default.values == plain.values);
    CHECK(by_default.held_after_forward == (autocast ? ckpt : plain).held_after_forward);
    set_recompute_saved(true);
    CHECK_FALSE(tr::checkpoint_feed_forward_by_default(ones({2})));  // no autocast: off
    reset_recompute_saved();
    {
      AutocastGuard guard(kBFloat16);
      CHECK(tr::checkpoint_feed_forward_by_default(ones({2})) == is_recompute_saved_enabled(kCPU));
      set_recompute_saved(true);
      CHECK(tr::checkpoint_feed_forward_by_default(ones({2})));
      {
        tr::WholeLayerCheckpoint whole;  // inside a layer checkpointed whole: off
        CHECK_FALSE(tr::checkpoint_feed_forward_by_default(ones({2})));
      }
      CHECK(tr::checkpoint_feed_forward_by_default(ones({2})));
      reset_recompute_saved();
    }
    // With the recipes off (the CPU's default) the default keeps the activation.
    const ModelStep off = step(std::nullopt, false);
    CHECK(off.values == plain.values);
  }
}

// Layer norm outputs as recipes (autograd/recompute.h) are for SavedTensors without hooks;
// inside a checkpoint none is left, so the setting may change between the two runs.
TEST_CASE("checkpoint: the layer norm recipes' setting changed between forward and backward") {
  auto grads = [](bool checkpointed) {
    manual_seed(6);
    Block b(kFloat64);
    Tensor x = randn({8, 16}, TensorOptions(kFloat64)).requires_grad_();
    set_recompute_saved(true);
    auto f = [&b](const Tensor& t) { return b.forward(t); };
    Tensor y = checkpointed ? utils::checkpoint(f, x) : f(x);
    set_recompute_saved(false);
    y.sum().backward();
    reset_recompute_saved();
    return std::vector<std::vector<double>>{x.grad().to_vector<double>(), b.w1.grad().to_vector<double>()};
  };
  CHECK(grads(true) == grads(false));
}

TEST_CASE("checkpoint_sequential: the plain Sequential's output and gradients, its segments run twice") {
  auto run = [](int64_t segments) {
    manual_seed(12);
    auto seq = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.3),
        std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 4),
        std::make_shared<nn::Tanh>());
    seq->to(kFloat64);
    Tensor x = randn({5, 8}, TensorOptions(kFloat64)).requires_grad_();
    Tensor y = segments == 0 ? (*seq)(x) : utils::checkpoint_sequential(*seq, segments, x);
    y.pow(2).sum().backward();
    std::vector<std::vector<double>> out = {y.to_vector<double>(), x.grad().to_vector<double>()};
    for (const Tensor& p : seq->parameters()) out.push_back(p.grad().to_vector<double>());
    return out;
  };
  const auto plain = run(0);
  for (int64_t segments : {1, 2, 3, 7}) {
    CAPTURE(segments);
    CHECK(run(segments) == plain);
  }
  nn::Sequential seq(std::make_shared<nn::ReLU>(), std::make_shared<nn::ReLU>());
  CHECK_ERROR_STARTS("[checkpoint_sequential]", utils::checkpoint_sequential(seq, 0, randn({2})),
                     "between 1 and the number of modules (2), got 0");
  CHECK_ERROR_STARTS("[checkpoint_sequential]", utils::checkpoint_sequential(seq, 3, randn({2})), "got 3");
}
