// A Llama model from a GGUF file (SmolLM2-135M-Instruct, Q4_1, by default), as llama.cpp's
// llama-bench measures one: prompt processing (a prompt of P tokens in one forward
// through the KV cache, the last position's logits) and text generation (G tokens, one
// forward each, greedy), tokens a second.
//
//   bench_llama [--model FILE.gguf] [--weights q|f32|bf16] [--prompt P] [--gen G]
//               [--threads T] [--runs R]
//
//   --weights q     the file's blocks used in place (quantized_linear), the default
//             f32   the same model dequantised to float32 weights
//             bf16  the float32 model under bfloat16 autocast (bf16 products)
//
// The prompt is ids 1000 + (7919 * i) % 40000 (the same as benchmarks/llama_cpp_bench.py).
// Prints one JSON line: "pp_tokens_per_s" and "tg_tokens_per_s" (medians of R runs after
// one warm-up), the runs, "load_s", "peak_rss_mb" (the process's high-water resident
// memory, the mapped file's touched pages included), "threads", "cpu".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/llama/kiln_llama.h>

#include "../examples/common/cli.h"
#include "process_stats.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string default_model() {
  const char* cache = std::getenv("KILN_MODEL_CACHE");
  const char* home = std::getenv("HOME");
  const std::string root = cache && *cache ? cache : std::string(home ? home : "/") + "/.cache/kiln/models";
  return root + "/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Timing {
  double pp, tg;  // tokens a second
};

// One prompt, then `gen` greedy tokens, through a fresh cache.
Timing run_once(kiln::llama::LlamaForCausalLM& model, const std::vector<int64_t>& prompt, int64_t gen) {
  kiln::llama::KVCache cache(model.config, 1, static_cast<int64_t>(prompt.size()) + gen);
  const int64_t P = static_cast<int64_t>(prompt.size());
  auto t0 = Clock::now();
  kiln::Tensor logits = model.forward(kiln::from_vector<int64_t>(prompt, {1, P}), &cache, 1);
  const double pp = seconds_since(t0);
  t0 = Clock::now();
  for (int64_t i = 0; i < gen; ++i) {
    const int64_t next = kiln::argmax(logits.reshape({-1})).item<int64_t>();
    logits = model.forward(kiln::from_vector<int64_t>({next}, {1, 1}), &cache, 1);
  }
  const double tg = seconds_since(t0);
  return {static_cast<double>(P) / pp, static_cast<double>(gen) / tg};
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("bench_llama", [&] {
    kiln_examples::Cli cli(argc, argv,
                           "bench_llama [--model FILE.gguf] [--weights q|f32|bf16] [--prompt P] [--gen G] "
                           "[--threads T] [--runs R]");
    const std::string path = cli.nonempty_text("--model", default_model());
    const std::string weights = cli.nonempty_text("--weights", "q");
    const int64_t P = cli.integer("--prompt", 128, 1, 4096);
    const int64_t G = cli.integer("--gen", 128, 1, 4096);
    const int threads = static_cast<int>(cli.integer("--threads", 2, 1, 4096));
    const int runs = static_cast<int>(cli.integer("--runs", 5, 1, 1000));
    cli.finish();
    if (weights != "q" && weights != "f32" && weights != "bf16") cli.fail("--weights must be q, f32 or bf16");
    kiln::set_num_threads(threads);
    kiln::NoGradGuard no_grad;
    kiln::InferenceMode inference;
    const auto t0 = Clock::now();
    kiln::llama::GGUFLoadOptions o;
    o.dequantize = weights != "q";
    const auto model = kiln::llama::LlamaForCausalLM::from_gguf(path, o);
    const double load_s = seconds_since(t0);
    std::vector<int64_t> prompt(static_cast<size_t>(P));
    for (int64_t i = 0; i < P; ++i) prompt[i] = 1000 + (7919 * i) % 40000;
    // PyTorch's way to bfloat16 inference: float32 weights under bfloat16 autocast.
    std::optional<kiln::AutocastGuard> autocast;
    if (weights == "bf16") autocast.emplace(kiln::kBFloat16);
    run_once(*model, prompt, std::min<int64_t>(G, 8));  // warm-up
    std::vector<double> pp, tg;
    for (int r = 0; r < runs; ++r) {
      const Timing t = run_once(*model, prompt, G);
      pp.push_back(t.pp);
      tg.push_back(t.tg);
    }
    std::string pp_runs, tg_runs;
    for (size_t i = 0; i < pp.size(); ++i) {
      if (i > 0) {
        pp_runs += ", ";
        tg_runs += ", ";
      }
      pp_runs += std::to_string(pp[i]);
      tg_runs += std::to_string(tg[i]);
    }
    std::printf(
        "{\"engine\": \"kiln\", \"weights\": \"%s\", \"prompt\": %lld, \"gen\": %lld, \"pp_tokens_per_s\": %.2f, "
        "\"tg_tokens_per_s\": %.2f, \"pp_runs\": [%s], \"tg_runs\": [%s], \"load_s\": %.3f, \"peak_rss_mb\": %.1f, "
        "\"threads\": %d, \"cpu\": \"%s\"}\n",
        weights.c_str(), static_cast<long long>(P), static_cast<long long>(G), median(pp), median(tg), pp_runs.c_str(),
        tg_runs.c_str(), load_s, kiln_bench::peak_rss_mb(), threads, kiln_bench::cpu_model().c_str());
    return 0;
  });
}
