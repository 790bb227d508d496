// Data-parallel training steps: bench_train_step's model and batch, the batch cut into
// one shard per process, DistributedDataParallel averaging the gradients.
//
//   mpirun -np 2 bench_ddp_step --config small|base|tiny [--steps N] [--warmup W]
//                               [--threads T] [--bucket-cap-mb MB]
//   bench_ddp_step --config small --threads 2       (one process: no DDP, the baseline)
//
// The configurations are train_config.h's (--config seed is another name for base);
// --help prints the usage.
// Rank 0 prints one JSON line: ms/step (median over the timed steps of the slowest
// rank's step), tokens/s of the whole batch, the share of the step spent waiting for the
// all-reduces at the end of backward (DDP's wait, median over steps, of rank 0),
// the gradient bytes each rank all-reduces per step, the buckets, and, measured apart,
// how long an all-reduce of that many bytes takes here (the transport's speed, for the
// figures at other network speeds in history/). A --bucket-cap-mb larger than the model
// makes one bucket, which can only start when backward has ended: no overlap.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "train_step_setup.h"

namespace tr = kiln::transformer;
namespace dist = kiln::distributed;

namespace {

struct Args {
  std::string config = "small";
  int steps = 0, warmup = 2, threads = 0;
  double bucket_cap_mb = 25;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Args& a) {
  if (dist::launched_by_mpi()) dist::init();
  const int world = dist::is_initialized() ? dist::world_size() : 1;
  const int rank = dist::is_initialized() ? dist::rank() : 0;
  const bench::TrainConfig& c = bench::train_config(a.config);
  const int steps = a.steps > 0 ? a.steps : c.default_steps;
  if (a.threads > 0) kiln::set_num_threads(a.threads);
  if (c.batch % world != 0)
    throw std::invalid_argument("the batch of " + std::to_string(c.batch) + " does not split over " +
                                std::to_string(world) + " processes");
  kiln::manual_seed(0);
  tr::Seq2SeqTransformer model(bench::model_options(c));
  model.train();
  std::unique_ptr<kiln::nn::parallel::DistributedDataParallel> ddp;
  if (world > 1)
    ddp = std::make_unique<kiln::nn::parallel::DistributedDataParallel>(
        model, kiln::nn::parallel::DistributedDataParallelOptions{.bucket_cap_mb = a.bucket_cap_mb});
  kiln::optim::Adam optimizer(model.parameters(), bench::adam_options());

  const int64_t rows = c.batch / world, first = rank * rows;
  kiln::Tensor src = bench::ids(c, 1, first, rows), tgt_in = bench::ids(c, 2, first, rows),
               labels = bench::ids(c, 3, first, rows);
  auto step = [&] {
    kiln::Tensor logits = model.forward(src, tgt_in);
    // Each rank's mean; DDP averages the ranks (equal shards).
    kiln::Tensor loss = kiln::cross_entropy(logits.reshape({-1, c.vocab}), labels.reshape({-1}), 0);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss.item();
  };
  for (int i = 0; i < a.warmup; ++i) step();
  std::vector<double> ms, wait_share;
  for (int i = 0; i < steps; ++i) {
    if (ddp) dist::barrier();  // every rank starts the step together
    const double waited = ddp ? ddp->stats().wait_seconds : 0;
    const auto t0 = std::chrono::steady_clock::now();
    step();
    double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ddp) {
      wait_share.push_back((ddp->stats().wait_seconds - waited) * 1000.0 / t);
      kiln::Tensor slowest = kiln::full({1}, t, kiln::kFloat64);
      dist::all_reduce(slowest, dist::ReduceOp::kMax);
      t = slowest.item();
    }
    ms.push_back(t);
  }
  // The transport alone: an all-reduce of one step's gradient bytes, as one buffer.
  double allreduce_ms = 0;
  int64_t bytes = 0;
  size_t buckets = 1;
  std::string bucket_mb;  // each bucket's gradient MB, bucket 0 (started first) first
  double hook_started = 0;  // buckets per step whose all-reduce began during backward
  if (ddp) {
    bytes = ddp->stats().bytes / ddp->stats().backward_passes;
    buckets = ddp->bucket_parameter_names().size();
    hook_started = static_cast<double>(ddp->stats().buckets_started_in_hooks) /
                   static_cast<double>(ddp->stats().backward_passes);
    std::map<std::string, int64_t> param_bytes;
    for (const auto& [name, p] : model.named_parameters())
      param_bytes[name] = p.numel() * static_cast<int64_t>(p.element_size());
    for (const auto& names : ddp->bucket_parameter_names()) {
      int64_t b = 0;
      for (const std::string& n : names) b += param_bytes.at(n);
      char one[32];
      std::snprintf(one, sizeof one, "%s%.2f", bucket_mb.empty() ? "" : ", ", static_cast<double>(b) / 1e6);
      bucket_mb += one;
    }
    kiln::Tensor grads = kiln::zeros({bytes / 4});
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      dist::barrier();
      const auto t0 = std::chrono::steady_clock::now();
      dist::all_reduce(grads);
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    allreduce_ms = median(t);
  }
  if (rank != 0) return 0;
  const double step_ms = median(ms), tokens = static_cast<double>(c.batch * c.seq);
  std::printf(
      "{\"framework\": \"kiln\", \"config\": \"%s\", \"processes\": %d, \"threads\": %d, \"steps\": %d, "
      "\"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"allreduce_wait_share\": %.4f, \"grad_bytes_per_step\": %lld, "
      "\"buckets\": %zu, \"bucket_mb\": [%s], \"buckets_started_during_backward\": %.2f, \"bucket_cap_mb\": %g, "
      "\"allreduce_ms_of_those_bytes\": %.3f, \"parameters\": %lld}\n",
      c.name.c_str(), world, kiln::get_num_threads(), steps, step_ms, tokens / (step_ms / 1000.0),
      wait_share.empty() ? 0.0 : median(wait_share), static_cast<long long>(bytes), buckets, bucket_mb.c_str(), hook_started, a.bucket_cap_mb,
      allreduce_ms, static_cast<long long>(model.num_parameters()));
  return 0;
}

double real_option(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || !(x > 0)) throw std::invalid_argument(flag + " takes a positive number, got '" + v + "'");
  return x;
}

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: [mpirun -np N] bench_ddp_step [--config %s] [--steps S]\n"
               "         [--warmup W] [--threads T] [--bucket-cap-mb MB]\n"
               "The training step of the configuration (default small) with the batch split over the\n"
               "processes and DistributedDataParallel; rank 0 prints one JSON line.\n",
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
      if (f != "--config" && f != "--steps" && f != "--warmup" && f != "--threads" && f != "--bucket-cap-mb")
        throw std::invalid_argument("unknown option " + f);
      if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
      const std::string v = argv[++i];
      if (f == "--config") a.config = v;
      else if (f == "--steps") a.steps = bench::int_option(f, v, 1);
      else if (f == "--warmup") a.warmup = bench::int_option(f, v, 0);
      else if (f == "--threads") a.threads = bench::int_option(f, v, 0);
      else a.bucket_cap_mb = real_option(f, v);
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bench_ddp_step: %s\n", e.what());
    usage(stderr);
    return 2;
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    if (dist::is_initialized() && dist::world_size() > 1) dist::abort(std::string("bench_ddp_step: ") + e.what());
    std::fprintf(stderr, "bench_ddp_step: %s\n", e.what());
    return 1;
  }
}
