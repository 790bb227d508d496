// train_loop: a model of one's own trained by a plain loop, with what the Transformer
// trainer has: a live progress bar (samples/s), metrics to CSV or JSON lines, and a
// checkpoint directory (the last few epochs and the best by validation loss) that a
// later run resumes from, bit for bit as if it had never stopped.
//
// The model is a small MLP that tells three interleaved spirals apart (2-D points).
//
//   train_loop [--epochs N] [--samples N] [--batch B] [--hidden H] [--lr LR] [--seed S]
//              [--keep K] [--metrics csv|jsonl] [--out-dir DIR] [--resume 0|1]
//              [--stop-after E]
//
// Try: train_loop --stop-after 10   (as if interrupted after epoch 10)
//      train_loop --resume 1        (continues from the latest checkpoint to the end)
// Files, in --out-dir: metrics.csv or metrics.jsonl, and checkpoints/ with
// ckpt-<step>.safetensors (the --keep newest) and best.safetensors.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "../common/checkpoint_metadata.h"
#include "../common/cli.h"
#include "../common/memory_budget.h"

using namespace kiln;

namespace {

// The user's model: Linear-ReLU-Linear-ReLU-Linear, logits for each class.
struct SpiralClassifier : nn::Module {
  SpiralClassifier(int64_t hidden, int64_t classes) : Module("SpiralClassifier") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, hidden));
    out = register_module("out", std::make_shared<nn::Linear>(hidden, classes));
  }
  Tensor forward(const Tensor& x) { return (*out)(relu((*fc2)(relu((*fc1)(x))))); }

  std::shared_ptr<nn::Linear> fc1, fc2, out;
};

constexpr int64_t kClasses = 3;

// n points (n, 2) float32 on kClasses spiral arms, labels (n,) int64; point i is on arm
// i % kClasses, so any contiguous range holds every class.
std::pair<Tensor, Tensor> spirals(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> along(0.05, 1.0);
  std::normal_distribution<double> noise(0.0, 0.25);
  std::vector<float> xy;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i % kClasses;
    const double r = along(rng);
    const double theta = 2.0 * std::numbers::pi * static_cast<double>(c) / kClasses + 5.0 * r + noise(rng);
    xy.push_back(static_cast<float>(r * std::cos(theta)));
    xy.push_back(static_cast<float>(r * std::sin(theta)));
    labels.push_back(c);
  }
  return {from_vector<float>(xy, {n, 2}), from_vector<int64_t>(labels, {n})};
}

struct Eval {
  double loss, accuracy;
};

Eval evaluate(SpiralClassifier& model, const Tensor& x, const Tensor& y) {
  nn::TrainingModeGuard eval(model, false);
  NoGradGuard no_grad;
  Tensor logits = model.forward(x);
  return {cross_entropy(logits, y).item(), eq(argmax(logits, 1), y).to(kFloat64).mean().item()};
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv,
                         "train_loop [--epochs N] [--samples N] [--batch B] [--hidden H] [--lr LR] [--seed S]\n"
                         "                  [--keep K] [--metrics csv|jsonl] [--out-dir DIR] [--resume 0|1]\n"
                         "                  [--stop-after E]");
  const int64_t epochs = cli.integer("--epochs", 30, 1, 1'000'000);
  const int64_t samples = cli.integer("--samples", 1500, 30, 10'000'000);
  const int64_t batch = cli.integer("--batch", 32, 1, 1'000'000);
  const int64_t hidden = cli.integer("--hidden", 64, 1, 4096);
  const double lr = cli.real("--lr", 0.01, 1e-6, 1.0);
  const uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  const int64_t keep = cli.integer("--keep", 3, 1, 1000);
  const std::string metrics_format = cli.text("--metrics", "csv");
  const std::string out_dir = cli.directory("--out-dir", "train_loop_out");
  const bool resume = cli.integer("--resume", 0, 0, 1) == 1;
  const int64_t stop_after = cli.integer("--stop-after", 0, 0, 1'000'000);
  cli.finish();
  if (metrics_format != "csv" && metrics_format != "jsonl")
    cli.fail("--metrics must be csv or jsonl, got '" + metrics_format + "'");
  {
    // Would it fit in memory? The data (3 values a sample), the MLP's parameters, and a
    // batch's activations (a few hidden-wide tensors a sample).
    namespace ke = kiln_examples;
    const uint64_t h = ke::u(hidden);
    const uint64_t params = ke::add({ke::mul({h, h}), ke::mul({7, h}), kClasses});
    const uint64_t activations = ke::add({ke::mul({ke::u(samples), 6}), ke::mul({ke::u(batch), 8, h})});
    ke::check_fits(cli, "--hidden " + std::to_string(hidden) + " --batch " + std::to_string(batch) + " --samples " +
                            std::to_string(samples),
                   params, ke::training_bytes(params, activations));
  }

  // The data does not depend on the run's random state: 80% to train, 20% to validate.
  auto [x, y] = spirals(samples, seed + 1);
  const int64_t n_train = samples * 4 / 5;
  auto train_set = std::make_shared<data::TensorDataset>(
      std::vector<Tensor>{x.narrow(0, 0, n_train).contiguous(), y.narrow(0, 0, n_train).contiguous()});
  Tensor x_val = x.narrow(0, n_train, samples - n_train).contiguous();
  Tensor y_val = y.narrow(0, n_train, samples - n_train).contiguous();
  // Shuffled from the default generator, which every checkpoint holds: a resumed run
  // sees the batches the uninterrupted run would have.
  data::DataLoader loader(train_set, batch, /*shuffle=*/true);

  manual_seed(seed);
  SpiralClassifier model(hidden, kClasses);
  optim::AdamOptions adam;
  adam.lr = lr;
  optim::Adam optimizer(model.parameters(), adam);
  const io::CheckpointParts parts{&model, &optimizer};

  train::CheckpointManager checkpoints((std::filesystem::path(out_dir) / "checkpoints").string(),
                                       {.keep_last = keep});
  train::ProgressBar bar(epochs * loader.size());
  bar.set_unit("samples");

  int64_t start_epoch = 0;
  double first_val_loss = NAN;  // before any training: what "the loss fell" compares with
  bool resumed = false;
  if (resume && !checkpoints.latest().empty()) {
    const std::string from = checkpoints.latest();
    io::Metadata meta = checkpoints.resume(parts);
    start_epoch = kiln_examples::metadata_integer(meta, "epoch", from, 1, 1'000'000);
    first_val_loss = kiln_examples::metadata_real(meta, "first_val_loss", from, 0.0, 1e6);
    resumed = true;
    bar.println("resumed from " + from + " after epoch " + std::to_string(start_epoch));
  } else {
    if (resume) bar.println("nothing to resume in " + checkpoints.directory() + ": starting afresh");
    checkpoints.clear();  // an earlier run's checkpoints are not this run's
    first_val_loss = evaluate(model, x_val, y_val).loss;
  }
  const std::string metrics_path = (std::filesystem::path(out_dir) / ("metrics." + metrics_format)).string();
  train::MetricsLog metrics(metrics_path, {"epoch", "step", "train_loss", "val_loss", "val_accuracy", "samples_per_s"},
                            /*append=*/resumed);

  const int64_t last_epoch = stop_after > 0 ? std::min(stop_after, epochs) : epochs;
  double val_loss = evaluate(model, x_val, y_val).loss;  // where this run starts
  for (int64_t epoch = start_epoch; epoch < last_epoch; ++epoch) {
    auto epoch_start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t batches = 0, seen = 0;
    for (const data::Sample& b : loader) {
      Tensor loss = cross_entropy(model.forward(b[0]), b[1]);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      loss_sum += loss.item();
      ++batches;
      seen += b[0].size(0);
      bar.update(epoch * loader.size() + batches, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) +
                                                      "  loss " + fmt("%.4f", loss.item()),
                 b[0].size(0));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
    const int64_t step = (epoch + 1) * loader.size();
    const double train_loss = loss_sum / static_cast<double>(batches);
    Eval v = evaluate(model, x_val, y_val);
    val_loss = v.loss;
    metrics.write({static_cast<double>(epoch + 1), static_cast<double>(step), train_loss, v.loss, v.accuracy,
                   static_cast<double>(seen) / std::max(seconds, 1e-9)});
    auto saved = checkpoints.save(step, parts,
                                  {{"epoch", std::to_string(epoch + 1)}, {"first_val_loss", fmt("%.17g", first_val_loss)}},
                                  v.loss);
    bar.report(step, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) + "  train loss " +
                         fmt("%.4f", train_loss) + "  val loss " + fmt("%.4f", v.loss) + "  accuracy " +
                         fmt("%.3f", v.accuracy) + (saved.best ? "  (best)" : ""));
  }
  bar.close();

  std::printf("checkpoints: %s (latest %s, best val loss %.4f)\nmetrics: %s\n", checkpoints.directory().c_str(),
              checkpoints.latest().c_str(), checkpoints.best_metric(), metrics_path.c_str());
  const bool fell = std::isfinite(val_loss) && val_loss < first_val_loss;
  std::printf("validation loss %s: %.4f before training, %.4f now\n", fell ? "fell" : "did not fall", first_val_loss,
              val_loss);
  return fell ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln_examples::run_main("train_loop", [&] { return run(argc, argv); });
}
