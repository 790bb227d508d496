#pragma once
// The flags seeds 002 and 004 share: the model at the paper's base size (the notebooks'
// values) and random data small enough by default to train in seconds.
#include <string>

#include "../common/cli.h"
#include "../common/memory_budget.h"

namespace seed {

struct SeedArgs {
  int64_t src_vocab_size, tgt_vocab_size, d_model, num_heads, num_layers, d_ff, max_seq_length;
  double dropout;
  int64_t batch, seq_len, steps;
  uint64_t seed;
};

// tgt_vocab: 4000 in 002, 5000 in 004; steps: the default number of updates.
inline SeedArgs parse_seed_args(kiln_examples::Cli& cli, int64_t tgt_vocab, int64_t steps) {
  SeedArgs a;
  a.src_vocab_size = cli.integer("--src-vocab", 5000, 2, 1'000'000);
  a.tgt_vocab_size = cli.integer("--tgt-vocab", tgt_vocab, 2, 1'000'000);
  a.d_model = cli.integer("--d-model", 512, 1, 8192);
  a.num_heads = cli.integer("--heads", 8, 1, 128);
  a.num_layers = cli.integer("--layers", 6, 1, 48);
  a.d_ff = cli.integer("--ff", 2048, 1, 32768);
  a.max_seq_length = cli.integer("--max-seq-length", 100, 2, 100000);
  a.dropout = cli.real("--dropout", 0.1, 0.0, 0.9);
  a.batch = cli.integer("--batch", 8, 1, 4096);
  a.seq_len = cli.integer("--seq-len", 32, 2, 100000);
  a.steps = cli.integer("--steps", steps, 0, 1'000'000);
  a.seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  cli.finish();
  if (a.d_model % a.num_heads != 0)
    cli.fail("--d-model (" + std::to_string(a.d_model) + ") must be a multiple of --heads (" +
             std::to_string(a.num_heads) + ")");
  if (a.seq_len > a.max_seq_length)
    cli.fail("--seq-len (" + std::to_string(a.seq_len) + ") must not exceed --max-seq-length (" +
             std::to_string(a.max_seq_length) + ")");
  // Before building anything: would training fit in memory? This attention keeps its
  // scores, masked scores and weights in each of a layer's three attentions.
  namespace ke = kiln_examples;
  const uint64_t params = ke::transformer_parameters(a.src_vocab_size, a.tgt_vocab_size, a.d_model, a.d_ff,
                                                     a.num_layers, a.num_layers);
  const uint64_t activations = ke::add(
      {ke::transformer_activations(a.batch, a.seq_len, a.num_heads, a.d_model, a.d_ff, 2 * a.num_layers,
                                   a.tgt_vocab_size, 9 * a.num_layers),
       ke::mul({ke::u(a.max_seq_length), ke::u(a.d_model)})});  // the positional encoding table
  ke::check_fits(cli,
                 "--d-model " + std::to_string(a.d_model) + " --ff " + std::to_string(a.d_ff) + " --layers " +
                     std::to_string(a.num_layers) + " --batch " + std::to_string(a.batch) + " --seq-len " +
                     std::to_string(a.seq_len) + " --src-vocab " + std::to_string(a.src_vocab_size) +
                     " --tgt-vocab " + std::to_string(a.tgt_vocab_size),
                 params, ke::training_bytes(params, activations));
  return a;
}

inline const char* kSeedFlags =
    "[--steps N] [--batch B] [--seq-len L] [--d-model D] [--heads H] [--layers N] [--ff F]\n"
    "       [--src-vocab V] [--tgt-vocab V] [--max-seq-length L] [--dropout P] [--seed S]\n"
    "  (the notebook trains --batch 64 --seq-len 100 for 100 (002) or 2 (004) steps)";

}  // namespace seed
