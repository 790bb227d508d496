#include "data/dataloader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace kiln::data {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch_size, bool shuffle, bool drop_last,
                       Generator* gen)
    : dataset_(std::move(dataset)), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), gen_(gen) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader", "the dataset is null");
  KILN_CHECK(batch_size_ > 0, "DataLoader", "batch_size must be positive, got ", batch_size_);
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch_size,
                       std::shared_ptr<DistributedSampler> sampler, bool drop_last)
    : DataLoader(std::move(dataset), batch_size, false, drop_last, nullptr) {
  KILN_CHECK(sampler != nullptr, "DataLoader", "the sampler is null");
  KILN_CHECK(sampler->dataset_size() == dataset_->size(), "DataLoader", "the sampler covers ",
             sampler->dataset_size(), " samples but the dataset has ", dataset_->size());
  sampler_ = std::move(sampler);
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_ ? sampler_->size() : dataset_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<int64_t>> DataLoader::next_epoch_indices() {
  std::vector<int64_t> order;
  if (sampler_) {
    order = sampler_->indices();
  } else {
    order.resize(static_cast<size_t>(dataset_->size()));
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t n = static_cast<int64_t>(order.size());
  if (shuffle_) {
    // One Philox block of the generator seeds this epoch's permutation: a seeded run
    // sees the same orders, and each epoch a new one.
    Generator& g = gen_ ? *gen_ : default_generator();
    auto words = philox4x32(g.seed(), g.reserve(1));
    uint64_t epoch_seed = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    std::vector<size_t> perm = seeded_permutation(static_cast<size_t>(n), epoch_seed);
    for (size_t i = 0; i < perm.size(); ++i) order[i] = static_cast<int64_t>(perm[i]);
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t start = 0; start < n; start += batch_size_) {
    const int64_t stop = std::min(n, start + batch_size_);
    if (drop_last_ && stop - start < batch_size_) break;
    batches.emplace_back(order.begin() + start, order.begin() + stop);
  }
  return batches;
}

}  // namespace kiln::data
