#pragma once
// torch.utils.data.distributed.DistributedSampler: each of num_replicas processes reads
// its own shard of a dataset, disjoint but for padding, all shards of one length, in an
// order drawn from (seed, epoch) that every rank draws alike.
//
//   auto sampler = std::make_shared<data::DistributedSampler>(dataset->size());
//   data::DataLoader loader(dataset, /*batch_size=*/8, sampler);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler->set_epoch(epoch);          // a new order each epoch, the same on every rank
//     for (const auto& batch : loader) { … }
//   }
//
// As torch's: the indices 0 … n-1 (shuffled: a permutation drawn from seed and epoch) are
// padded by repeating them from the start until their count is a multiple of
// num_replicas (drop_last instead drops the tail that is not), and rank r takes every
// num_replicas-th from r. Shuffling is Kiln's own seeded permutation (the one
// PairDataLoader uses), so one replica reads exactly what PairDataLoader reads with
// shuffle on and the same seed, not torch's randperm order.
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::data {

struct DistributedSamplerOptions {
  // Unset: the process group's world_size() and rank() (kiln::distributed::init() first).
  std::optional<int64_t> num_replicas = std::nullopt;
  std::optional<int64_t> rank = std::nullopt;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});

  // The epoch the next indices() is for (torch's set_epoch; without it every epoch reads
  // epoch 0's order).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch (torch's iter(sampler)), and for any epoch.
  std::vector<int64_t> indices() const { return indices(epoch_); }
  std::vector<int64_t> indices(int64_t epoch) const;

  int64_t size() const { return num_samples_; }  // len(sampler): indices per rank
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int64_t dataset_size() const { return dataset_size_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }
  const DistributedSamplerOptions& options() const { return opts_; }

 private:
  DistributedSamplerOptions opts_;
  int64_t dataset_size_, num_replicas_, rank_, num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace kiln::data
