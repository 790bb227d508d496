#pragma once
// The training cell seeds 002 and 004 share: one random batch of token ids, trained on
// for a.steps updates with CrossEntropyLoss(ignore_index=0) and Adam(lr, betas (0.9,
// 0.98), eps 1e-9), printing "Epoch: k, Loss: …" as the notebooks do.
#include <cstdio>
#include <vector>

#include "seed_args.h"
#include "seed_transformer.h"

namespace seed {

struct RandomBatch {
  Tensor src_data, tgt_data;  // (batch_size, seq_length) ids in [1, vocab)
};

inline RandomBatch random_batch(const SeedArgs& a) {
  return {randint(1, a.src_vocab_size, {a.batch, a.seq_len}), randint(1, a.tgt_vocab_size, {a.batch, a.seq_len})};
}

// Each update's loss, in order. The decoder reads tgt[:, :-1] and predicts tgt[:, 1:].
inline std::vector<double> train_on(Transformer& transformer, const RandomBatch& b, const SeedArgs& a, double lr) {
  nn::CrossEntropyLoss criterion(/*ignore_index=*/0);
  optim::Adam optimizer(transformer.parameters(), {.lr = lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  transformer.train();
  std::vector<double> losses;
  for (int64_t epoch = 0; epoch < a.steps; ++epoch) {
    optimizer.zero_grad();
    Tensor output = transformer(b.src_data, b.tgt_data.slice(1, 0, a.seq_len - 1));
    Tensor loss = criterion(output.contiguous().view({-1, a.tgt_vocab_size}),
                            b.tgt_data.slice(1, 1, a.seq_len).contiguous().view({-1}));
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item());
    std::printf("Epoch: %lld, Loss: %.6f\n", static_cast<long long>(epoch) + 1, losses.back());
  }
  return losses;
}

}  // namespace seed
