// One shared model used by several threads at once. Inference (InferenceMode,
// greedy_decode, beam_search, forward under NoGradGuard) writes nothing shared, so every
// thread gets bitwise what a lone thread gets, and the model's flags are left as they were.
// Also run under ThreadSanitizer (see docs/design.md, "Threads and determinism").
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "kiln.h"
#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;

namespace {

constexpr int kThreads = 8;

// Runs fn(thread index) on kThreads threads released together, and waits for them all.
void run_together(const std::function<void(int)>& fn) {
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      fn(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Every module's training flag, in named_modules() order.
std::vector<bool> training_flags(nn::Module& m) {
  std::vector<bool> flags;
  for (const auto& [name, sub] : m.named_modules()) flags.push_back(sub->is_training());
  return flags;
}

std::unique_ptr<tr::Seq2SeqTransformer> small_model() {
  tr::Seq2SeqOptions o;
  o.src_vocab_size = 12;
  o.tgt_vocab_size = 12;
  o.d_model = 16;
  o.nhead = 2;
  o.num_encoder_layers = 2;
  o.num_decoder_layers = 2;
  o.dim_feedforward = 32;
  o.dropout = 0.3;  // on in training mode: decoding must turn it off for itself
  o.max_len = 32;
  manual_seed(5);
  return std::make_unique<tr::Seq2SeqTransformer>(o);
}

// Four sources of different lengths (padding included).
std::vector<std::vector<int64_t>> sources() { return {{4, 5, 6, 7, 8}, {9, 10, 3}, {11, 4}, {5, 5, 6, 9, 10}}; }

struct Decoded {
  std::vector<std::vector<int64_t>> greedy;
  std::vector<std::vector<tr::Hypothesis>> beams;  // one list per source
};

bool same(const Decoded& a, const Decoded& b) {
  if (a.greedy != b.greedy || a.beams.size() != b.beams.size()) return false;
  for (size_t i = 0; i < a.beams.size(); ++i) {
    if (a.beams[i].size() != b.beams[i].size()) return false;
    for (size_t j = 0; j < a.beams[i].size(); ++j) {
      const tr::Hypothesis &x = a.beams[i][j], &y = b.beams[i][j];
      // Bitwise: the same tokens and the same doubles.
      if (x.tokens != y.tokens || x.log_prob != y.log_prob || x.score != y.score || x.finished != y.finished)
        return false;
    }
  }
  return true;
}

Decoded decode_all(tr::Seq2SeqTransformer& model) {
  tr::DecodeOptions d;
  d.bos_id = 1;
  d.eos_id = 2;
  d.max_len = 8;
  Decoded out;
  out.greedy = tr::greedy_decode(model, data::pad_sequences(sources()), d);
  tr::BeamOptions b;
  static_cast<tr::DecodeOptions&>(b) = d;
  b.beam_width = 3;
  for (const auto& s : sources())
    out.beams.push_back(tr::beam_search(model, from_vector<int64_t>(s, {1, static_cast<int64_t>(s.size())}), b));
  return out;
}

}  // namespace

TEST_CASE("InferenceMode: no graph, dropout off whatever the flag, this thread only") {
  nn::Dropout drop(0.5);
  REQUIRE(drop.is_training());
  Tensor x = ones({64, 64}, TensorOptions().requires_grad(true));
  CHECK_FALSE(InferenceMode::is_enabled());
  {
    InferenceMode guard;
    CHECK(InferenceMode::is_enabled());
    CHECK_FALSE(is_grad_enabled());
    Tensor y = drop(x);
    CHECK(equal(y, ones({64, 64})));  // eval behaviour: nothing dropped, nothing scaled
    CHECK_FALSE((x + x).requires_grad());  // no graph (eval dropout returns x itself)
    CHECK(drop.is_training());        // the flag itself is not touched
    CHECK_FALSE(drop.training_effective());
    // Another thread is not in inference mode.
    bool other_enabled = true, other_grad = false;
    std::thread([&] {
      other_enabled = InferenceMode::is_enabled();
      other_grad = is_grad_enabled();
    }).join();
    CHECK_FALSE(other_enabled);
    CHECK(other_grad);
    {
      InferenceMode off(false);  // as torch: a disabled guard records again
      CHECK_FALSE(InferenceMode::is_enabled());
      CHECK(is_grad_enabled());
      CHECK(drop.training_effective());
    }
    CHECK(InferenceMode::is_enabled());
    CHECK_FALSE(is_grad_enabled());
  }
  CHECK_FALSE(InferenceMode::is_enabled());
  CHECK(is_grad_enabled());
  CHECK(drop.training_effective());
  CHECK_FALSE(equal(drop(x), ones({64, 64})));  // training again outside the guard
}

TEST_CASE("decoding one shared model from several threads gives the single-threaded results") {
  std::unique_ptr<tr::Seq2SeqTransformer> model = small_model();
  // Single-threaded, in eval mode: the reference. Decoding ignores the training flag.
  model->eval();
  const Decoded reference = decode_all(*model);
  REQUIRE(reference.greedy.size() == 4);
  model->train();
  CHECK(same(decode_all(*model), reference));

  for (bool training : {true, false}) {
    CAPTURE(training);
    model->train(training);
    const std::vector<bool> flags = training_flags(*model);
    constexpr int kRounds = 4;
    std::vector<int> mismatches(kThreads, 0);
    run_together([&](int t) {
      for (int r = 0; r < kRounds; ++r)
        if (!same(decode_all(*model), reference)) ++mismatches[static_cast<size_t>(t)];
    });
    for (int t = 0; t < kThreads; ++t) {
      CAPTURE(t);
      CHECK(mismatches[static_cast<size_t>(t)] == 0);
    }
    CHECK(training_flags(*model) == flags);  // no module's flag changed
  }
}

TEST_CASE("concurrent forward passes of shared modules under InferenceMode and NoGradGuard") {
  manual_seed(9);
  auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(32, 64), std::make_shared<nn::ReLU>(),
                                              std::make_shared<nn::Dropout>(0.4), std::make_shared<nn::LayerNorm>(Shape{64}),
                                              std::make_shared<nn::Linear>(64, 32));
  tr::MultiheadAttentionOptions mo;
  mo.dropout = 0.4;
  mo.batch_first = true;
  tr::MultiheadAttention mha(32, 4, mo);
  nn::Embedding emb(20, 32);
  const Tensor ids = from_vector<int64_t>({1, 5, 7, 19, 0, 3, 3, 12}, {2, 4});
  auto run = [&] {
    Tensor e = emb(ids);                                   // (2, 4, 32)
    tr::AttentionOutput a = mha.forward(e, e, e, Tensor(), /*need_weights=*/true);
    tr::AttentionOutput f = mha.forward(e, e, e, Tensor(), /*need_weights=*/false);  // the fused path
    return std::vector<Tensor>{mlp->forward(a.output), a.weights, mlp->forward(f.output)};
  };
  auto all_equal = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!equal(a[i], b[i]) || a[i].requires_grad()) return false;
    return true;
  };
  std::vector<Tensor> reference;
  {
    InferenceMode guard;
    reference = run();
  }
  // Training flags on (dropout 0.4 everywhere): InferenceMode alone turns it off, per thread.
  std::vector<int> bad(kThreads, 0);
  run_together([&](int t) {
    InferenceMode guard;
    for (int r = 0; r < 4; ++r)
      if (!all_equal(run(), reference)) ++bad[static_cast<size_t>(t)];
  });
  CHECK(mlp->is_training());
  CHECK(mha.is_training());
  // Eval mode set once beforehand, then NoGradGuard per thread: the classic libtorch way.
  mlp->eval();
  mha.eval();
  emb.eval();
  run_together([&](int t) {
    NoGradGuard no_grad;
    for (int r = 0; r < 4; ++r)
      if (!all_equal(run(), reference)) ++bad[static_cast<size_t>(t)];
  });
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(bad[static_cast<size_t>(t)] == 0);
  }
}

// Under ThreadSanitizer too: parallel.cpp tells TSan how oneTBB orders its tasks (libtbb.so
// is not instrumented), and tests/tsan_canary.cpp proves that a race between two tasks is
// still reported.
TEST_CASE("concurrent inference past the parallel thresholds (TBB tasks inside each thread)") {
  // Sizes past kGrainElements and matmul's per-task flops, so that each caller thread
  // hands work to the shared TBB pool while the others do too.
  manual_seed(13);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(256, 512), std::make_shared<nn::GELU>(),
                                              std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::LayerNorm>(512),
                                              std::make_shared<nn::Linear>(512, 256), std::make_shared<nn::Softmax>(-1));
  const Tensor x = randn({192, 256});
  Tensor reference;
  {
    InferenceMode guard;
    reference = net->forward(x);
  }
  std::vector<int> bad(kThreads, 0);
  run_together([&](int t) {
    InferenceMode guard;
    for (int r = 0; r < 2; ++r)
      if (!equal(net->forward(x), reference)) ++bad[static_cast<size_t>(t)];
  });
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(bad[static_cast<size_t>(t)] == 0);
  }
  CHECK(net->is_training());
}
