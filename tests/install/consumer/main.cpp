// A program of a Kiln user, built outside Kiln's tree against an installed Kiln (or Kiln as
// a Meson subproject): it trains a small Transformer to copy its input for a few steps
// and exits 0 only when the loss fell, its curve was drawn (kiln-viz) and the library is
// the version of its headers.
// tests/install/check_install.sh builds it three ways: g++ with pkg-config, CMake's
// find_package, and a Meson project with Kiln as a subproject.
#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>
#include <kiln/viz/plot.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

int main() {
  try {
    if (std::strcmp(kiln::version(), KILN_VERSION_STRING) != 0) {
      std::fprintf(stderr, "headers are Kiln %s but the library is %s\n", KILN_VERSION_STRING, kiln::version());
      return 1;
    }
    kiln::manual_seed(0);
    kiln::transformer::Seq2SeqOptions model_options;
    model_options.src_vocab_size = model_options.tgt_vocab_size = 12;  // 0 pad, 1 begin, 2 end, 3..11 words
    model_options.d_model = 32;
    model_options.nhead = 4;
    model_options.num_encoder_layers = model_options.num_decoder_layers = 1;
    model_options.dim_feedforward = 64;
    model_options.dropout = 0.0;
    kiln::transformer::Seq2SeqTransformer model(model_options);

    kiln::transformer::TrainerOptions train_options;
    train_options.warmup_steps = 10;
    train_options.progress = false;
    kiln::transformer::Trainer trainer(model, train_options);

    // The copy task: target = begin, the source's words, end.
    kiln::Tensor words = kiln::randint(3, 12, {16, 6});
    kiln::Tensor source = words;
    kiln::Tensor target = kiln::cat({kiln::full({16, 1}, 1, kiln::kInt64), words, kiln::full({16, 1}, 2, kiln::kInt64)}, 1);
    const int steps = 40;
    double first = 0, last = 0;
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
      double loss = trainer.train_step(source, target);
      if (step == 0) first = loss;
      last = loss;
      losses.push_back(loss);
    }
    const std::filesystem::path png =
        std::filesystem::temp_directory_path() / ("kiln_consumer_loss_" + std::to_string(::getpid()) + ".png");
    kiln::viz::save_line_plot(png.string(), losses, {.title = "copy task"});
    const auto png_bytes = std::filesystem::file_size(png);
    std::filesystem::remove(png);
    std::printf("loss curve drawn: %ju bytes of PNG\n", static_cast<uintmax_t>(png_bytes));
    if (png_bytes < 1000) {
      std::fprintf(stderr, "the loss curve's PNG is too small\n");
      return 1;
    }
    std::printf("Kiln %s: loss %.4f after 1 step, %.4f after %d\n", kiln::version(), first, last, steps);
    if (!(last < 0.7 * first)) {
      std::fprintf(stderr, "the loss did not fall enough\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
