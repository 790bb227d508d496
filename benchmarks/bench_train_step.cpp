// One training step (forward, backward, Adam) of models/transformer's Seq2SeqTransformer:
// post-norm, ReLU, dropout 0.1, padding and causal masks, CrossEntropy ignoring pad.
//
//   bench_train_step --config base|small|tiny [--steps N] [--warmup W] [--threads T]
//                    [--device cpu|cuda:N] [--bf16] [--flush-denormal] [--curve K]
//                    [--attention auto|tiled|materialized] [--recompute on|off]
//                    [--checkpoint-layers] [--checkpoint-ff | --no-checkpoint-ff] [--fused-loss]
//                    [--blas cublas|cublaslt] [--blas-tuning]
//
// The configurations are train_config.h's (--config seed is another name for base);
// --help prints the usage.
// Prints one JSON line: ms/step (median of the timed steps), tokens/s (target tokens,
// batch·seq), achieved GFLOP/s as 6·parameters·tokens/time, and the process's peak
// resident memory (getrusage), so run one configuration per process. On a GPU the step
// ends when its loss has reached the host (item() waits for the device), the tensor
// peak is the GPU's, and the line also says "device".
// --bf16: forward and loss under kiln::AutocastGuard(kBFloat16) (bfloat16 GEMMs, float32
// weights, gradients and Adam), as torch_train_step.py --bf16 runs torch.autocast; the
// line then says "autocast": "bf16". --curve K adds "curve": the loss of every K-th timed
// step (from the first), to compare precisions' loss curves (--warmup 0 --steps 200).
// --flush-denormal: kiln::set_flush_denormal(true) first, as torch_train_step.py
// --flush-denormal runs torch.set_flush_denormal(True); the line then says so.
// --attention: kiln::cuda::set_attention_kernel's choice for a GPU (default auto).
// --recompute: kiln::set_recompute_saved (layer norm outputs written again in backward
// instead of kept: autograd/recompute.h); the line then says which.
// --checkpoint-layers: Seq2SeqOptions::checkpoint_layers (every encoder and decoder layer
// through utils::checkpoint), as torch_train_step.py --checkpoint-layers wraps each layer
// in torch.utils.checkpoint; the line then says "checkpoint_layers": true.
// --checkpoint-ff: Seq2SeqOptions::checkpoint_feed_forward (each layer's feed-forward
// hidden layer through utils::checkpoint, its output freed too), as torch_train_step.py
// --checkpoint-ff wraps each layer's linear1, activation and dropout in
// torch.utils.checkpoint; the line then says "checkpoint_feed_forward": true.
// --no-checkpoint-ff: never (the line says false). Without either the model's default
// decides: checkpointed under autocast where saved activations are written again in
// backward (a GPU's default; the CPU's with --recompute on), as torch_train_step.py's
// plain step never does.
// --fused-loss: the generator and the loss as kiln::linear_cross_entropy on the decoder's
// output (Seq2SeqTransformer::decoder_output), the rows in chunks, instead of logits and
// cross_entropy: the same loss, and no (tokens, vocab) logits held from forward to
// backward. PyTorch has no such op (torch.nn.functional.linear_cross_entropy is a
// proposal), so torch_train_step.py keeps the composition; the line says
// "fused_loss": true.
// --blas: kiln::cuda::set_preferred_blas_library's choice for a GPU (default cublas); the
// line then says "blas".
// --blas-tuning: kiln::cuda::set_blas_tuning(true), with --blas cublaslt unless --blas
// says otherwise: each GEMM problem's algorithm the fastest of cuBLASLt's candidates, as
// timed in the first (warm-up) step; the line says "blas_tuning": true. PyTorch's like
// of it is TunableOp (torch_train_step.py --tunable-op).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "train_step_setup.h"

namespace tr = kiln::transformer;

namespace {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// The most bytes tensors held at once on the device (the allocator's count, without its cache).
double peak_tensor_mb(kiln::Device d) { return static_cast<double>(kiln::memory_stats(d).peak_bytes) / (1024.0 * 1024.0); }

struct Args {
  std::string config = "tiny", device = "cpu";
  int steps = 0, warmup = 2, threads = 0, curve = 0;
  bool bf16 = false, flush_denormal = false, checkpoint_layers = false, fused_loss = false, blas_tuning = false;
  std::optional<bool> checkpoint_ff;  // --checkpoint-ff / --no-checkpoint-ff; unset: the model's default
  std::optional<kiln::cuda::AttentionKernel> attention;  // --attention: the GPU's attention kernels
  std::optional<bool> recompute;                         // --recompute on|off
  std::optional<kiln::cuda::BlasLibrary> blas;           // --blas cublas|cublaslt
};


int run(const Args& a);

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: bench_train_step [--config %s] [--steps N] [--warmup W]\n"
               "         [--threads T] [--device cpu|cuda:N] [--bf16] [--flush-denormal] [--curve K]\n"
               "         [--attention auto|tiled|materialized] [--recompute on|off]\n"
               "         [--checkpoint-layers] [--checkpoint-ff | --no-checkpoint-ff] [--fused-loss]\n"
               "         [--blas cublas|cublaslt] [--blas-tuning]\n"
               "One training step of the configuration (default tiny), timed; prints one JSON line.\n",
               bench::kConfigNames);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string f = argv[i];
      if (f == "--help" || f == "-h") {
        usage(stdout);
        return 0;
      }
      bool* flag = f == "--bf16"                ? &a.bf16
                   : f == "--flush-denormal"    ? &a.flush_denormal
                   : f == "--checkpoint-layers" ? &a.checkpoint_layers
                   : f == "--fused-loss"        ? &a.fused_loss
                   : f == "--blas-tuning"       ? &a.blas_tuning
                                                : nullptr;
      if (flag) {  // an option without a value
        *flag = true;
        continue;
      }
      if (f == "--checkpoint-ff" || f == "--no-checkpoint-ff") {
        a.checkpoint_ff = f == "--checkpoint-ff";
        continue;
      }
      if (f != "--config" && f != "--steps" && f != "--warmup" && f != "--threads" && f != "--device" &&
          f != "--curve" && f != "--attention" && f != "--recompute" && f != "--blas")
        throw std::invalid_argument("unknown option " + f);
      if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
      const std::string v = argv[++i];
      if (f == "--config") a.config = v;
      else if (f == "--steps") a.steps = bench::int_option(f, v, 1);
      else if (f == "--warmup") a.warmup = bench::int_option(f, v, 0);
      else if (f == "--threads") a.threads = bench::int_option(f, v, 0);  // 0: the default
      else if (f == "--device") a.device = v;
      else if (f == "--attention") a.attention = bench::attention_option(v);
      else if (f == "--recompute") a.recompute = bench::on_off_option(f, v);
      else if (f == "--blas") a.blas = bench::blas_option(v);
      else a.curve = bench::int_option(f, v, 1);
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  try {
    return run(a);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {  // an unknown --config
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 2;
  }
}

namespace {

int run(const Args& a) {
  const bench::TrainConfig& c = bench::train_config(a.config);
  const kiln::Device device(a.device);
  const int steps = a.steps > 0 ? a.steps : c.default_steps;
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  if (a.attention) kiln::cuda::set_attention_kernel(*a.attention);
  if (a.recompute) kiln::set_recompute_saved(*a.recompute);
  if (a.blas_tuning && !a.blas) kiln::cuda::set_preferred_blas_library(kiln::cuda::BlasLibrary::Cublaslt);
  if (a.blas) kiln::cuda::set_preferred_blas_library(*a.blas);
  kiln::cuda::set_blas_tuning(a.blas_tuning);
  if (a.flush_denormal && !kiln::set_flush_denormal(true))
    throw std::invalid_argument("--flush-denormal: this CPU cannot flush denormals");
  kiln::manual_seed(0);

  tr::Seq2SeqOptions options = bench::model_options(c);
  options.checkpoint_layers = a.checkpoint_layers;
  options.checkpoint_feed_forward = a.checkpoint_ff;
  tr::Seq2SeqTransformer model(options);
  model.to(device);
  model.train();
  kiln::optim::Adam optimizer(model.parameters(), bench::adam_options());

  kiln::Tensor src = bench::ids(c, 1, 0, c.batch).to(device), tgt_in = bench::ids(c, 2, 0, c.batch).to(device),
               labels = bench::ids(c, 3, 0, c.batch).to(device);
  // The host's time until the step is queued (before item() waits): on a GPU, a step whose
  // enqueue time is close to its whole time is bound by the host, not the device.
  std::chrono::steady_clock::time_point queued;
  auto step = [&] {
    kiln::Tensor loss;
    {
      std::optional<kiln::AutocastGuard> autocast;  // forward and loss, as torch.autocast
      if (a.bf16) autocast.emplace(kiln::kBFloat16);
      if (a.fused_loss) {
        loss = kiln::linear_cross_entropy(model.decoder_output(src, tgt_in), model.generator->weight,
                                          model.generator->bias, labels, 0);
      } else {
        kiln::Tensor logits = model.forward(src, tgt_in);
        loss = kiln::cross_entropy(logits.reshape({-1, c.vocab}), labels.reshape({-1}), 0);
      }
    }
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    queued = std::chrono::steady_clock::now();
    return loss.item();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  std::vector<double> ms, enqueue_ms;
  double loss = 0;
  std::string curve;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    loss = step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    enqueue_ms.push_back(std::chrono::duration<double, std::milli>(queued - t0).count());
    if (a.curve > 0 && i % a.curve == 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.6f", curve.empty() ? "" : ", ", loss);
      curve += buf;
    }
  }
  std::sort(ms.begin(), ms.end());
  std::sort(enqueue_ms.begin(), enqueue_ms.end());
  double median = ms[ms.size() / 2];
  double tokens = static_cast<double>(c.batch * c.seq);
  double params = static_cast<double>(model.num_parameters());
  // The CPU's float32 line is as it always was; another device, autocast and the curve add
  // their fields at the end.
  std::string extra = device.is_cpu() ? "" : ", \"device\": \"" + device.str() + "\"";
  if (!device.is_cpu()) extra += ", \"enqueue_ms\": " + std::to_string(enqueue_ms[enqueue_ms.size() / 2]);
  if (a.bf16) extra += ", \"autocast\": \"bf16\"";
  if (a.flush_denormal) extra += ", \"flush_denormal\": true";
  if (a.recompute) extra += std::string(", \"recompute\": ") + (*a.recompute ? "true" : "false");
  if (a.checkpoint_layers) extra += ", \"checkpoint_layers\": true";
  if (a.checkpoint_ff) extra += std::string(", \"checkpoint_feed_forward\": ") + (*a.checkpoint_ff ? "true" : "false");
  if (a.fused_loss) extra += ", \"fused_loss\": true";
  if (a.blas || a.blas_tuning) {
    const bool lt = kiln::cuda::preferred_blas_library() == kiln::cuda::BlasLibrary::Cublaslt;
    extra += std::string(", \"blas\": ") + (lt ? "\"cublaslt\"" : "\"cublas\"");
  }
  if (a.blas_tuning) extra += ", \"blas_tuning\": true";
  if (a.curve > 0) extra += ", \"curve\": [" + curve + "]";
  std::printf(
      "{\"framework\": \"kiln\", \"config\": \"%s\", \"threads\": %d, \"steps\": %d, \"ms_per_step\": %.3f, "
      "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"peak_rss_mb\": %.1f, \"peak_tensor_mb\": %.1f, "
      "\"parameters\": %.0f, \"loss\": %.4f%s}\n",
      c.name.c_str(), kiln::get_num_threads(), steps, median, tokens / (median / 1000.0),
      6.0 * params * tokens / (median / 1000.0) / 1e9, peak_rss_mb(), peak_tensor_mb(device), params, loss,
      extra.c_str());
  return 0;
}

}  // namespace
