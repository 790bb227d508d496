// Issue 14 (hardening), files: trainer checkpoints whose metadata values are checked on
// load, a trainer whose memory does not grow with the steps it has run, and the
// temporary files of interrupted saves removed by the next save once their process is
// gone.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"
#include "toy_task.h"

using namespace kiln;
namespace tr = kiln::transformer;
namespace fs = std::filesystem;
using kiln::testing::error_of;
using kiln::testing::ScratchDir;

namespace {


kiln::testing::ToyTask toy() {
  return kiln::testing::toy_task({{"ich mochte ein bier", "i want a beer ."},
                                  {"ich mochte ein cola", "i want a coke ."},
                                  {"du mochtest ein bier", "you want a beer ."}});
}

tr::TrainerOptions trainer_options(int64_t epochs) {
  tr::TrainerOptions o;
  o.epochs = epochs;
  o.lr_factor = 0.5;
  o.warmup_steps = 10;
  o.label_smoothing = 0.1;
  o.progress = false;
  return o;
}

// A copy of checkpoint `from` at `to` with the user metadata entry `key` set to `value`
// (or removed when value is null): a valid file with a bad value.
void rewrite_entry(const std::string& from, const std::string& to, const std::string& key, const char* value) {
  io::SafetensorsContents c = io::load_safetensors(from);
  if (value) c.metadata["user." + key] = value;
  else c.metadata.erase("user." + key);
  io::save_safetensors(to, c.tensors, c.metadata);
}

bool same_weights(tr::Seq2SeqTransformer& a, tr::Seq2SeqTransformer& b) {
  for (const auto& [name, p] : a.state_dict())
    if (!equal(p, b.state_dict().at(name))) return false;
  return true;
}

// A pid no process has: pid_max itself (pids are below it).
long absent_pid() {
  std::ifstream in("/proc/sys/kernel/pid_max");
  long pid_max = 0;
  in >> pid_max;
  return pid_max > 0 ? pid_max : 4194304;
}

void touch(const std::string& path) { std::ofstream(path) << "partial"; }

}  // namespace

TEST_CASE("Trainer::load checks every metadata value, names the entry and changes nothing") {
  kiln::testing::ToyTask t = toy();
  data::PairDataLoader loader(t.pairs, {.batch_size = 2, .shuffle = false});  // 2 batches an epoch
  ScratchDir dir("trainer_meta");
  manual_seed(3);
  tr::Seq2SeqTransformer a(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::TrainerOptions o = trainer_options(2);
  o.checkpoint_dir = dir / "ck";
  {
    tr::Trainer trainer(a, loader, nullptr, o);
    trainer.fit();  // 4 steps; last.safetensors is step 4's
  }
  const std::string good = dir / "ck/last.safetensors";
  const io::Metadata meta = io::load_safetensors_metadata(good);
  REQUIRE(meta.count("user.trainer.global_step"));

  struct Case {
    const char* key;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"trainer.global_step", "1e214", "'trainer.global_step' must be an integer from 0 to"},
      {"trainer.global_step", "-5", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", "nan", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", "99999999999999999999", "'trainer.global_step' must be an integer"},
      {"trainer.global_step", " 4", "'trainer.global_step' must be an integer"},
      {"trainer.epoch", "abc", "'trainer.epoch' must be an integer"},
      {"trainer.epoch", "", "'trainer.epoch' must be an integer"},
      {"trainer.next_batch", "-5", "'trainer.next_batch' must be an integer from 0 to 1, got '-5'"},
      {"trainer.next_batch", "2", "'trainer.next_batch' must be an integer from 0 to 1, got '2'"},
      {"trainer.best_loss", "nan", "'trainer.best_loss' must be a non-negative number or inf"},
      {"trainer.best_loss", "-1", "'trainer.best_loss' must be a non-negative number or inf"},
      {"trainer.step_losses", "1.5,nan", "'trainer.step_losses[1]' must be a finite non-negative number"},
      {"trainer.step_losses", "1.5,,2", "'trainer.step_losses[1]' must be a finite"},
      {"trainer.step_losses", "1,2,3,4,5,6,7,8", "8 entries in 'trainer.step_losses' but 'trainer.global_step' is"},
      {"trainer.epoch_loss_sum", "inf", "'trainer.epoch_loss_sum' must be a finite non-negative number"},
      {"trainer.epoch_loss_sum", "1e400", "'trainer.epoch_loss_sum' must be a finite"},
      {"trainer.global_step", nullptr, "has no 'trainer.global_step' entry"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.key);
    CAPTURE(c.value ? c.value : "(removed)");
    const std::string bad = dir / "bad.safetensors";
    rewrite_entry(good, bad, c.key, c.value);
    manual_seed(7);
    tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
    manual_seed(7);
    tr::Seq2SeqTransformer untouched(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
    tr::Trainer trainer(b, loader, nullptr, trainer_options(2));
    const std::string e = error_of([&] { trainer.load(bad); });
    CHECK(e.rfind("[Trainer::load] checkpoint '" + bad + "'", 0) == 0);
    CHECK_MESSAGE(e.find(c.message) != std::string::npos, e);
    // Nothing changed: the weights and where the run is.
    CHECK(same_weights(b, untouched));
    CHECK(trainer.global_step() == 0);
  }
  // The unchanged file loads.
  tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::Trainer trainer(b, loader, nullptr, trainer_options(2));
  trainer.load(good);
  CHECK(trainer.global_step() == 4);
  CHECK(same_weights(a, b));
}

TEST_CASE("Trainer: step_losses keeps the newest step_losses_kept and checkpoints carry no more") {
  kiln::testing::ToyTask t = toy();
  data::PairDataLoader loader(t.pairs, {.batch_size = 1, .shuffle = true, .seed = 2});  // 3 batches an epoch
  ScratchDir dir("trainer_kept");
  manual_seed(3);
  tr::Seq2SeqTransformer a(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.1));
  tr::TrainerOptions o = trainer_options(4);  // 12 steps
  o.step_losses_kept = 2;
  o.checkpoint_dir = dir / "ck";
  o.checkpoint_every = 5;  // step 5: mid-epoch 2, with more steps before it than kept
  o.checkpoint_keep_last = 100;
  tr::Trainer ta(a, loader, nullptr, o);
  std::vector<tr::EpochSummary> sa = ta.fit();
  REQUIRE(sa.size() == 4);
  CHECK(ta.global_step() == 12);
  CHECK(ta.step_losses().size() == 2);
  const io::Metadata meta = io::load_safetensors_metadata(dir / "ck/last.safetensors");
  const std::string losses = meta.at("user.trainer.step_losses");
  CHECK(std::count(losses.begin(), losses.end(), ',') == 1);  // two losses, not twelve

  // Resumed from step 5 (mid-epoch 2; the file has 2 losses, only one of them of this
  // epoch): the epoch's mean is still bitwise the uninterrupted run's.
  manual_seed(99);
  tr::Seq2SeqTransformer b(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.1));
  tr::TrainerOptions ob = o;
  ob.checkpoint_dir = dir / "ck_b";
  ob.resume_from = dir / "ck/ckpt-000000005.safetensors";
  tr::Trainer tb(b, loader, nullptr, ob);
  REQUIRE(tb.global_step() == 5);
  CHECK(tb.step_losses().size() == 2);
  std::vector<tr::EpochSummary> sb = tb.fit();
  REQUIRE(sb.size() == 3);
  CHECK(sb[0].epoch == 2);
  CHECK(sb[0].train_loss == sa[1].train_loss);  // bitwise
  CHECK(sb[2].train_loss == sa[3].train_loss);
  CHECK(tb.step_losses() == ta.step_losses());
  CHECK(same_weights(a, b));
}

TEST_CASE("Trainer: step_losses_kept must be non-negative") {
  kiln::testing::ToyTask t = toy();
  tr::Seq2SeqTransformer m(kiln::testing::toy_model(t, 16, 2, 1, 32, 0.0));
  tr::TrainerOptions o = trainer_options(1);
  o.step_losses_kept = -1;
  CHECK_ERROR_STARTS("[Trainer]", tr::Trainer(m, o), "step_losses_kept must be non-negative, got -1");
}

TEST_CASE("save_safetensors removes its file's temporaries of a dead process, not a live one's") {
  ScratchDir dir("temps");
  const std::string target = dir / "w.safetensors";
  const std::string dead = target + ".tmp." + std::to_string(absent_pid()) + ".0";
  const std::string absurd = target + ".tmp.99999999999999.3";  // no pid_t holds it
  const std::string live = target + ".tmp." + std::to_string(::getpid()) + ".7";
  const std::string other = dir / ("x.safetensors.tmp." + std::to_string(absent_pid()) + ".0");  // another file's
  const std::string unrelated = dir / "w.safetensors.tmp.notes";
  for (const std::string& p : {dead, absurd, live, other, unrelated}) touch(p);

  io::save_safetensors(target, {{"a", ones({2})}});
  CHECK_FALSE(fs::exists(dead));
  CHECK_FALSE(fs::exists(absurd));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  CHECK(fs::exists(unrelated));
  CHECK(fs::exists(target));

  // save_checkpoint writes through the same function.
  touch(dead);
  nn::Linear model(2, 2);
  io::save_checkpoint(target, {&model});
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
}

TEST_CASE("CheckpointManager reads the best file's metric strictly: garbage is no metric") {
  ScratchDir dir("manager_metric");
  nn::Linear model(2, 2);
  {
    train::CheckpointManager m(dir.path.string());
    m.save(1, {&model}, {}, 2.0);
  }
  // A metric of "0.5x" was read as 0.5 (strtod's prefix), better than any real loss.
  const std::string best = dir / "best.safetensors";
  io::SafetensorsContents c = io::load_safetensors(best);
  c.metadata["user.checkpoint_manager.metric"] = "0.5x";
  fs::remove(best);  // a hard link of the step file: write a file of its own
  io::save_safetensors(best, c.tensors, c.metadata);
  train::CheckpointManager m(dir.path.string());
  CHECK(std::isnan(m.best_metric()));
  CHECK(m.save(2, {&model}, {}, 1.0).best);
}

TEST_CASE("load_checkpoint refuses model weights that are not finite, naming the tensor, and changes nothing") {
  using namespace kiln;
  const std::string path =
      (fs::temp_directory_path() / ("kiln_nonfinite_" + std::to_string(::getpid()) + ".safetensors")).string();
  for (double bad : {NAN, INFINITY, -INFINITY}) {
    CAPTURE(bad);
    nn::Linear saved(3, 2);
    optim::Adam saved_opt(saved.parameters(), optim::AdamOptions{});
    {
      NoGradGuard no_grad;
      saved.bias.fill_(bad);
    }
    io::save_checkpoint(path, {&saved, &saved_opt});
    nn::Linear model(3, 2);
    optim::Adam opt(model.parameters(), optim::AdamOptions{});
    const Tensor before = model.weight.clone();
    CHECK_ERROR_STARTS("[load_checkpoint]", io::load_checkpoint(path, {&model, &opt}), "'model.bias'",
                       "NaN or infinite");
    CHECK(equal(model.weight, before));
  }
  fs::remove(path);
}
