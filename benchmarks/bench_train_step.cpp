// One training step (forward, backward, Adam) of models/transformer's Seq2SeqTransformer:
// post-norm, ReLU, dropout 0.1, padding and causal masks, CrossEntropy ignoring pad.
//
//   bench_train_step --config seed|small|tiny [--steps N] [--warmup W] [--threads T]
//                    [--device cpu|cuda:N]
//
// Prints one JSON line: ms/step (median of the timed steps), tokens/s (target tokens,
// batch·seq), achieved GFLOP/s as 6·parameters·tokens/time, and the process's peak
// resident memory (getrusage), so run one configuration per process. On a GPU the step
// ends when its loss has reached the host (item() waits for the device), the tensor
// peak is the GPU's, and the line also says "device".
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "train_config.h"

namespace tr = kiln::transformer;

namespace {

kiln::Tensor ids(const bench::TrainConfig& c, int64_t salt) {
  std::vector<int64_t> v(static_cast<size_t>(c.batch * c.seq));
  for (int64_t i = 0; i < c.batch; ++i) {
    for (int64_t j = 0; j < c.seq; ++j) v[static_cast<size_t>(i * c.seq + j)] = bench::token_at(i, j, c.seq, c.vocab, salt);
  }
  return kiln::from_vector<int64_t>(v, {c.batch, c.seq});
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// The most bytes tensors held at once on the device (the allocator's count, without its cache).
double peak_tensor_mb(kiln::Device d) { return static_cast<double>(kiln::memory_stats(d).peak_bytes) / (1024.0 * 1024.0); }

int run(const std::string& config, int steps, int warmup, int threads, kiln::Device device);

}  // namespace

int main(int argc, char** argv) {
  std::string config = "tiny", device = "cpu";
  int steps = 0, warmup = 2, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--config") config = v;
    else if (f == "--steps") steps = std::stoi(v);
    else if (f == "--warmup") warmup = std::stoi(v);
    else if (f == "--threads") threads = std::stoi(v);
    else if (f == "--device") device = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", f.c_str());
      return 2;
    }
  }
  try {
    return run(config, steps, warmup, threads, kiln::Device(device));
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(const std::string& config, int steps, int warmup, int threads, kiln::Device device) {
  const bench::TrainConfig& c = bench::train_config(config);
  if (steps == 0) steps = c.name == "seed" ? 3 : c.name == "small" ? 20 : 200;
  if (threads > 0) kiln::set_num_threads(threads);
  kiln::manual_seed(0);

  tr::Seq2SeqOptions o;
  o.src_vocab_size = c.vocab;
  o.tgt_vocab_size = c.vocab;
  o.d_model = c.d_model;
  o.nhead = c.heads;
  o.num_encoder_layers = c.layers;
  o.num_decoder_layers = c.layers;
  o.dim_feedforward = c.d_ff;
  o.dropout = 0.1;
  o.max_len = std::max<int64_t>(c.seq + 1, 128);
  tr::Seq2SeqTransformer model(o);
  model.to(device);
  model.train();
  kiln::optim::AdamOptions adam;
  adam.lr = 1e-4;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  kiln::optim::Adam optimizer(model.parameters(), adam);

  kiln::Tensor src = ids(c, 1).to(device), tgt_in = ids(c, 2).to(device), labels = ids(c, 3).to(device);
  auto step = [&] {
    kiln::Tensor logits = model.forward(src, tgt_in);
    kiln::Tensor loss = kiln::cross_entropy(logits.reshape({-1, c.vocab}), labels.reshape({-1}), 0);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss.item();
  };
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  double loss = 0;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    loss = step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  double median = ms[ms.size() / 2];
  double tokens = static_cast<double>(c.batch * c.seq);
  double params = static_cast<double>(model.num_parameters());
  // The CPU's line is as it always was; another device adds its name at the end.
  const std::string device_field = device.is_cpu() ? "" : ", \"device\": \"" + device.str() + "\"";
  std::printf(
      "{\"framework\": \"kiln\", \"config\": \"%s\", \"threads\": %d, \"steps\": %d, \"ms_per_step\": %.3f, "
      "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"peak_tensor_mb\": %.1f, "
      "\"parameters\": %.0f, \"loss\": %.4f%s}\n",
      c.name.c_str(), kiln::get_num_threads(), steps, median, tokens / (median / 1000.0),
      6.0 * params * tokens / (median / 1000.0) / 1e9, peak_rss_mb(), peak_tensor_mb(device), params, loss,
      device_field.c_str());
  return 0;
}

}  // namespace
