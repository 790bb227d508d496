// Seed 002 in Kiln: the post-norm Transformer at the paper's base size (vocab 5000/4000,
// d_model 512, 8 heads, 6 layers, d_ff 2048) trained on random token data with
// CrossEntropyLoss(ignore_index=0) and Adam(lr 1e-3, betas (0.9, 0.98), eps 1e-9), as the
// notebook trains it; it also draws the positional encoding the notebook asks to see.
//
//   seed002_train [--steps N] [--batch B] [--seq-len L] [--out FILE.png] … (--help)
#include <cstdio>

#include "seed_args.h"
#include "seed_transformer.h"

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

  // Generate random sample data: (batch_size, seq_length)
  Tensor src_data = randint(1, a.src_vocab_size, {a.batch, a.seq_len});
  Tensor tgt_data = randint(1, a.tgt_vocab_size, {a.batch, a.seq_len});

  nn::CrossEntropyLoss criterion(/*ignore_index=*/0);
  optim::AdamOptions o;
  o.lr = 0.001;
  o.beta1 = 0.9;
  o.beta2 = 0.98;
  o.eps = 1e-9;
  optim::Adam optimizer(transformer.parameters(), o);

  transformer.train();
  double first = 0, last = 0;
  for (int64_t epoch = 0; epoch < a.steps; ++epoch) {
    optimizer.zero_grad();
    Tensor output = transformer(src_data, tgt_data.slice(1, 0, a.seq_len - 1));
    Tensor loss = criterion(output.contiguous().view({-1, a.tgt_vocab_size}),
                            tgt_data.slice(1, 1, a.seq_len).contiguous().view({-1}));
    loss.backward();
    optimizer.step();
    last = loss.item();
    if (epoch == 0) first = last;
    std::printf("Epoch: %lld, Loss: %.6f\n", (long long)epoch + 1, last);
  }
  // Random targets cannot be learnt beyond their frequencies, but a few steps on one
  // fixed batch must still lower its loss.
  return a.steps < 2 || last < first ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln_examples::run_main("seed002_train", [&] { return run(argc, argv); });
}
