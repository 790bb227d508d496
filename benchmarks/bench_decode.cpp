// Greedy decoding speed of models/transformer's Seq2SeqTransformer with and without
// the key/value cache: 100 target tokens per sentence, forced (no early end), so both
// do the same number of steps.
//
//   bench_decode [--config small|base|tiny] [--tokens N] [--batch B] [--threads T]
//                [--device cpu|cuda:N] [--uncached 0|1] [--runs R]
//
// The configurations are train_config.h's (--config seed is another name for base).
// --uncached 0 skips the uncached decoding (O(N^2) in the tokens: slow for long outputs)
// and prints 0 for it. --runs R decodes R times each way and reports the median.
//
// On a GPU every step reads its argmax back to the host, as greedy decoding does.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "train_step_setup.h"

namespace tr = kiln::transformer;
using kiln::Tensor;

namespace {

// Feeds the argmax of each step back in for `tokens` steps; returns seconds.
double decode(tr::Seq2SeqTransformer& model, const Tensor& src, int64_t tokens, bool cached) {
  kiln::NoGradGuard no_grad;
  auto t0 = std::chrono::steady_clock::now();
  Tensor memory = model.encode(src);
  const int64_t n = src.size(0);
  Tensor ys = kiln::full({n, 1}, 1.0, kiln::TensorOptions(kiln::kInt64).device(src.device()));
  std::vector<tr::DecoderLayerCache> cache;
  for (int64_t t = 0; t < tokens; ++t) {
    Tensor logits = cached ? model.decode_step(ys.narrow(1, t, 1), memory, src, cache) : model.decode(ys, memory, src);
    Tensor next = kiln::argmax(logits.select(1, logits.size(1) - 1), -1).unsqueeze(1);
    ys = kiln::cat({ys, next}, 1);
    if (!src.device().is_cpu()) (void)next.to_vector<int64_t>();  // the host waits for each token
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median of `runs` timings of f.
template <class F>
double median_of(int runs, F f) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) t.push_back(f());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run(const std::string& config, int64_t tokens, int64_t batch, kiln::Device device, bool uncached, int runs) {
  const bench::TrainConfig& c = bench::train_config(config);
  kiln::manual_seed(0);
  tr::Seq2SeqOptions o = bench::model_options(c);
  o.max_len = std::max(o.max_len, tokens + 2);  // the source's positions and the output's
  tr::Seq2SeqTransformer model(o);
  model.to(device);
  model.eval();
  Tensor src = bench::ids(c, 1, 0, batch).to(device);
  decode(model, src, 4, true);  // warm-up
  double with_cache = median_of(runs, [&] { return decode(model, src, tokens, true); });
  double without = uncached ? median_of(runs, [&] { return decode(model, src, tokens, false); }) : 0.0;
  double toks = static_cast<double>(tokens * batch);
  // The CPU's line is as it always was; another device adds its name at the end.
  const std::string device_field = device.is_cpu() ? "" : ", \"device\": \"" + device.str() + "\"";
  std::printf(
      "{\"config\": \"%s\", \"threads\": %d, \"batch\": %lld, \"tokens\": %lld, \"cached_tokens_per_s\": %.1f, "
      "\"uncached_tokens_per_s\": %.1f, \"speedup\": %.2f%s}\n",
      c.name.c_str(), kiln::get_num_threads(), static_cast<long long>(batch), static_cast<long long>(tokens),
      toks / with_cache, uncached ? toks / without : 0.0, without / with_cache, device_field.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "small", device = "cpu";
  int64_t tokens = 100, batch = 1;
  bool uncached = true;
  int runs = 1;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string f = argv[i];
      if (f != "--config" && f != "--tokens" && f != "--batch" && f != "--threads" && f != "--device" &&
          f != "--uncached" && f != "--runs")
        throw std::invalid_argument("unknown option " + f);
      if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
      const std::string v = argv[i + 1];
      if (f == "--config") config = v;
      else if (f == "--tokens") tokens = bench::int_option(f, v, 1);
      else if (f == "--batch") batch = bench::int_option(f, v, 1);
      else if (f == "--threads") kiln::set_num_threads(bench::int_option(f, v, 1));
      else if (f == "--device") device = v;
      else if (f == "--uncached") uncached = bench::int_option(f, v, 0) != 0;
      else runs = bench::int_option(f, v, 1);
    }
    return run(config, tokens, batch, kiln::Device(device), uncached, runs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
}
