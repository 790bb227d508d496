#pragma once
// Batches of (source, target) token sequences for sequence-to-sequence training:
// padding with the pad id, a seeded shuffle that depends only on (seed, epoch) so a
// resumed run sees the same batches, and optional bucketing by length so that a batch
// holds sentences of similar length (less padding).
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "../core/tensor.h"
#include "distributed_sampler.h"

namespace kiln::data {

struct TokenPair {
  std::vector<int64_t> source;
  std::vector<int64_t> target;
};

struct PairBatch {
  Tensor source;                // (B, S) int64, padded with pad_id
  Tensor target;                // (B, T) int64, padded with pad_id
  std::vector<size_t> indices;  // which examples of the dataset, in batch order
};

struct PairDataLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  // Sort examples by length within pools of bucket_pool batches, then shuffle the
  // batches; 0 turns bucketing off.
  int64_t bucket_pool = 0;
  int64_t pad_id = 0;
  // Batches by a token budget (fairseq's --max-tokens), instead of batch_size sentences: the
  // examples are sorted by length (the longer of source and target, then the source's and
  // the target's own, so that the shorter sides of a batch are alike too; equal lengths in
  // an order drawn from seed) and cut into batches whose padded size, rows x that length,
  // stays within max_tokens. The batches are made once; each epoch reads all of them,
  // in an order drawn from (seed, epoch) when shuffle is on. 0: batches of batch_size.
  // An example longer than max_tokens is an error (filter long sentences first).
  int64_t max_tokens = 0;
  // Data-parallel training: this rank's shard of every epoch (its order and padding) from
  // a DistributedSampler over the examples, instead of all of them; shuffle must then be
  // false (the sampler shuffles, and with bucketing its shuffle also orders the batches).
  // The loader asks the sampler for the epoch it is given (no set_epoch needed).
  // With max_tokens the batches are made over all examples alike on every rank (the
  // sampler's seed and shuffle), each holding at least num_replicas rows, and rank r reads
  // rows r, r + num_replicas, … of each: every rank has the same number of batches, and
  // together they read each batch once (the last batch cut may have fewer rows than
  // ranks: a rank without a row then repeats one, as DistributedSampler pads).
  std::shared_ptr<const DistributedSampler> sampler = nullptr;
  // Subword regularisation (BPE-dropout, unigram sampling): the examples as epoch `epoch`
  // reads them, e.g. the same sentence pairs segmented anew by
  // text::SentencePieceTokenizer::sample_encode with a seed drawn from the epoch. It must
  // give as many examples as the loader holds, example i the same pair as the loader's
  // example i, none empty, and the same ones for the same epoch (a resumed run reads the
  // same batches). With max_tokens each epoch's batches are cut on its own examples (so
  // num_batches(epoch) varies: sampled segmentations are longer); batch_size batches
  // (and their bucketing) stay those of the loader's examples. make_batch(indices, epoch)
  // and epoch() read through it, one epoch's examples made at a time; unset, every epoch
  // reads the loader's examples.
  std::function<std::vector<TokenPair>(int64_t epoch)> resample = nullptr;
};

// The name these options had before DataLoader (data/dataloader.h) took its own.
using DataLoaderOptions = PairDataLoaderOptions;

class PairDataLoader {
 public:
  PairDataLoader(std::vector<TokenPair> examples, PairDataLoaderOptions opts = {});

  int64_t num_examples() const { return static_cast<int64_t>(examples_.size()); }
  // Batches per epoch (of this rank's shard with a sampler); with options().resample and
  // max_tokens, those of epoch 0 (num_batches(epoch) for another).
  int64_t num_batches() const;
  int64_t num_batches(int64_t epoch) const;
  const PairDataLoaderOptions& options() const { return opts_; }
  const std::vector<TokenPair>& examples() const { return examples_; }

  // The example indices of each batch of an epoch (deterministic in (seed, epoch)).
  std::vector<std::vector<size_t>> batch_indices(int64_t epoch) const;
  // With max_tokens: the batches as cut (over all examples, alike on every rank), and the
  // order epoch `epoch` reads them in (indices into token_batches()). batch_indices gives
  // the same batches in that order, each reduced to this rank's share with a sampler.
  // (With options().resample, an epoch reads batches of its own: batch_indices(epoch).)
  const std::vector<std::vector<size_t>>& token_batches() const { return token_batches_; }
  std::vector<size_t> token_batch_order(int64_t epoch) const;
  // The padded tensors for the given examples.
  PairBatch make_batch(const std::vector<size_t>& indices) const;
  // The same as epoch `epoch` reads them: with options().resample, that epoch's examples.
  PairBatch make_batch(const std::vector<size_t>& indices, int64_t epoch) const;
  // Every batch of an epoch.
  std::vector<PairBatch> epoch(int64_t epoch) const;

 private:
  // Whether the order is drawn, and from which seed: the sampler's options with a
  // sampler, the loader's own without.
  bool shuffled() const { return opts_.sampler ? opts_.sampler->options().shuffle : opts_.shuffle; }
  uint64_t order_seed() const { return opts_.sampler ? opts_.sampler->options().seed : opts_.seed; }
  // An epoch's examples and, with max_tokens, the batches cut on them.
  struct EpochExamples {
    std::vector<TokenPair> examples;
    std::vector<std::vector<size_t>> token_batches;
  };
  // The last epoch opts_.resample gave, shared by copies of the loader.
  struct ResampleCache {
    std::mutex mutex;
    int64_t epoch = -1;
    std::shared_ptr<const EpochExamples> data;
  };

  // The token-budget batches over all of `examples` (with max_tokens), in the order they
  // were cut.
  std::vector<std::vector<size_t>> make_token_batches(const std::vector<TokenPair>& examples) const;
  // The batches epoch `epoch` reads, in the order they were cut: the loader's, or the
  // resampled epoch's (kept alive by `hold`).
  const std::vector<std::vector<size_t>>& epoch_token_batches(int64_t epoch,
                                                              std::shared_ptr<const EpochExamples>& hold) const;
  std::vector<std::vector<size_t>> token_batch_indices(int64_t epoch) const;
  // The order epoch `epoch` reads `batches` cut batches in.
  std::vector<size_t> batch_order(size_t batches, int64_t epoch) const;
  // Epoch `epoch`'s examples and batches (opts_.resample's, made once an epoch and kept).
  std::shared_ptr<const EpochExamples> resampled(int64_t epoch) const;
  PairBatch pad_batch(const std::vector<TokenPair>& examples, const std::vector<size_t>& indices) const;

  std::vector<TokenPair> examples_;
  PairDataLoaderOptions opts_;
  std::vector<std::vector<size_t>> token_batches_;  // empty without max_tokens
  std::shared_ptr<ResampleCache> resample_cache_ = std::make_shared<ResampleCache>();
};

// Pads sequences to the longest: (len(seqs), max_len) int64.
Tensor pad_sequences(const std::vector<std::vector<int64_t>>& seqs, int64_t pad_id = 0);

// A permutation of 0..n-1 that depends only on `seed` (splitmix64 + Fisher-Yates, the
// same on every platform, unlike std::shuffle).
std::vector<size_t> seeded_permutation(size_t n, uint64_t seed);

// The order PairDataLoader (shuffle on) and DistributedSampler draw for an epoch: a
// permutation of 0 … n-1 that depends only on (seed, epoch).
std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, int64_t epoch);

}  // namespace kiln::data
