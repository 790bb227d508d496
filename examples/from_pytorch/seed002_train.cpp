// Seed 002 in Kiln: the post-norm Transformer at the paper's base size (vocab 5000/4000,
// d_model 512, 8 heads, 6 layers, d_ff 2048) trained on random token data with
// CrossEntropyLoss(ignore_index=0) and Adam(lr 1e-3, betas (0.9, 0.98), eps 1e-9), as the
// notebook trains it; it also draws the positional encoding the notebook asks to see.
//
//   seed002_train [--steps N] [--batch B] [--seq-len L] [--out FILE.png] … (--help)
#include <cstdio>

#include <kiln/viz/plot.h>

#include "seed_training.h"

using namespace kiln;

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, std::string("seed002_train [--out FILE.png] ") + seed::kSeedFlags);
  const std::string out_png = cli.text("--out", "");
  seed::SeedArgs a = seed::parse_seed_args(cli, /*tgt_vocab=*/4000, /*steps=*/3);
  manual_seed(a.seed);

  seed::Transformer transformer(a.src_vocab_size, a.tgt_vocab_size, a.d_model, a.num_heads, a.num_layers, a.d_ff,
                                a.max_seq_length, a.dropout);
  std::printf("%lld parameters\n", (long long)transformer.num_parameters());
  if (!out_png.empty()) {
    // The positional encoding table (positions down, features across), as a heatmap.
    Tensor pe = transformer.positional_encoding->pe.squeeze(0);
    viz::save_heatmap(out_png, pe, {.title = "positional encoding", .x_label = "dimension", .y_label = "position"});
    std::printf("wrote %s\n", out_png.c_str());
  }

  std::vector<double> losses = seed::train_on(transformer, seed::random_batch(a), a, /*lr=*/0.001);
  // Random targets cannot be learnt beyond their frequencies, but a few steps on one
  // fixed batch must still lower its loss.
  return losses.size() < 2 || losses.back() < losses.front() ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln_examples::run_main("seed002_train", [&] { return run(argc, argv); });
}
