// kiln::train: the progress bar, the metrics log and the checkpoint directory that any
// training loop can use (framework/train).
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {


std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// What a FILE* has received so far.
std::string contents(std::FILE* f) {
  std::fflush(f);
  long end = std::ftell(f);
  std::rewind(f);
  std::string s(static_cast<size_t>(end), '\0');
  size_t got = std::fread(s.data(), 1, s.size(), f);
  s.resize(got);
  std::fseek(f, 0, SEEK_END);
  return s;
}


}  // namespace

// ====================================================================== ProgressBar

TEST_CASE("ProgressBar: a stream that is not a terminal gets plain lines, one per report or println") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    train::ProgressBar bar(10, f);
    CHECK_FALSE(bar.is_terminal());
    CHECK(bar.total() == 10);
    bar.set_unit("samples");
    for (int64_t step = 1; step <= 4; ++step) bar.update(step, "loss 0.5", 32);
    CHECK(contents(f).empty());  // the live bar is for terminals only
    bar.report(5, "epoch 1  loss 0.25", 32);
    bar.println("validation loss 0.3");
    bar.update(6, "loss 0.2", 32);
    bar.report(10, "", 32 * 4);
  }  // the destructor adds nothing: no bar line is open
  const std::string out = contents(f);
  std::fclose(f);
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find('\033') == std::string::npos);
  std::vector<std::string> lines = lines_of(out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("[############............] 5/10  epoch 1  loss 0.25  ", 0) == 0);
  CHECK(lines[0].find(" samples/s  ") != std::string::npos);
  CHECK(lines[0].find('<') != std::string::npos);
  CHECK(lines[1] == "validation loss 0.3");
  CHECK(lines[2].rfind("[########################] 10/10  ", 0) == 0);
  CHECK(lines[2].find(" samples/s  ") != std::string::npos);
  CHECK(out.back() == '\n');

  // Disabled, or without a stream: nothing at all.
  std::FILE* g = std::tmpfile();
  REQUIRE(g != nullptr);
  {
    train::ProgressBar off(10, g, /*enabled=*/false);
    off.update(1, "x");
    off.report(2, "x");
    off.println("x");
    train::ProgressBar none(10, nullptr);
    none.report(1, "x");
    none.println("x");
  }
  CHECK(contents(g).empty());
  std::fclose(g);
}

TEST_CASE("ProgressBar: rate, elapsed time and time left") {
  using train::ProgressBar;
  CHECK(ProgressBar::format_duration(9) == "0:09");
  CHECK(ProgressBar::format_duration(127) == "2:07");
  CHECK(ProgressBar::format_duration(3903) == "1:05:03");
  CHECK(ProgressBar::format_duration(-1) == "?");
  CHECK(ProgressBar::format_duration(NAN) == "?");
  CHECK(ProgressBar::format_rate(5120, "tok") == "5120 tok/s");
  CHECK(ProgressBar::format_rate(830.4, "samples") == "830 samples/s");
  CHECK(ProgressBar::format_rate(12.5, "samples") == "12.5 samples/s");
  CHECK(ProgressBar::format_rate(0.25, "tok") == "0.25 tok/s");
  CHECK(ProgressBar::format_rate(INFINITY, "tok") == "? tok/s");

  // 5 of 10 steps in 10 s at 415 samples/s: 10 s left.
  CHECK(ProgressBar::format_line(5, 10, "loss 0.5", 10.0, 5, 4150, "samples") ==
        "[############............] 5/10  loss 0.5  415 samples/s  0:10<0:10");
  // Resumed at step 6: 2 steps in 4 s, so the 2 left take 4 s; no unit, no rate.
  CHECK(ProgressBar::format_line(8, 10, "", 4.0, 2, 0, "") == "[###################.....] 8/10  0:04<0:04");
  // Tokens over an hour and a half: 5120 tok/s.
  CHECK(ProgressBar::format_line(300, 1000, "epoch 1/3", 5400.0, 300, 5120.0 * 5400, "tok") ==
        "[#######.................] 300/1000  epoch 1/3  5120 tok/s  1:30:00<3:30:00");
  // Nothing made yet: the time left is not known; past the end it is none.
  CHECK(ProgressBar::format_line(0, 10, "", 1.0, 0, 0, "") == "[........................] 0/10  0:01<?");
  CHECK(ProgressBar::format_line(12, 10, "", 1.0, 12, 0, "") == "[########################] 12/10  0:01<0:00");
}

// ====================================================================== MetricsLog

TEST_CASE("MetricsLog: CSV with a header, NaN written empty, append without a second header") {
  ScratchDir dir("metrics_csv");
  const std::string path = dir / "m.csv";
  {
    train::MetricsLog log(path, {"step", "loss", "val_loss"});
    CHECK(log.is_open());
    CHECK_FALSE(log.is_json());
    CHECK(log.path() == path);
    log.write({1, 0.5, NAN});
    log.write({2, 0.25, 0.125});
  }
  CHECK(read_text(path) == "step,loss,val_loss\n1,0.5,\n2,0.25,0.125\n");
  {
    train::MetricsLog log(path, {"step", "loss", "val_loss"}, /*append=*/true);  // a resumed run
    log.write({3, 1.0 / 3, INFINITY});
  }
  CHECK(read_text(path) == "step,loss,val_loss\n1,0.5,\n2,0.25,0.125\n3,0.333333333,\n");
  {
    train::MetricsLog log(path, {"step", "loss", "val_loss"});  // not appending: a new file
    log.write({7, 7, 7});
  }
  CHECK(read_text(path) == "step,loss,val_loss\n7,7,7\n");
  // Appending to a file that is not there yet, or empty, starts it with the header.
  const std::string fresh = dir / "fresh.csv";
  write_text(fresh, "");
  {
    train::MetricsLog log(fresh, {"a"}, /*append=*/true);
    log.write({1});
  }
  CHECK(read_text(fresh) == "a\n1\n");
  {
    train::MetricsLog log(dir / "new.csv", {"a"}, /*append=*/true);
    log.write({2});
  }
  CHECK(read_text(dir / "new.csv") == "a\n2\n");

  // A closed log (default-constructed, or moved from) writes nothing.
  train::MetricsLog closed;
  CHECK_FALSE(closed.is_open());
  closed.write({1, 2, 3});
  train::MetricsLog a(dir / "moved.csv", {"x"});
  train::MetricsLog b = std::move(a);
  b.write({4});
  CHECK(read_text(dir / "moved.csv") == "x\n4\n");
}

TEST_CASE("MetricsLog: JSON lines for .jsonl and .json, NaN as null") {
  ScratchDir dir("metrics_json");
  for (const char* name : {"m.jsonl", "m.json"}) {
    CAPTURE(name);
    const std::string path = dir / name;
    {
      train::MetricsLog log(path, {"step", "loss", "val_loss"});
      CHECK(log.is_json());
      log.write({1, 0.5, NAN});
    }
    {
      train::MetricsLog log(path, {"step", "loss", "val_loss"}, /*append=*/true);
      log.write({2, -0.25, 1e-12});
    }
    CHECK(read_text(path) ==
          "{\"step\":1,\"loss\":0.5,\"val_loss\":null}\n{\"step\":2,\"loss\":-0.25,\"val_loss\":1e-12}\n");
  }
}

TEST_CASE("MetricsLog: errors name MetricsLog and the file") {
  ScratchDir dir("metrics_errors");
  const std::string path = dir / "m.csv";
  train::MetricsLog log(path, {"step", "loss"});
  CHECK_ERROR_STARTS("[MetricsLog]", log.write({1}), path.c_str(), "expected 2 values, got 1");
  const std::string nowhere = dir / "no_such_dir/m.csv";
  CHECK_ERROR_STARTS("[MetricsLog]", train::MetricsLog(nowhere, {"a"}), "cannot open", nowhere.c_str(),
                     "No such file or directory");
  CHECK_ERROR_STARTS("[MetricsLog]", train::MetricsLog(dir / "x.csv", {}), "at least one column");
  CHECK_ERROR_STARTS("[MetricsLog]", train::MetricsLog(dir / "x.csv", {"a,b"}), "'a,b'");
  // Appending rows under another header would garble the table.
  log.write({1, 2});
  CHECK_ERROR_STARTS("[MetricsLog]", train::MetricsLog(path, {"step", "loss", "lr"}, true), path.c_str(),
                     "'step,loss'", "'step,loss,lr'");
  CHECK(read_text(path) == "step,loss\n1,2\n");
}

// ====================================================================== CheckpointManager

namespace {

// A small model with dropout, so that resuming must restore the random generator too.
struct Mlp : nn::Module {
  std::shared_ptr<nn::Sequential> net;
  Mlp() : Module("Mlp") {
    net = register_module("net", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 16),
                                                                  std::make_shared<nn::ReLU>(),
                                                                  std::make_shared<nn::Dropout>(0.2),
                                                                  std::make_shared<nn::Linear>(16, 1)));
  }
  Tensor forward(const Tensor& x) { return net->forward(x); }
};

struct Run {
  Mlp model;
  optim::Adam optimizer;
  Run() : optimizer(model.parameters(), optim::AdamOptions{.lr = 0.01}) {}
  io::CheckpointParts parts() { return {&model, &optimizer}; }
  // One step on a fresh random batch (drawn from the default generator, as a shuffling
  // loader would); returns the loss.
  double step() {
    Tensor x = randn({8, 3});
    Tensor y = x.sum(1, true).sin();
    Tensor loss = mse_loss(model.forward(x), y);
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    return loss.item();
  }
};

// A copy of a state (state_dict's tensors are the live parameters and buffers).
std::map<std::string, Tensor> snapshot(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> copy;
  for (const auto& [name, t] : state) copy[name] = t.detach().clone();
  return copy;
}

void check_same_state(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& entry : a) {
    const std::string& name = entry.first;
    CAPTURE(name);
    REQUIRE(b.count(name));
    CHECK(equal(entry.second, b.at(name)));  // bitwise
  }
}

// A checkpoint whose content does not matter (a tiny model).
void save_tiny(train::CheckpointManager& m, int64_t step, double metric = NAN) {
  nn::Linear lin(1, 1);
  m.save(step, {&lin}, {{"step", std::to_string(step)}}, metric);
}

}  // namespace

TEST_CASE("CheckpointManager: step-numbered files, the last keep_last kept, nothing else touched") {
  ScratchDir dir("ckpt_keep");
  write_text(dir / "notes.txt", "mine");
  write_text(dir / "ckpt-5.safetensors", "not the manager's spelling");
  write_text(dir / "model.safetensors", "someone else's");
  train::CheckpointManager m(dir.path.string(), {.keep_last = 2});
  CHECK(m.latest().empty());
  CHECK(m.latest_step() == -1);
  CHECK(m.best().empty());
  CHECK(std::isnan(m.best_metric()));
  CHECK(m.path_for(1200) == dir / "ckpt-000001200.safetensors");
  for (int64_t step : {100, 200, 300, 400}) save_tiny(m, step);
  std::vector<train::CheckpointInfo> all = m.checkpoints();
  REQUIRE(all.size() == 2);
  CHECK(all[0].step == 300);
  CHECK(all[0].path == dir / "ckpt-000000300.safetensors");
  CHECK(all[1].step == 400);
  CHECK(m.latest() == dir / "ckpt-000000400.safetensors");
  CHECK(m.latest_step() == 400);
  CHECK(dir.entries() == std::vector<std::string>{"ckpt-000000300.safetensors", "ckpt-000000400.safetensors",
                                                       "ckpt-5.safetensors", "model.safetensors", "notes.txt"});
  CHECK(read_text(dir / "notes.txt") == "mine");

  // Steps past 9 digits still sort by number.
  save_tiny(m, 1234567890);
  CHECK(m.latest() == dir / "ckpt-1234567890.safetensors");

  // A save of an earlier step (a run restarted from an older checkpoint) drops the later
  // ones, so that latest() is the last one saved.
  CHECK(m.checkpoints().size() == 2);  // 400 and 1234567890
  save_tiny(m, 350);
  all = m.checkpoints();
  REQUIRE(all.size() == 1);
  CHECK(all[0].step == 350);

  // keep_last = 1 with an alias: the newest under a fixed name as well.
  ScratchDir dir2("ckpt_alias");
  train::CheckpointManager one(dir2.path.string(), {.keep_last = 1, .latest_alias = "last.safetensors"});
  save_tiny(one, 1);
  save_tiny(one, 2);
  CHECK(dir2.entries() == std::vector<std::string>{"ckpt-000000002.safetensors", "last.safetensors"});
  CHECK(read_text(dir2 / "last.safetensors") == read_text(one.latest()));

  // clear(): a fresh start in a used directory removes the manager's files only.
  nn::Linear lin(1, 1);
  CHECK(m.save(400, {&lin}, {}, 0.5).best);
  m.clear();
  CHECK(m.checkpoints().empty());
  CHECK(m.best().empty());
  CHECK(std::isnan(m.best_metric()));
  CHECK(dir.entries() == std::vector<std::string>{"ckpt-5.safetensors", "model.safetensors", "notes.txt"});
}

TEST_CASE("CheckpointManager: the best by a metric, kept across a restart") {
  ScratchDir dir("ckpt_best");
  const std::string best = dir / "best.safetensors";
  {
    train::CheckpointManager m(dir.path.string(), {.keep_last = 2});
    nn::Linear lin(2, 2);
    auto save = [&](int64_t step, double metric) {
      lin.weight.detach().fill_(static_cast<double>(step));  // tell the files apart
      return m.save(step, {&lin}, {}, metric).best;
    };
    CHECK(save(1, 2.0));  // the first finite metric is the best
    CHECK(m.best() == best);
    CHECK(m.best_metric() == 2.0);
    const std::string first = read_text(best);
    CHECK(first == read_text(m.path_for(1)));
    CHECK_FALSE(save(2, 3.0));  // worse: best stays step 1's
    CHECK_FALSE(save(3, 2.0));  // equal is no improvement
    CHECK_FALSE(save(4, NAN));  // NaN never is best
    CHECK_FALSE(save(5, INFINITY));
    CHECK(read_text(best) == first);
    CHECK_FALSE(fs::exists(m.path_for(1)));  // pruned, but the best file keeps its content
    CHECK(m.best_metric() == 2.0);
    CHECK(save(6, 1.5));
    CHECK(m.best_metric() == 1.5);
    CHECK(read_text(best) == read_text(m.path_for(6)));
    nn::Linear back(2, 2);
    io::load_checkpoint(best, {&back});
    CHECK(back.weight.to_vector<float>() == std::vector<float>(4, 6.0f));
  }
  // A new manager (a restarted process) finds the same checkpoints and the same best.
  train::CheckpointManager again(dir.path.string(), {.keep_last = 2});
  CHECK(again.best_metric() == 1.5);
  CHECK(again.latest() == again.path_for(6));
  std::vector<train::CheckpointInfo> all = again.checkpoints();
  REQUIRE(all.size() == 2);
  CHECK(all[0].step == 5);
  save_tiny(again, 7, 1.6);
  CHECK(again.best_metric() == 1.5);
  CHECK(read_text(best) == read_text(again.path_for(6)));
  save_tiny(again, 8, 1.4);
  CHECK(again.best_metric() == 1.4);
  CHECK(read_text(best) == read_text(again.path_for(8)));

  // Higher is better (an accuracy); no best file at all with best_name "".
  ScratchDir dir2("ckpt_best_high");
  train::CheckpointManager acc(dir2.path.string(), {.lower_is_better = false});
  nn::Linear lin(1, 1);
  CHECK(acc.save(1, {&lin}, {}, 0.5).best);
  CHECK_FALSE(acc.save(2, {&lin}, {}, 0.4).best);
  CHECK(acc.save(3, {&lin}, {}, 0.9).best);
  CHECK(acc.best_metric() == 0.9);
  ScratchDir dir3("ckpt_no_best");
  train::CheckpointManager nobest(dir3.path.string(), {.best_name = ""});
  CHECK_FALSE(nobest.save(1, {&lin}, {}, 0.5).best);
  CHECK(nobest.best().empty());
  CHECK(dir3.entries() == std::vector<std::string>{"ckpt-000000001.safetensors"});
}

TEST_CASE("CheckpointManager: resume restores model and optimizer bitwise; training continues as if never stopped") {
  ScratchDir dir("ckpt_resume");
  constexpr int kSteps = 6, kStop = 3;

  // Uninterrupted.
  manual_seed(7);
  Run a;
  std::vector<double> losses_a;
  for (int i = 0; i < kSteps; ++i) losses_a.push_back(a.step());

  // The same run, saved after step 3 and then abandoned.
  manual_seed(7);
  std::map<std::string, Tensor> model_at_stop, optimizer_at_stop;
  {
    Run b;
    train::CheckpointManager m(dir.path.string());
    for (int i = 0; i < kStop; ++i) CHECK(b.step() == losses_a[static_cast<size_t>(i)]);
    m.save(kStop, b.parts(), {{"epoch", "1"}, {"note", "after step 3"}}, 0.5);
    model_at_stop = snapshot(b.model.state_dict());
    optimizer_at_stop = snapshot(b.optimizer.state_dict());
    (void)b.step();  // work after the checkpoint is lost
  }
  // Meanwhile the generator moved on.
  manual_seed(12345);
  (void)randn({50});

  // A new process: a new model (other weights), a new optimizer, a new manager.
  Run c;
  train::CheckpointManager m(dir.path.string());
  CHECK(m.latest() == m.path_for(kStop));
  CHECK(m.latest_step() == kStop);
  io::Metadata meta = m.resume(c.parts());
  CHECK(meta == io::Metadata{{"epoch", "1"}, {"note", "after step 3"}});  // as saved, nothing added
  check_same_state(c.model.state_dict(), model_at_stop);
  check_same_state(c.optimizer.state_dict(), optimizer_at_stop);
  for (int i = kStop; i < kSteps; ++i) {
    CAPTURE(i);
    CHECK(c.step() == losses_a[static_cast<size_t>(i)]);  // bitwise
  }
  check_same_state(c.model.state_dict(), a.model.state_dict());

  // Nothing to resume in an empty directory.
  ScratchDir empty("ckpt_resume_empty");
  train::CheckpointManager none(empty.path.string());
  CHECK_ERROR_STARTS("[CheckpointManager]", none.resume(c.parts()), "nothing to resume", empty.path.c_str());
}

TEST_CASE("CheckpointManager: temporary files of an interrupted save (its process gone) are removed, nothing else") {
  ScratchDir dir("ckpt_temp");
  // The name io's atomic write gives its temporary file is what the manager looks for.
  const std::string target = "ckpt-000000003.safetensors";
  const std::string io_tmp = fs::path(io::atomic_temp_path(dir / target)).filename().string();
  CHECK(io_tmp.rfind(target + ".tmp.", 0) == 0);
  CHECK(io::is_atomic_temp_of(io_tmp, target));
  CHECK_FALSE(io::is_atomic_temp_of(target + ".tmp.1", target));
  CHECK_FALSE(io::is_atomic_temp_of(target + ".tmp.1.x", target));
  CHECK_FALSE(io::is_atomic_temp_of(target, target));

  // Left by a process that is gone: pid_max itself is no process's pid (they are below it).
  long pid_max = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  REQUIRE(pid_max > 1);
  const std::string dead = std::to_string(pid_max);
  const std::vector<std::string> stale = {target + ".tmp." + dead + ".0", "ckpt-000000001.safetensors.tmp." + dead + ".7",
                                          "best.safetensors.tmp.0.17", "last.safetensors.tmp." + dead + ".2"};
  const std::vector<std::string> unrelated = {
      io_tmp,                                   // this process's: a save in progress
      "notes.txt",                              // a user's file
      "model.safetensors.tmp.1.2",              // another file's temporary
      "ckpt-1.safetensors.tmp.1.2",             // not the manager's spelling of a step
      "ckpt-000000003.safetensors.tmp.1",       // not the temporary pattern
      "ckpt-000000003.safetensors.tmp.1.2.bak"};
  for (const std::string& n : stale) write_text(dir / n, "partial");
  for (const std::string& n : unrelated) write_text(dir / n, "keep me");
  {
    // Without a latest alias, "last.safetensors" is not one of its names: its temporary stays.
    train::CheckpointManager m(dir.path.string());
    for (size_t i = 0; i < 3; ++i) CHECK_FALSE(fs::exists(dir / stale[i]));
    CHECK(fs::exists(dir / stale[3]));
    save_tiny(m, 1);
  }
  for (const std::string& n : stale) write_text(dir / n, "partial");
  train::CheckpointManager m(dir.path.string(), {.latest_alias = "last.safetensors"});
  for (const std::string& n : stale) {
    CAPTURE(n);
    CHECK_FALSE(fs::exists(dir / n));
  }
  for (const std::string& n : unrelated) {
    CAPTURE(n);
    CHECK(read_text(dir / n) == "keep me");
  }
  CHECK(m.latest() == m.path_for(1));
  // A save leaves no temporary file of its own.
  save_tiny(m, 2, 0.1);
  std::vector<std::string> names = dir.entries();
  std::vector<std::string> expected = unrelated;
  expected.insert(expected.end(), {"best.safetensors", "ckpt-000000001.safetensors", "ckpt-000000002.safetensors",
                                   "last.safetensors"});
  std::sort(expected.begin(), expected.end());
  CHECK(names == expected);
}

TEST_CASE("io::load_safetensors_metadata reads a checkpoint's metadata from its header alone") {
  ScratchDir dir("metadata");
  nn::Linear lin(3, 2);
  const std::string path = dir / "c.safetensors";
  io::save_checkpoint(path, {&lin}, {{"epoch", "4"}});
  io::Metadata meta = io::load_safetensors_metadata(path);
  CHECK(meta.at("user.epoch") == "4");
  CHECK(meta.at("format") == "kiln-checkpoint-1");
  CHECK(meta == io::load_safetensors(path).metadata);
  // The tensors are not read: a file cut short after its header still gives its metadata.
  const std::string bytes = read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  write_text(dir / "cut.safetensors", bytes.substr(0, 8 + n));
  CHECK(io::load_safetensors_metadata(dir / "cut.safetensors") == meta);
  write_text(dir / "short.safetensors", bytes.substr(0, 8 + n / 2));
  const std::string cut = dir / "short.safetensors";
  CHECK_ERROR_STARTS("[safetensors]", io::load_safetensors_metadata(cut), cut.c_str(), "runs past the end");
  CHECK_ERROR_STARTS("[safetensors]", io::load_safetensors_metadata(dir / "none"), "cannot open");
}

TEST_CASE("CheckpointManager: bad options and directories name CheckpointManager and what was given") {
  ScratchDir dir("ckpt_bad");
  const std::string d = dir.path.string();
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(d, {.keep_last = 0}), "keep_last", "got 0");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(d, {.keep_last = -3}), "got -3");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(""), "directory must not be empty");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(d, {.prefix = ""}), "prefix");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(d, {.prefix = "a/b"}), "'a/b'");
  CHECK_ERROR_STARTS("[CheckpointManager]",
                     train::CheckpointManager(d, {.best_name = "x.safetensors", .latest_alias = "x.safetensors"}),
                     "must differ", "'x.safetensors'");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(d, {.latest_alias = "ckpt-000000001.safetensors"}),
                     "'ckpt-000000001.safetensors'", "name pattern");

  // A file where the directory should be, or on the way to it.
  const std::string file = dir / "a_file";
  write_text(file, "x");
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(file), file.c_str(), "is not a directory");
  const std::string under = dir / "a_file/sub";
  CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(under), "cannot create", under.c_str());
  CHECK(read_text(file) == "x");

  // A directory it cannot write (root may write anywhere: nothing to check then).
  const std::string ro = dir / "read_only";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(ro.c_str(), W_OK) != 0) {
    CHECK_ERROR_STARTS("[CheckpointManager]", train::CheckpointManager(ro), ro.c_str(), "not writable");
  }
  fs::permissions(ro, fs::perms::owner_all);

  // Bad saves change nothing.
  train::CheckpointManager m(d);
  nn::Linear lin(1, 1);
  CHECK_ERROR_STARTS("[CheckpointManager]", m.save(-1, {&lin}), "step must be non-negative, got -1");
  CHECK_ERROR_STARTS("[CheckpointManager]", m.save(1, {&lin}, {{"checkpoint_manager.step", "9"}}),
                     "'checkpoint_manager.step'", "reserved");
  CHECK_ERROR(m.save(1, {nullptr}), "a checkpoint needs a model");
  CHECK(m.checkpoints().empty());
}
