#include "data/distributed_sampler.h"

#include "core/error.h"
#include "data/pair_dataloader.h"  // epoch_permutation
#include "distributed/distributed.h"

namespace kiln::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : opts_(options), dataset_size_(dataset_size) {
  KILN_CHECK(dataset_size >= 0, "DistributedSampler", "dataset_size must be non-negative, got ", dataset_size);
  if (!opts_.num_replicas || !opts_.rank) {
    KILN_CHECK(distributed::is_initialized(), "DistributedSampler",
               "num_replicas and rank were not given and the process group is not initialized "
               "(call kiln::distributed::init() first, or give both)");
  }
  num_replicas_ = opts_.num_replicas ? *opts_.num_replicas : distributed::world_size();
  rank_ = opts_.rank ? *opts_.rank : distributed::rank();
  KILN_CHECK(num_replicas_ >= 1, "DistributedSampler", "num_replicas must be at least 1, got ", num_replicas_);
  KILN_CHECK(rank_ >= 0 && rank_ < num_replicas_, "DistributedSampler", "rank ", rank_, " is out of range for ",
             num_replicas_, " replicas (0 to ", num_replicas_ - 1, ")");
  // drop_last: the tail beyond a multiple of num_replicas is dropped (torch's
  // ceil((n - R) / R)); otherwise every rank gets ceil(n / R), the rest padding.
  num_samples_ = opts_.drop_last && dataset_size_ % num_replicas_ != 0
                     ? dataset_size_ / num_replicas_
                     : (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  KILN_CHECK(epoch >= 0, "DistributedSampler.set_epoch", "epoch must be non-negative, got ", epoch);
  epoch_ = epoch;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  KILN_CHECK(epoch >= 0, "DistributedSampler", "epoch must be non-negative, got ", epoch);
  const size_t n = static_cast<size_t>(dataset_size_);
  std::vector<int64_t> all(n);
  if (opts_.shuffle) {
    std::vector<size_t> p = epoch_permutation(n, opts_.seed, epoch);
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<int64_t>(p[i]);
  } else {
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<int64_t>(i);
  }
  const size_t total = static_cast<size_t>(total_size());
  if (total > n) {
    // Padding: the indices again from the start (as many times as needed).
    for (size_t i = 0; all.size() < total; ++i) {
      const int64_t again = all[i % n];
      all.push_back(again);
    }
  }
  all.resize(total);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_)) mine.push_back(all[i]);
  return mine;
}

}  // namespace kiln::data
