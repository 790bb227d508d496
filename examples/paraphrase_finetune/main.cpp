// Fine-tuning a pretrained sentence encoder on a real task: all-MiniLM-L6-v2 learns the
// Ding dictionary's English paraphrase sets (data::read_ding_paraphrases) with
// sentence-transformers' MultipleNegativesRankingLoss (in-batch negatives), fully or
// with LoRA adapters, and is scored before and after by recall@1 on held-out sets: for
// each test sentence, is its nearest other test sentence one of its paraphrases?
//
//   paraphrase_finetune --mode lora --epochs 1      # adapters on query and value (r 8)
//   paraphrase_finetune --mode full --epochs 1      # every weight
//
// Prints the trainable parameters, the loss as it trains, time per epoch and recall@1
// before and after; with LoRA it saves the adapter (PEFT's files) into --out.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <kiln/bert/kiln_bert.h>
#include <kiln/kiln.h>

#include "../common/cli.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, corpus = "/usr/share/trans/de-en", out = "paraphrase_finetune_out", mode = "lora";
  int64_t epochs = 1, batch_size = 32, lora_r = 8, max_steps = 0;
  double lr = 0, lora_alpha = 16, scale = 20;
  uint64_t seed = 1;
  int threads = 0;
};

std::string default_model() {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home ? home : "/") / ".cache/kiln/models";
  return (root / "all-MiniLM-L6-v2").string();
}

Args parse(kiln_examples::Cli& cli) {
  Args a;
  a.model = cli.nonempty_text("--model", default_model());
  a.corpus = cli.nonempty_text("--corpus", a.corpus);
  a.mode = cli.nonempty_text("--mode", a.mode);
  a.epochs = cli.integer("--epochs", a.epochs, 1, 1000);
  a.max_steps = cli.integer("--max-steps", 0, 0, 10'000'000);
  a.batch_size = cli.integer("--batch-size", a.batch_size, 2, 4096);
  a.lr = cli.real("--lr", 0, 0, 1);
  a.lora_r = cli.integer("--lora-r", a.lora_r, 1, 4096);
  a.lora_alpha = cli.real("--lora-alpha", a.lora_alpha, 1e-6, 1e6);
  a.scale = cli.real("--scale", a.scale, 1e-3, 1e3);
  a.seed = static_cast<uint64_t>(cli.integer("--seed", 1, 0, INT64_MAX));
  a.threads = static_cast<int>(cli.integer("--threads", 0, 0, 4096));
  a.out = cli.nonempty_text("--out", a.out);
  cli.finish();
  if (a.mode != "lora" && a.mode != "full") cli.fail("--mode must be lora or full, got " + a.mode);
  if (a.lr == 0) a.lr = a.mode == "lora" ? 1e-4 : 2e-5;  // sentence-transformers' 2e-5 for full
  cli.make_directory("--out", a.out);
  return a;
}

// For each test sentence, whether its nearest other test sentence (by cosine) is in its set.
double recall_at_1(const kiln::bert::SentenceTransformer& st, const std::vector<std::vector<std::string>>& sets) {
  std::vector<std::string> sentences;
  std::vector<int64_t> set_of;
  for (size_t i = 0; i < sets.size(); ++i)
    for (const std::string& s : sets[i]) {
      sentences.push_back(s);
      set_of.push_back(static_cast<int64_t>(i));
    }
  const int64_t n = static_cast<int64_t>(sentences.size());
  kiln::Tensor e = st.encode(sentences, 64);
  kiln::InferenceMode inference;
  kiln::Tensor sims = kiln::matmul(e, e.t());
  sims = kiln::sub(sims, kiln::mul(kiln::eye(n), 10.0));  // never oneself
  const std::vector<int64_t> nearest = kiln::argmax(sims, 1).to_vector<int64_t>();
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += set_of[static_cast<size_t>(nearest[static_cast<size_t>(i)])] == set_of[static_cast<size_t>(i)];
  return static_cast<double>(hits) / static_cast<double>(n);
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv,
                         "paraphrase_finetune [--mode lora|full] [--epochs N] [--max-steps N] [--batch-size B] [--lr LR]\n"
                         "                           [--lora-r R] [--lora-alpha A] [--scale S] [--seed S] [--threads T]\n"
                         "                           [--model DIR] [--corpus FILE] [--out DIR]");
  const Args a = parse(cli);
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  kiln::manual_seed(a.seed);
  KILN_CHECK(fs::exists(fs::path(a.model) / "modules.json"), "paraphrase_finetune", "no model at '", a.model,
             "': run scripts/fetch_models.sh (it fetches all-MiniLM-L6-v2) or give --model DIR");
  kiln::bert::SentenceTransformer st = kiln::bert::SentenceTransformer::from_directory(a.model);
  kiln::data::DingParaphraseOptions po;
  po.path = a.corpus;
  const kiln::data::ParaphraseSets sets = kiln::data::read_ding_paraphrases(po);
  std::printf("paraphrases: %s\n", sets.summary().c_str());

  const auto t_eval = Clock::now();
  const double before = recall_at_1(st, sets.test);
  std::printf("recall@1 before: %.4f (%zu test sets; %.1f s)\n", before, sets.test.size(),
              std::chrono::duration<double>(Clock::now() - t_eval).count());

  kiln::bert::BertModel& model = st.model();
  const kiln::nn::LoraConfig lora{.r = a.lora_r, .alpha = a.lora_alpha, .target_modules = {"query", "value"}};
  if (a.mode == "lora") kiln::nn::add_lora(model, lora);
  const std::vector<kiln::Tensor> params = kiln::nn::trainable_parameters(model);
  std::printf("trainable parameters: %lld of %lld (%s)\n", static_cast<long long>(model.num_parameters(true)),
              static_cast<long long>(model.num_parameters()), a.mode.c_str());
  kiln::optim::AdamW opt(params, {.lr = a.lr});
  model.train();  // the model's own dropout (0.1), as sentence-transformers trains

  // One (anchor, positive) pair per set per batch: two sentences of one set in a batch
  // would be each other's false negatives.
  std::mt19937_64 rng(a.seed);
  int64_t step = 0;
  double seconds = 0;
  for (int64_t epoch = 1; epoch <= a.epochs; ++epoch) {
    std::vector<size_t> order(sets.train.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const auto t0 = Clock::now();
    double loss_sum = 0;
    int64_t batches = 0;
    for (size_t s = 0; s + static_cast<size_t>(a.batch_size) <= order.size(); s += static_cast<size_t>(a.batch_size)) {
      std::vector<std::string> anchors, positives;
      for (size_t i = s; i < s + static_cast<size_t>(a.batch_size); ++i) {
        const auto& set = sets.train[order[i]];
        const size_t k = rng() % (set.size() - 1);
        anchors.push_back(set[k]);
        positives.push_back(set[k + 1]);
      }
      opt.zero_grad();
      const kiln::Tensor loss =
          kiln::bert::multiple_negatives_ranking_loss(st.forward(anchors), st.forward(positives), a.scale);
      loss.backward();
      opt.step();
      loss_sum += loss.item();
      ++batches;
      if (++step % 10 == 0) std::printf("  step %lld  loss %.4f\n", static_cast<long long>(step), loss_sum / batches);
      if (a.max_steps > 0 && step >= a.max_steps) break;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    seconds += s;
    std::printf("epoch %lld: %lld steps, mean loss %.4f, %.1f s\n", static_cast<long long>(epoch),
                static_cast<long long>(batches), loss_sum / std::max<int64_t>(batches, 1), s);
    if (a.max_steps > 0 && step >= a.max_steps) break;
  }
  model.eval();
  const double after = recall_at_1(st, sets.test);
  std::printf("recall@1 after: %.4f (before %.4f); %lld steps in %.1f s of training\n", after, before,
              static_cast<long long>(step), seconds);
  if (a.mode == "lora") {
    kiln::nn::save_lora((fs::path(a.out) / "adapter").string(), model, lora);
    std::printf("adapter written: %s/adapter/{adapter_model.safetensors,adapter_config.json}\n", a.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("paraphrase_finetune", [&] { return run(argc, argv); });
}
