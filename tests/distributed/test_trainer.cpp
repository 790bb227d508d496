// The Transformer trainer under mpirun -np 2 and -np 3, on translate_toy's 78
// training pairs (a multiple of 2 and 3: no padding, so the shards together are exactly
// one process's batches): N ranks at batch B follow one process at batch N·B step by step;
// only rank 0 writes the metrics log and the checkpoints; a checkpoint resumes under the
// same number of processes bit for bit, and under another.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../test_util.h"
#include "../toy_task.h"
#include "corpus.h"
#include "mpi_test_util.h"

using namespace kiln;
namespace dist = kiln::distributed;
namespace tr = kiln::transformer;
using kiln::testing::toy_model;
using kiln::testing::toy_task;
using kiln::testing::ToyTask;

namespace {

const ToyTask& task() {
  static const ToyTask t = toy_task(translate_toy::training_pairs());
  return t;
}

constexpr int64_t kBatch = 4;  // per process
constexpr uint64_t kDataSeed = 3;

// How far two float32 runs may part that add the same numbers in other orders (the
// shards' sums added by MPI, GEMMs of other shapes): ~1e-8 relative at first. In the first
// epoch the losses stay within kEarlyRtol (measured: 1e-7 at most). Later Adam's eps of
// 1e-9 (the trainer's default, the paper's) amplifies the difference wherever a second
// moment is near zero, where a rounding difference becomes a full step: measured up to
// 5e-4 in the second epoch, hence kLateRtol there. A wrong shard or a loss not weighted by
// every rank's tokens is off by 1e-3 to 1e-1 from the first step on (kFirstRtol).
constexpr double kFirstRtol = 1e-6;
constexpr double kEarlyRtol = 1e-5;
constexpr double kLateRtol = 2e-3;

std::unique_ptr<tr::Seq2SeqTransformer> fresh_model(double dropout = 0.0) {
  // Dropout 0 by default: the masks of N processes cannot be one process's.
  tr::Seq2SeqOptions o = toy_model(task(), 32, 4, 1, 64, dropout);
  o.pad_id = task().src_vocab.pad_id();
  manual_seed(1);
  return std::make_unique<tr::Seq2SeqTransformer>(o);
}

// Batches of `batch` from this rank's shard of `replicas` (one process: replicas 1).
data::PairDataLoader loader(int64_t replicas, int64_t rank, int64_t batch) {
  auto sampler = std::make_shared<data::DistributedSampler>(
      static_cast<int64_t>(task().pairs.size()),
      data::DistributedSamplerOptions{.num_replicas = replicas, .rank = rank, .shuffle = true, .seed = kDataSeed});
  return data::PairDataLoader(task().pairs, {.batch_size = batch, .shuffle = false, .sampler = sampler});
}

tr::TrainerOptions options(int64_t epochs) {
  tr::TrainerOptions t;
  t.epochs = epochs;
  t.lr_factor = 0.3;
  t.warmup_steps = 10;
  t.label_smoothing = 0.1;
  t.clip_grad_norm = 1.0;
  t.progress = false;
  t.checkpoint_keep_last = 1000;
  return t;
}

bool same_on_every_rank(const Tensor& t) {
  std::vector<float> mine = t.to(kFloat32).reshape({-1}).to_vector<float>();
  Tensor zero = t.detach().clone();
  dist::broadcast(zero, 0);
  Tensor equal = full({1}, mine == zero.to(kFloat32).reshape({-1}).to_vector<float>() ? 1.0 : 0.0);
  dist::all_reduce(equal);
  return equal.item() == dist::world_size();
}

// Rank 0's string on every rank.
std::string broadcast_string(const std::string& s) {
  Tensor n = full({1}, static_cast<double>(s.size()), kInt64);
  dist::broadcast(n, 0);
  std::vector<int64_t> bytes(static_cast<size_t>(n.item_int64()), 0);
  if (dist::rank() == 0)
    for (size_t i = 0; i < s.size(); ++i) bytes[i] = static_cast<unsigned char>(s[i]);
  Tensor t = from_vector<int64_t>(bytes, {static_cast<int64_t>(bytes.size())});
  dist::broadcast(t, 0);
  std::string out;
  for (int64_t b : t.to_vector<int64_t>()) out += static_cast<char>(b);
  return out;
}

// Steps from `from` on; those of the first epoch (the first `early` steps) within
// kEarlyRtol, the others within kLateRtol.
void check_losses_close(const std::vector<double>& got, const std::vector<double>& want, size_t early,
                        size_t from = 0) {
  REQUIRE(got.size() == want.size());
  double worst_early = 0, worst_late = 0;
  for (size_t i = from; i < got.size(); ++i) {
    INFO("step " << i + 1 << ": " << got[i] << " against " << want[i]);
    const double rel = std::abs(got[i] - want[i]) / std::abs(want[i]);
    if (i < early) {
      worst_early = std::max(worst_early, rel);
      CHECK(rel <= kEarlyRtol);
    } else {
      worst_late = std::max(worst_late, rel);
      CHECK(rel <= kLateRtol);
    }
  }
  MESSAGE("largest relative loss difference: " << worst_early << " in the first epoch, " << worst_late << " after");
}

}  // namespace

TEST_CASE("Trainer: N ranks at batch B give one process's per-step losses at batch N*B") {
  RANK_INFO();
  // The data-parallel run (the trainer's default under mpirun).
  auto model = fresh_model();
  data::PairDataLoader shard = loader(world_, rank_, kBatch);
  tr::Trainer trainer(*model, shard, nullptr, options(2));
  REQUIRE(trainer.data_parallel() != nullptr);
  CHECK(trainer.is_main_process() == (rank_ == 0));
  trainer.fit();

  // One process on the whole batches, here on every rank.
  auto alone = fresh_model();
  data::PairDataLoader whole = loader(1, 0, world_ * kBatch);
  tr::TrainerOptions o = options(2);
  o.data_parallel = false;
  tr::Trainer reference(*alone, whole, nullptr, o);
  CHECK(reference.data_parallel() == nullptr);
  reference.fit();

  CHECK(shard.num_batches() == whole.num_batches());
  CHECK(trainer.global_step() == 2 * whole.num_batches());
  check_losses_close(trainer.step_losses(), reference.step_losses(), static_cast<size_t>(whole.num_batches()));
  // The first step is the same computation on the same weights: within float32 rounding.
  CHECK(std::abs(trainer.step_losses()[0] - reference.step_losses()[0]) <= kFirstRtol * reference.step_losses()[0]);
  for (const Tensor& p : model->parameters()) CHECK(same_on_every_rank(p));
  CHECK(trainer.data_parallel()->stats().backward_passes == trainer.global_step());
}

TEST_CASE("Trainer: rank 0 alone writes the log and the checkpoints; a checkpoint resumes under any N") {
  RANK_INFO();
  std::unique_ptr<testing::ScratchDir> scratch;
  if (rank_ == 0) scratch = std::make_unique<testing::ScratchDir>("mpi_trainer");
  const std::string dir = broadcast_string(rank_ == 0 ? scratch->path.string() : "");
  const std::string ckpt_dir = dir + "/ckpt";

  auto model = fresh_model();
  data::PairDataLoader shard = loader(world_, rank_, kBatch);
  tr::TrainerOptions o = options(2);
  o.metrics_path = dir + "/metrics.csv";
  o.checkpoint_dir = ckpt_dir;
  o.checkpoint_every = 3;
  tr::Trainer trainer(*model, shard, nullptr, o);
  trainer.fit();
  const std::vector<double> full_run = trainer.step_losses();
  const int64_t steps = trainer.global_step();
  dist::barrier();  // rank 0's files are written

  // One header, one row per step and one per epoch: written once, not once per rank.
  std::ifstream metrics(dir + "/metrics.csv");
  int64_t lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  CHECK(lines == 1 + steps + 2);
  const std::string mid = ckpt_dir + "/ckpt-000000003.safetensors";
  REQUIRE(std::filesystem::exists(mid));

  {  // The same number of processes: bit for bit the uninterrupted run.
    auto again = fresh_model();
    tr::TrainerOptions r = options(2);
    r.resume_from = mid;
    tr::Trainer resumed(*again, shard, nullptr, r);
    CHECK(resumed.global_step() == 3);
    resumed.fit();
    REQUIRE(resumed.step_losses().size() == full_run.size());
    for (size_t i = 3; i < full_run.size(); ++i) CHECK(resumed.step_losses()[i] == full_run[i]);
  }
  {  // One process at N·B: the same batches, within float32 summation order.
    auto alone = fresh_model();
    data::PairDataLoader whole = loader(1, 0, world_ * kBatch);
    tr::TrainerOptions r = options(2);
    r.resume_from = mid;
    r.data_parallel = false;
    tr::Trainer resumed(*alone, whole, nullptr, r);
    resumed.fit();
    check_losses_close(resumed.step_losses(), full_run, static_cast<size_t>(whole.num_batches()), 3);
  }
  {  // One process at batch B: twice the batches per epoch; the epoch goes on from the
     // same fraction of it (step 3 of 10 or 7 is batch 6 of 20, or 5 of 14).
    auto alone = fresh_model();
    data::PairDataLoader small = loader(1, 0, kBatch);
    tr::TrainerOptions r = options(2);
    r.resume_from = mid;
    r.data_parallel = false;
    tr::Trainer resumed(*alone, small, nullptr, r);
    const int64_t first_epoch_left = small.num_batches() - 3 * small.num_batches() / shard.num_batches();
    resumed.fit();
    CHECK(resumed.global_step() == 3 + first_epoch_left + small.num_batches());
  }
  dist::barrier();  // before rank 0 removes the directory
}

TEST_CASE("Trainer: with dropout every rank keeps one generator state, and a checkpoint resumes bit for bit") {
  RANK_INFO();
  std::unique_ptr<testing::ScratchDir> scratch;
  if (rank_ == 0) scratch = std::make_unique<testing::ScratchDir>("mpi_trainer_dropout");
  const std::string dir = broadcast_string(rank_ == 0 ? scratch->path.string() : "");
  manual_seed(77);  // fresh_model reseeds; the trainer draws from here on
  auto model = fresh_model(0.2);
  data::PairDataLoader shard = loader(world_, rank_, kBatch);
  tr::TrainerOptions o = options(1);
  o.checkpoint_dir = dir;
  o.checkpoint_every = 2;
  tr::Trainer trainer(*model, shard, nullptr, o);
  const GeneratorState start = default_generator().get_state();
  trainer.fit();
  const GeneratorState end = default_generator().get_state();
  // Every rank drew its own masks (rank r > 0 under another key) and every generator moved
  // on by what all of them drew: one state.
  CHECK(end.seed == start.seed);
  CHECK(end.offset > start.offset);
  CHECK(same_on_every_rank(from_vector<int64_t>({static_cast<int64_t>(end.seed >> 1), static_cast<int64_t>(end.offset)}, {2})));
  dist::barrier();
  auto again = fresh_model(0.2);
  tr::TrainerOptions r = options(1);
  r.resume_from = dir + "/ckpt-000000002.safetensors";
  tr::Trainer resumed(*again, shard, nullptr, r);
  resumed.fit();
  REQUIRE(resumed.step_losses().size() == trainer.step_losses().size());
  for (size_t i = 2; i < trainer.step_losses().size(); ++i) CHECK(resumed.step_losses()[i] == trainer.step_losses()[i]);
  for (size_t i = 0; i < model->parameters().size(); ++i)
    CHECK(model->parameters()[i].to_vector<float>() == again->parameters()[i].to_vector<float>());
  dist::barrier();
}

TEST_CASE("Trainer: data parallel needs this rank's shard") {
  RANK_INFO();
  auto model = fresh_model();
  data::PairDataLoader plain(task().pairs, {.batch_size = kBatch, .shuffle = true, .seed = kDataSeed});
  CHECK_ERROR(tr::Trainer(*model, plain, nullptr, options(1)),
              "[Trainer] data-parallel training over ", " processes needs a training DataLoader that reads rank ",
              "'s shard: PairDataLoaderOptions::sampler = a DistributedSampler of ", "(it has none)");
  data::PairDataLoader other = loader(world_ + 1, 0, kBatch);
  CHECK_ERROR(tr::Trainer(*model, other, nullptr, options(1)), "replicas (it has ");
}

TEST_CASE("Trainer: a time budget stops every rank at the same step, on token-budget batches") {
  const int64_t world = dist::world_size(), rank = dist::rank();
  auto sampler = std::make_shared<data::DistributedSampler>(
      static_cast<int64_t>(task().pairs.size()),
      data::DistributedSamplerOptions{.num_replicas = world, .rank = rank, .shuffle = true, .seed = kDataSeed});
  data::PairDataLoader shard(task().pairs, {.shuffle = false, .max_tokens = 64, .sampler = sampler});
  auto model = fresh_model(0.1);
  tr::TrainerOptions o = options(1'000'000);
  o.max_seconds = 0.4;
  o.eval_every_seconds = 0.1;
  o.eval_metric_names = {"rank"};
  o.eval_metrics = [&](tr::Seq2SeqTransformer&) { return std::vector<double>{static_cast<double>(rank)}; };
  tr::Trainer trainer(*model, shard, nullptr, o);
  trainer.fit();
  // Each rank's own clock differs; the one the budget reads (the slowest's) does not, so
  // all stopped after the same step, evaluated at the same steps, and hold one model.
  CHECK(trainer.train_seconds() >= 0.4);
  CHECK(same_on_every_rank(full({1}, static_cast<double>(trainer.global_step()))));
  CHECK(same_on_every_rank(full({1}, trainer.train_seconds(), kFloat64)));
  CHECK(same_on_every_rank(full({1}, static_cast<double>(trainer.evaluations().size()))));
  for (const Tensor& p : model->parameters()) CHECK(same_on_every_rank(p));
}
