// Kiln's BERT encoder (models/bert) on real weights: all-MiniLM-L6-v2 from its own
// Hugging Face files, inference only (InferenceMode, eval: no dropout).
//
//   bench_bert [--model DIR] [--case forward|latency|corpus] [--threads T] [--runs R]
//              [--warmup W] [--bf16] [--device cpu|cuda:N] [--random-weights]
//              [--sentences-out FILE]
//
//   forward  a batch of 32 sequences x 128 tokens, every token real (the mask all 1):
//            [CLS], ids 1000 + (7919 * i) % 20000 for i = 0, 1, ..., [SEP] (the same as
//            benchmarks/torch_bert.py); the median of R runs after W
//   latency  one sequence of 16 tokens, the same ids; the median of R runs
//   corpus   SentenceTransformer::encode of the Ding dictionary's distinct English
//            sentences (tokenizer, model, pooling, normalisation; batch 32, longest
//            first), once: sentences/s
//
// Prints one JSON line: "case", "ms" (the median), "runs_ms", "sentences_per_s",
// "peak_rss_mb" (the process's high-water resident memory), "peak_tensor_mb", "threads",
// "cpu". --bf16 runs under bfloat16 autocast. --device runs the forward and latency cases
// on that device (a GPU's time includes waiting for its queue; peak_tensor_mb is then
// the GPU's). --random-weights builds the model from DIR's config.json alone, randomly
// initialised (mean pooling, normalised, as all-MiniLM-L6-v2): for timing where the
// weights cannot go (a GPU machine without the model files), since no step of the
// forward depends on the weights' values. --sentences-out FILE writes the corpus case's
// sentences, one a line, for benchmarks/torch_bert.py, and exits.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kiln/bert/kiln_bert.h>
#include <kiln/kiln.h>

#include "../examples/common/cli.h"
#include "process_stats.h"

namespace {

using Clock = std::chrono::steady_clock;

// (B, T) ids: [CLS], 1000 + (7919 i) % 20000 ..., [SEP].
kiln::Tensor bench_ids(int64_t B, int64_t T) {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t;
      ids.push_back(t == 0 ? 101 : t == T - 1 ? 102 : 1000 + (7919 * i) % 20000);
    }
  return kiln::from_vector(ids, {B, T});
}

std::string default_model() {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  return std::string(cache && *cache ? cache : std::string(home ? home : "/") + "/.cache/kiln/models") +
         "/all-MiniLM-L6-v2";
}

// The encoder a case times: the model and how its hidden states are pooled.
struct Encoder {
  std::shared_ptr<kiln::bert::BertModel> model;
  kiln::bert::Pooling pooling = kiln::bert::Pooling::Mean;
};

// The forward's products in GFLOP (two flops a multiply-add): each layer's four linear
// maps of H and its feed-forward's two of H x I over B·T tokens, and attention's scores
// and context (B·T² · H each). Over bench_peak's figure at the same threads: the least
// time any forward can take on this CPU.
double products_gflop(const kiln::bert::BertConfig& c, int64_t B, int64_t T) {
  const double tokens = static_cast<double>(B * T), H = static_cast<double>(c.hidden_size);
  const double I = static_cast<double>(c.intermediate_size);
  const double linear = 2 * tokens * (4 * H * H + 2 * H * I);
  const double attention = 2 * 2 * tokens * static_cast<double>(T) * H;
  return static_cast<double>(c.num_hidden_layers) * (linear + attention) / 1e9;
}

Encoder load_encoder(const std::string& dir, bool random_weights) {
  if (random_weights) {
    const auto config = kiln::bert::BertConfig::from_file(dir + "/config.json");
    auto model = std::make_shared<kiln::bert::BertModel>(config, /*add_pooling_layer=*/true);
    model->eval();
    return {model, kiln::bert::Pooling::Mean};
  }
  const kiln::bert::SentenceTransformer st = kiln::bert::SentenceTransformer::from_directory(dir);
  return {st.model_ptr(), st.pooling()};
}

std::vector<std::string> corpus_sentences() {
  const kiln::data::ParallelCorpus c = kiln::data::read_ding_corpus();
  std::vector<std::string> out;
  for (const auto* split : {&c.train, &c.valid, &c.test})
    for (const kiln::data::SentencePair& p : *split) out.push_back(p.target);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv,
                         "bench_bert [--model DIR] [--case forward|latency|corpus] [--threads T] [--runs R] "
                         "[--warmup W] [--bf16] [--device cpu|cuda:N] [--random-weights] [--sentences-out FILE]");
  const std::string model_dir = cli.nonempty_text("--model", default_model());
  const std::string which = cli.nonempty_text("--case", "forward");
  const int threads = static_cast<int>(cli.integer("--threads", 2, 1, 4096));
  const int runs = static_cast<int>(cli.integer("--runs", 10, 1, 100000));
  const int warmup = static_cast<int>(cli.integer("--warmup", 3, 0, 100000));
  const bool bf16 = cli.flag("--bf16");
  const std::string device_name = cli.nonempty_text("--device", "cpu");
  const bool random_weights = cli.flag("--random-weights");
  const std::string sentences_out = cli.text("--sentences-out", "");
  cli.finish();
  if (!sentences_out.empty()) {
    std::ofstream out(sentences_out);
    for (const std::string& s : corpus_sentences()) out << s << '\n';
    KILN_CHECK(out.good(), "bench_bert", "cannot write '", sentences_out, "'");
    return 0;
  }
  if (which != "forward" && which != "latency" && which != "corpus") cli.fail("--case must be forward, latency or corpus");
  const kiln::Device device(device_name);
  if (which == "corpus" && (device.is_cuda() || random_weights))
    cli.fail("--case corpus runs on the CPU with the model's own weights (no --device cuda, no --random-weights)");
  kiln::set_num_threads(threads);
  std::optional<kiln::AutocastGuard> autocast;
  if (bf16) autocast.emplace(kiln::kBFloat16);
  kiln::InferenceMode inference;
  std::vector<double> times;
  double sentences_per_s = 0, gflop = 0;  // gflop: the products of one forward (not for the corpus)
  if (which == "corpus") {
    const kiln::bert::SentenceTransformer st = kiln::bert::SentenceTransformer::from_directory(model_dir);
    const std::vector<std::string> sentences = corpus_sentences();
    const auto t0 = Clock::now();
    (void)st.encode(sentences, 32);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    times.push_back(s * 1000);
    sentences_per_s = static_cast<double>(sentences.size()) / s;
  } else {
    const int64_t B = which == "forward" ? 32 : 1, T = which == "forward" ? 128 : 16;
    const Encoder enc = load_encoder(model_dir, random_weights);
    gflop = products_gflop(enc.model->config, B, T);
    enc.model->to(device);
    const kiln::Tensor ids = bench_ids(B, T).to(device), mask = kiln::ones({B, T}, kiln::kInt64).to(device);
    for (int i = 0; i < warmup + runs; ++i) {
      const auto t0 = Clock::now();
      const kiln::bert::BertOutput out = enc.model->forward(ids, mask);
      (void)kiln::bert::l2_normalize(kiln::bert::pool(out.last_hidden_state, mask, enc.pooling));
      kiln::cuda::synchronize();  // a GPU's queue drained (a no-op on the CPU)
      if (i >= warmup) times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    sentences_per_s = static_cast<double>(B) / (times[times.size() / 2] / 1000);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  std::string list;
  for (double t : times) list += (list.empty() ? "" : ", ") + std::to_string(t);
  std::printf("{\"engine\": \"kiln\", \"case\": \"%s\", \"precision\": \"%s\", \"device\": \"%s\", "
              "\"weights\": \"%s\", \"ms\": %.3f, \"runs_ms\": [%s], \"sentences_per_s\": %.1f, \"products_gflop\": %.2f, "
              "\"peak_rss_mb\": %.1f, \"peak_tensor_mb\": %.1f, \"threads\": %d, \"cpu\": \"%s\"}\n",
              which.c_str(), bf16 ? "bf16" : "fp32", device.str().c_str(), random_weights ? "random" : "pretrained",
              sorted[sorted.size() / 2], list.c_str(), sentences_per_s, gflop, kiln_bench::peak_rss_mb(),
              static_cast<double>(kiln::memory_stats(device).peak_bytes) / (1024.0 * 1024.0), threads,
              kiln_bench::cpu_model().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("bench_bert", [&] { return run(argc, argv); });
}
