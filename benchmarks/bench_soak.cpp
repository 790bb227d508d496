// bench_soak: does a long training run's memory stay flat? Trains a small
// Seq2SeqTransformer with the Transformer Trainer for N steps, writing the metrics log
// every step and a checkpoint every M steps, and prints the resident set size (current,
// from /proc/self/statm, and the peak, from getrusage) at every checkpoint. The last
// line compares the RSS at the last checkpoint with the one at the first.
//
//   bench_soak [--steps N] [--every M] [--threads T] [--dir DIR] [--kept K]
//   (defaults: 10000 steps, a checkpoint every 1000, every core, a temporary directory,
//   TrainerOptions::step_losses_kept's default)
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "../examples/common/cli.h"

namespace tr = kiln::transformer;
using kiln::Tensor;

namespace {

// Current and peak resident set size, KiB.
struct Rss {
  long current_kib, peak_kib;
};

Rss rss() {
  long pages_total = 0, pages_resident = 0;
  std::ifstream statm("/proc/self/statm");
  statm >> pages_total >> pages_resident;
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return {pages_resident * (::sysconf(_SC_PAGESIZE) / 1024), u.ru_maxrss};
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "bench_soak [--steps N] [--every M] [--threads T] [--dir DIR] [--kept K]");
  const int64_t steps = cli.integer("--steps", 10000, 1, 100'000'000);
  const int64_t every = cli.integer("--every", 1000, 1, 100'000'000);
  const int64_t threads = cli.integer("--threads", 0, 0, 4096);
  const int64_t kept = cli.integer("--kept", tr::TrainerOptions().step_losses_kept, 0, 100'000'000);
  std::string dir = cli.text("--dir", "");
  cli.finish();
  if (threads > 0) kiln::set_num_threads(static_cast<int>(threads));
  const bool temporary = dir.empty();
  if (temporary) dir = (std::filesystem::temp_directory_path() / ("kiln_soak_" + std::to_string(::getpid()))).string();
  cli.make_directory("--dir", dir);

  // Random sentences (ids 3 and up; 0 pads, 1 and 2 begin and end the targets), 32
  // batches of 16 that the steps cycle through.
  const int64_t vocab = 64, batch = 16, src_len = 10, tgt_len = 12, n_batches = 32;
  kiln::manual_seed(1);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int64_t b = 0; b < n_batches; ++b) {
    Tensor src = kiln::randint(3, vocab, {batch, src_len});
    Tensor tgt = kiln::randint(3, vocab, {batch, tgt_len});
    tgt.narrow(1, 0, 1).fill_(1.0);
    tgt.narrow(1, tgt_len - 1, 1).fill_(2.0);
    batches.emplace_back(src, tgt);
  }
  tr::Seq2SeqOptions mo;
  mo.src_vocab_size = vocab;
  mo.tgt_vocab_size = vocab;
  mo.d_model = 32;
  mo.nhead = 4;
  mo.num_encoder_layers = 1;
  mo.num_decoder_layers = 1;
  mo.dim_feedforward = 64;
  mo.dropout = 0.1;
  mo.max_len = 32;
  tr::Seq2SeqTransformer model(mo);

  tr::TrainerOptions to;
  to.warmup_steps = 100;
  to.progress = false;
  to.step_losses_kept = kept;
  tr::Trainer trainer(model, to);
  kiln::train::MetricsLog metrics((std::filesystem::path(dir) / "metrics.csv").string(), {"step", "loss"});
  const std::string checkpoint = (std::filesystem::path(dir) / "last.safetensors").string();

  std::printf("bench_soak: %lld steps, a checkpoint every %lld, %lld parameters, %s\n", (long long)steps,
              (long long)every, (long long)model.num_parameters(), kiln::config().c_str());
  Rss first{0, 0}, last{0, 0};
  for (int64_t step = 1; step <= steps; ++step) {
    const auto& [src, tgt] = batches[static_cast<size_t>((step - 1) % n_batches)];
    const double loss = trainer.train_step(src, tgt);
    metrics.write({static_cast<double>(step), loss});
    if (step % every == 0 || step == steps) {
      trainer.save(checkpoint);
      last = rss();
      if (first.current_kib == 0) first = last;
      std::printf("step %9lld  loss %.4f  rss %ld KiB  peak rss %ld KiB  checkpoint %lld bytes\n", (long long)step, loss,
                  last.current_kib, last.peak_kib, (long long)std::filesystem::file_size(checkpoint));
      std::fflush(stdout);
    }
  }
  const double growth = 100.0 * static_cast<double>(last.current_kib - first.current_kib) /
                        static_cast<double>(std::max(first.current_kib, 1L));
  std::printf("rss at the last checkpoint vs the first: %ld KiB vs %ld KiB (%+.3f%%)\n", last.current_kib,
              first.current_kib, growth);
  if (temporary) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("bench_soak", [&] { return run(argc, argv); });
}
