// Saved layer norm outputs kept as recipes (autograd/recompute.h): backward reads the same
// bits as when the memory is kept, and the memory is gone at the end of the forward pass.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
using kiln::testing::error_of;
namespace tr = kiln::transformer;

namespace {

// Forces the setting for one scope, then back to the default.
struct RecomputeSetting {
  explicit RecomputeSetting(bool on) { set_recompute_saved(on); }
  ~RecomputeSetting() { reset_recompute_saved(); }
  RecomputeSetting(const RecomputeSetting&) = delete;
  RecomputeSetting& operator=(const RecomputeSetting&) = delete;
};

int64_t allocated() { return memory_stats().allocated_bytes; }

// What a run leaves to compare: every gradient's values, and the bytes tensors held at the
// end of the forward pass (after the norm's output was dropped).
struct Run {
  std::vector<std::vector<double>> grads;
  int64_t held_after_forward = 0;
};

std::vector<std::vector<double>> grads_of(const std::vector<Tensor>& leaves) {
  std::vector<std::vector<double>> g;
  for (const Tensor& t : leaves) g.push_back(t.grad().to_vector<double>());
  return g;
}

// x (4, 5, 16) -> layer_norm (or add_layer_norm with a residual) -> linear (8): the shape of
// a Transformer sublayer's start. `readers` linears read the norm's output (an encoder
// output read by every cross-attention), their outputs summed.
Run norm_then_linear(DType dtype, bool on, bool residual, bool autocast, int readers = 1) {
  RecomputeSetting setting(on);
  manual_seed(3);
  const auto opts = TensorOptions(dtype).requires_grad();
  Tensor x = randn({4, 5, 16}, opts), r = randn({4, 5, 16}, opts);
  Tensor w = randn({16}, opts), b = randn({16}, opts), lw = randn({8, 16}, opts), lb = randn({8}, opts);
  Run run;
  Tensor z;
  {
    AutocastGuard guard(kBFloat16, autocast);
    Tensor y = residual ? add_layer_norm(x, r, {16}, w, b, 1e-5) : layer_norm(x, {16}, w, b, 1e-5);
    for (int i = 0; i < readers; ++i) {
      Tensor zi = linear(y, lw, lb);
      z = z.defined() ? z + zi : zi;
    }
  }
  run.held_after_forward = allocated();
  (z * z).sum().backward();
  run.grads = residual ? grads_of({x, r, w, b, lw, lb}) : grads_of({x, w, b, lw, lb});
  return run;
}

}  // namespace

TEST_CASE("the default: recipes on a GPU, none on the CPU; set and reset decide") {
  CHECK_FALSE(is_recompute_saved_enabled(kCPU));
  CHECK(is_recompute_saved_enabled(Device("cuda:0")));
  {
    RecomputeSetting on(true);
    CHECK(is_recompute_saved_enabled(kCPU));
  }
  {
    RecomputeSetting off(false);
    CHECK_FALSE(is_recompute_saved_enabled(Device("cuda:0")));
  }
  CHECK_FALSE(is_recompute_saved_enabled(kCPU));
}

TEST_CASE("a layer norm's output read by a linear: the same gradients, its memory not held") {
  for (DType dtype : {kFloat64, kFloat32}) {
    for (bool residual : {false, true}) {
      const std::string name = dtype_name(dtype);
      CAPTURE(name);
      CAPTURE(residual);
      const Run kept = norm_then_linear(dtype, false, residual, false);
      const Run recomputed = norm_then_linear(dtype, true, residual, false);
      CHECK(recomputed.grads == kept.grads);
      // The norm's output, (4, 5, 16), is all that differs.
      CHECK(kept.held_after_forward - recomputed.held_after_forward ==
            4 * 5 * 16 * static_cast<int64_t>(dtype_size(dtype)));
    }
  }
}

TEST_CASE("under autocast the bfloat16 copy the linear reads is the recipe's") {
  for (bool residual : {false, true}) {
    CAPTURE(residual);
    const Run kept = norm_then_linear(kFloat32, false, residual, true);
    const Run recomputed = norm_then_linear(kFloat32, true, residual, true);
    CHECK(recomputed.grads == kept.grads);
    // y's copy, and the linear's weight's (8, 16), also a recipe: the weight rounded again.
    CHECK(kept.held_after_forward - recomputed.held_after_forward == 4 * 5 * 16 * 2 + 8 * 16 * 2);
  }
}

TEST_CASE("an output read by several linears is written again once and serves them all") {
  for (bool autocast : {false, true}) {
    CAPTURE(autocast);
    const Run kept = norm_then_linear(kFloat32, false, false, autocast, 3);
    const Run recomputed = norm_then_linear(kFloat32, true, false, autocast, 3);
    CHECK(recomputed.grads == kept.grads);
    // Under autocast the weight's copy is a recipe after its first use and held after its
    // second (as without recipes), so only y's copy differs.
    CHECK(kept.held_after_forward - recomputed.held_after_forward == 4 * 5 * 16 * (autocast ? 2 : 4));
  }
}

TEST_CASE("an output still alive is read as it is, and an in-place change of it is caught") {
  RecomputeSetting on(true);
  const auto opts = TensorOptions(kFloat64).requires_grad();
  Tensor x = randn({3, 8}, opts), lw = randn({2, 8}, opts);
  Tensor y = layer_norm(x, {8});
  Tensor z = linear(y, lw);
  {
    NoGradGuard no_grad;
    y.add_(1.0);
  }
  CHECK(error_of([&] { z.sum().backward(); }).find("modified by an inplace operation") != std::string::npos);
}

TEST_CASE("an output changed in place before a linear saves it is kept, not recomputed") {
  auto run = [](bool on) {
    RecomputeSetting setting(on);
    manual_seed(5);
    const auto opts = TensorOptions(kFloat64).requires_grad();
    Tensor x = randn({3, 8}, opts), lw = randn({2, 8}, opts);
    Tensor z;
    {
      Tensor y = layer_norm(x, {8});
      y.mul_(3.0);  // recorded in place: the recipe no longer describes y's bytes
      z = linear(y, lw);
    }
    z.pow(2.0).sum().backward();
    return grads_of({x, lw});
  };
  const auto kept = run(false), recomputed = run(true);
  CHECK(recomputed == kept);
}

TEST_CASE("retain_graph: a second backward writes the output again and gets the same gradients") {
  RecomputeSetting on(true);
  manual_seed(7);
  const auto opts = TensorOptions(kFloat64).requires_grad();
  Tensor x = randn({3, 8}, opts), lw = randn({2, 8}, opts);
  Tensor loss;
  {
    Tensor y = layer_norm(x, {8});
    loss = linear(y, lw).pow(2.0).sum();
  }
  loss.backward(Tensor(), /*retain_graph=*/true);
  const auto first = grads_of({x, lw});
  x.grad().zero_();
  lw.grad().zero_();
  loss.backward();
  CHECK(grads_of({x, lw}) == first);
}

TEST_CASE("a Transformer training step: the same loss and gradients, a lower peak") {
  for (bool autocast : {false, true}) {
    CAPTURE(autocast);
    struct Step {
      double loss = 0;
      std::vector<std::vector<double>> grads;
      int64_t peak = 0;  // above what was held before the forward pass
    };
    auto step = [autocast](bool on) {
      RecomputeSetting setting(on);
      manual_seed(11);
      tr::Seq2SeqOptions mo;
      mo.src_vocab_size = mo.tgt_vocab_size = 20;
      mo.d_model = 32;
      mo.nhead = 4;
      mo.num_encoder_layers = mo.num_decoder_layers = 2;
      mo.dim_feedforward = 64;
      mo.dropout = 0.1;
      mo.max_len = 16;
      tr::Seq2SeqTransformer model(mo);
      model.train();
      Tensor src = randint(1, 20, {3, 7}), tgt = randint(1, 20, {3, 6}), labels = randint(1, 20, {3, 6});
      reset_peak_memory();
      const int64_t before = allocated();  // what the model holds
      Tensor loss;
      {
        AutocastGuard guard(kBFloat16, autocast);
        loss = cross_entropy(model.forward(src, tgt).reshape({-1, 20}), labels.reshape({-1}));
      }
      Step s;
      s.peak = memory_stats().peak_bytes - before;
      loss.backward();
      s.loss = loss.item();
      s.grads = grads_of(model.parameters());
      return s;
    };
    const Step kept = step(false), recomputed = step(true);
    CHECK(recomputed.loss == kept.loss);
    CHECK(recomputed.grads == kept.grads);
    CHECK(recomputed.peak < kept.peak);
  }
}

TEST_CASE("an empty norm output leaves no recipe; backward through it works") {
  RecomputeSetting on(true);
  const auto opts = TensorOptions(kFloat64).requires_grad();
  Tensor x = randn({0, 8}, opts), w = randn({8}, opts), lw = randn({2, 8}, opts);
  Tensor y = layer_norm(x, {8}, w);
  CHECK(y.impl()->storage->recompute() == nullptr);
  linear(y, lw).sum().backward();
  CHECK(x.grad().shape() == Shape{0, 8});
  CHECK(w.grad().to_vector<double>() == std::vector<double>(8, 0.0));
  CHECK(lw.grad().to_vector<double>() == std::vector<double>(16, 0.0));
}

TEST_CASE("the autocast cache lets an activation's copy go once the activation is gone") {
  RecomputeSetting on(true);
  const auto opts = TensorOptions(kFloat32).requires_grad();
  Tensor x = randn({4, 16}, opts), lw = randn({8, 16}, opts);
  AutocastGuard guard(kBFloat16);
  Tensor z;
  {
    Tensor y = layer_norm(x, {16});  // its bfloat16 copy goes into the cache
    z = linear(y, lw);               // which the linear keeps as a recipe
  }
  const int64_t entries = autocast_cache_stats().entries;  // lw's copy and y's
  Tensor y2 = layer_norm(x, {16});  // a new copy: y's, whose storage is gone, leaves
  CHECK(autocast_cache_stats().entries == entries);
}

// A weight's bfloat16 copy under autocast: with recipes the product keeps a recipe that
// rounds the weight again, so the copy goes when the product returns (not at the end of the
// forward pass with every other weight's), and backward reads the same bits.
namespace {

struct WeightRun {
  std::vector<std::vector<double>> grads;
  int64_t held_after_forward = 0;
  int64_t conversions = 0;  // the weight copies autocast made in forward
};

// `uses` linears sharing w (8, 16) (an RNN's weight over its time steps) over multiples
// of x (6, 16), their outputs summed.
WeightRun shared_weight_linears(bool on, int uses) {
  RecomputeSetting setting(on);
  manual_seed(13);
  const auto opts = TensorOptions(kFloat32).requires_grad();
  Tensor x = randn({6, 16}, opts), w = randn({8, 16}, opts), b = randn({8}, opts);
  WeightRun run;
  const int64_t before = allocated();
  Tensor z;
  {
    AutocastGuard guard(kBFloat16);
    const int64_t converted = autocast_cache_stats().conversions;
    for (int i = 0; i < uses; ++i) {
      Tensor zi = linear(x * static_cast<double>(i + 1), w, b);
      z = z.defined() ? z + zi : zi;
    }
    run.conversions = autocast_cache_stats().conversions - converted;
  }
  run.held_after_forward = allocated() - before;
  z.pow(2.0).sum().backward();
  run.grads = grads_of({x, w, b});
  return run;
}

}  // namespace

TEST_CASE("under autocast a weight's bfloat16 copy is a recipe: not held after forward, the same gradients") {
  const WeightRun kept = shared_weight_linears(false, 1), recomputed = shared_weight_linears(true, 1);
  CHECK(recomputed.grads == kept.grads);
  CHECK(kept.held_after_forward - recomputed.held_after_forward == 8 * 16 * 2);
  CHECK(recomputed.conversions == 1);
}

TEST_CASE("a weight used again in the same pass is rounded once more and then held, as without recipes") {
  const WeightRun kept = shared_weight_linears(false, 5), recomputed = shared_weight_linears(true, 5);
  CHECK(recomputed.grads == kept.grads);
  CHECK(kept.conversions == 1);
  CHECK(recomputed.conversions == 2);  // the first use's copy went; the second is kept for the rest
  CHECK(kept.held_after_forward == recomputed.held_after_forward);
}

TEST_CASE("without grad mode the weight's copy is held for every use, recipes or not") {
  RecomputeSetting on(true);
  Tensor x = randn({6, 16}), w = randn({8, 16}, TensorOptions(kFloat32).requires_grad());
  NoGradGuard no_grad;
  AutocastGuard guard(kBFloat16);
  const AutocastCacheStats before = autocast_cache_stats();
  for (int i = 0; i < 4; ++i) linear(x, w);
  const AutocastCacheStats after = autocast_cache_stats();
  CHECK(after.conversions - before.conversions == 1);
  CHECK(after.hits - before.hits == 3);
}

TEST_CASE("a weight changed in place between forward and backward: its recipe refuses, naming the op") {
  RecomputeSetting on(true);
  const auto opts = TensorOptions(kFloat32).requires_grad();
  Tensor x = randn({6, 16}, opts), w = randn({8, 16}, opts);
  Tensor z;
  {
    AutocastGuard guard(kBFloat16);
    z = linear(x, w);
  }
  {
    NoGradGuard no_grad;
    w.sub_(w * 0.1);  // an optimizer step before backward
  }
  const std::string e = error_of([&] { z.sum().backward(); });
  CHECK(e.find("[linear]") != std::string::npos);
  CHECK(e.find("modified by an inplace operation") != std::string::npos);
  CHECK(e.find("float32 tensor of shape (8, 16), is at version 1; expected version 0") != std::string::npos);
}
