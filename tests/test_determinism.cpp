// The same bits on any thread count: training the Transformer of
// models/transformer (dropout on) for 50 steps (15 under the sanitizers, whose run would
// repeat the same kernels at ten times the cost) gives bitwise-identical losses and weights
// at 1, 2 and 4 threads, and so do the kernels that combine partial results (sums,
// matmul, softmax, layer_norm, cross_entropy, embedding backward) at sizes large enough
// to take their parallel paths. 4 threads also hold where the machine has fewer cores.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;

namespace {

constexpr int kThreadCounts[] = {1, 2, 4};

// A tensor's bytes (contiguous copy), for a bitwise comparison.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  std::vector<unsigned char> b(static_cast<size_t>(c.numel()) * c.element_size());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

bool same_bits(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// What a run produced, named: each thread count must produce the very same bytes.
using Results = std::vector<std::pair<std::string, std::vector<unsigned char>>>;

// Runs f at 1, 2 and 4 threads and checks that every result has the bits of the
// 1-thread run.
void check_same_bits_on_any_thread_count(const std::function<Results()>& f) {
  testing::ThreadsGuard guard;
  set_num_threads(1);
  const Results want = f();
  for (int threads : kThreadCounts) {
    if (threads == 1) continue;
    set_num_threads(threads);
    const Results got = f();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO(want[i].first << " at " << threads << " threads against 1 thread");
      CHECK(same_bits(got[i].second, want[i].second));
    }
  }
}

// Batch b of a toy translation task: source (N, S) and target (N, T) ids, ids from 3 up,
// 0 the padding at the end of some sentences, the target starting with 1 and ending with 2.
std::pair<Tensor, Tensor> batch_of(int64_t b, int64_t N, int64_t S, int64_t T, int64_t vocab) {
  std::vector<int64_t> src(static_cast<size_t>(N * S)), tgt(static_cast<size_t>(N * T));
  auto id = [&](int64_t i, int64_t j, int64_t salt) {
    uint64_t h = static_cast<uint64_t>((b * 131 + i) * 1000003 + j * 7919 + salt * 104729);
    h ^= h >> 13;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return 3 + static_cast<int64_t>(h % static_cast<uint64_t>(vocab - 3));
  };
  for (int64_t i = 0; i < N; ++i) {
    const int64_t pad = i % 4;  // the last `pad` positions of sentence i are padding
    for (int64_t j = 0; j < S; ++j) src[static_cast<size_t>(i * S + j)] = j < S - pad ? id(i, j, 1) : 0;
    const int64_t len = T - pad;  // bos, words, eos
    for (int64_t j = 0; j < T; ++j) {
      int64_t v = j == 0 ? 1 : j == len - 1 ? 2 : j < len ? id(i, j, 2) : 0;
      tgt[static_cast<size_t>(i * T + j)] = v;
    }
  }
  return {from_vector<int64_t>(src, {N, S}), from_vector<int64_t>(tgt, {N, T})};
}

}  // namespace

TEST_CASE("determinism: Transformer training steps give the same losses and weights at 1, 2 and 4 threads") {
  // Sizes past the kernels' parallel thresholds: 256 rows of 64..256 wide in every
  // linear layer (matmuls cut into blocks), layer_norm backward over 256 rows (row
  // chunks), attention over 16 x 4 heads, cross-entropy over 256 rows of 512 classes.
  constexpr int64_t kVocab = 512, kBatch = 16, kLen = 16, kSteps = testing::kSanitized ? 15 : 50;
  check_same_bits_on_any_thread_count([&] {
    manual_seed(2024);
    tr::Seq2SeqOptions mo;
    mo.src_vocab_size = kVocab;
    mo.tgt_vocab_size = kVocab;
    mo.d_model = 64;
    mo.nhead = 4;
    mo.num_encoder_layers = 2;
    mo.num_decoder_layers = 2;
    mo.dim_feedforward = 256;
    mo.dropout = 0.1;
    mo.max_len = 64;
    tr::Seq2SeqTransformer model(mo);
    tr::TrainerOptions to;
    to.progress = false;
    to.warmup_steps = 10;
    tr::Trainer trainer(model, to);
    Results out;
    for (int64_t step = 0; step < kSteps; ++step) {
      auto [src, tgt] = batch_of(step % 5, kBatch, kLen, kLen + 1, kVocab);
      trainer.train_step(src, tgt);
      const double norm = trainer.last_grad_norm();
      std::vector<unsigned char> nb(sizeof norm);
      std::memcpy(nb.data(), &norm, sizeof norm);
      out.emplace_back("grad norm of step " + std::to_string(step + 1), nb);
    }
    const std::vector<double>& losses = trainer.step_losses();
    REQUIRE(losses.size() == static_cast<size_t>(kSteps));
    CHECK(losses.back() < losses.front());  // it trained
    for (size_t s = 0; s < losses.size(); ++s) {
      std::vector<unsigned char> lb(sizeof(double));
      std::memcpy(lb.data(), &losses[s], sizeof(double));
      out.emplace_back("loss of step " + std::to_string(s + 1), lb);
    }
    for (const auto& [name, p] : model.named_parameters()) out.emplace_back("weight " + name, bytes_of(p));
    return out;
  });
}

TEST_CASE("determinism: sums, matmul, linear, softmax, layer_norm, cross_entropy, elementwise and embedding backward on large inputs") {
  check_same_bits_on_any_thread_count([] {
    manual_seed(7);
    Results out;
    // Sum of 1e6 floats, all of them and by columns (the column sum cuts its rows).
    Tensor big = randn({1000000});
    out.emplace_back("sum of 1e6 floats", bytes_of(sum(big)));
    out.emplace_back("column sums of (4000, 250)", bytes_of(sum(big.reshape({4000, 250}), {0})));
    // A 512x512x512 matmul, a tall one (M cut into blocks) and a wide one (N cut).
    Tensor a = randn({512, 512}), b = randn({512, 512});
    out.emplace_back("matmul 512x512x512", bytes_of(matmul(a, b)));
    out.emplace_back("matmul 2000x64x256", bytes_of(matmul(randn({2000, 64}), randn({64, 256}))));
    out.emplace_back("matmul 96x512x3000", bytes_of(matmul(randn({96, 512}), randn({512, 3000}))));
    // Products near OpenBLAS's small-matrix threshold: a block cut by the thread count
    // would take other kernels than the whole product (they gave other bits). From 2
    // MFLOP they run on oneDNN where Kiln has it; 120x80x80 stays on OpenBLAS, in blocks.
    out.emplace_back("matmul 120x80x80", bytes_of(matmul(randn({120, 80}), randn({80, 80}))));
    out.emplace_back("matmul 160x100x100", bytes_of(matmul(randn({160, 100}), randn({100, 100}))));
    out.emplace_back("matmul 100x100x200", bytes_of(matmul(randn({100, 100}), randn({100, 200}))));
    out.emplace_back("matmul 130x130x130", bytes_of(matmul(randn({130, 130}), randn({130, 130}))));
    // A linear layer with its bias (oneDNN adds it in the GEMM), forward and backward.
    Tensor lx = randn({600, 200}).requires_grad_(), lw = randn({300, 200}).requires_grad_(),
           lb = randn({300}).requires_grad_();
    Tensor ly = linear(lx, lw, lb);
    ly.backward(randn({600, 300}));
    out.emplace_back("linear", bytes_of(ly));
    out.emplace_back("linear grad x", bytes_of(lx.grad()));
    out.emplace_back("linear grad weight", bytes_of(lw.grad()));
    out.emplace_back("linear grad bias", bytes_of(lb.grad()));
    // Softmax on rows of 8192, forward and backward.
    Tensor s = randn({64, 8192}).requires_grad_();
    Tensor sy = softmax(s, -1);
    sy.backward(randn({64, 8192}));
    out.emplace_back("softmax", bytes_of(sy));
    out.emplace_back("softmax backward", bytes_of(s.grad()));
    // LayerNorm of 2048 rows of 1024, forward and backward (weight and bias gradients
    // sum over the rows).
    Tensor x = randn({2048, 1024}).requires_grad_();
    Tensor w = randn({1024}).requires_grad_(), bias = randn({1024}).requires_grad_();
    Tensor y = layer_norm(x, {1024}, w, bias);
    y.backward(randn({2048, 1024}));
    out.emplace_back("layer_norm", bytes_of(y));
    out.emplace_back("layer_norm grad x", bytes_of(x.grad()));
    out.emplace_back("layer_norm grad weight", bytes_of(w.grad()));
    out.emplace_back("layer_norm grad bias", bytes_of(bias.grad()));
    // Cross-entropy over a vocabulary of 32000 (mean over 256 rows), forward and backward.
    Tensor logits = randn({256, 32000}).requires_grad_();
    Tensor loss = cross_entropy(logits, randint(0, 32000, {256}));
    loss.backward();
    out.emplace_back("cross_entropy", bytes_of(loss));
    out.emplace_back("cross_entropy backward", bytes_of(logits.grad()));
    // Elementwise kernels cut where the thread count says: each element must still come
    // out the same, in a vectorized loop or its scalar tail (an odd size puts the cuts
    // mid-vector).
    Tensor odd = randn({1000003});
    out.emplace_back("exp", bytes_of(exp(odd)));
    out.emplace_back("gelu", bytes_of(gelu(odd)));
    out.emplace_back("sigmoid", bytes_of(sigmoid(odd)));
    // Embedding backward: 8192 ids drawn from 50 rows (each repeated ~160 times), 512 wide.
    Tensor table = randn({50, 512}).requires_grad_();
    Tensor e = embedding(table, randint(0, 50, {8192}));
    e.backward(randn({8192, 512}));
    out.emplace_back("embedding backward", bytes_of(table.grad()));
    return out;
  });
}

// The optimizers' fused updates are cut where the thread count says too; g++ once
// contracted AdamW's `p * (1 - lr wd) + step * ratio` one way in the vectorized body and
// the other in the scalar tail, so 17 of 100003 elements moved with the thread count.
TEST_CASE("determinism: Adam, AdamW (weight decay, amsgrad) and SGD steps on parameters past the parallel grain") {
  check_same_bits_on_any_thread_count([] {
    Results out;
    for (int variant = 0; variant < 3; ++variant) {
      Generator gen(23);
      std::vector<Tensor> params = {randn({100003}, TensorOptions(), &gen).requires_grad_(),
                                    randn({8197}, TensorOptions(kFloat64), &gen).requires_grad_(),
                                    randn({33}, TensorOptions(), &gen).requires_grad_()};
      std::unique_ptr<optim::Optimizer> opt;
      optim::AdamOptions o;
      o.lr = 0.01;
      if (variant == 0) {
        opt = std::make_unique<optim::Adam>(params, o);
      } else if (variant == 1) {
        o.weight_decay = 0.05;
        o.amsgrad = true;
        o.beta1 = 0.8;
        opt = std::make_unique<optim::AdamW>(params, o);
      } else {
        opt = std::make_unique<optim::SGD>(params,
                                           optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
      }
      for (int step = 0; step < 3; ++step) {
        for (Tensor& p : params) p.set_grad(randn(p.sizes(), TensorOptions(p.dtype()), &gen));
        opt->step();
      }
      for (size_t i = 0; i < params.size(); ++i) {
        out.emplace_back("optimizer " + std::to_string(variant) + " parameter " + std::to_string(i),
                         bytes_of(params[i]));
      }
    }
    return out;
  });
}
