#include "data/tensor_dataset.h"

#include <algorithm>
#include <numeric>

#include "data/dataloader.h"
#include "ops/ops.h"

namespace kiln::data {

Sample Dataset::get_batch(const std::vector<int64_t>& indices) const {
  KILN_CHECK(!indices.empty(), "DataLoader", "a batch needs at least one index");
  std::vector<Sample> items;
  items.reserve(indices.size());
  for (int64_t i : indices) items.push_back(get(i));
  Sample batch;
  for (size_t f = 0; f < items[0].size(); ++f) {
    std::vector<Tensor> field;
    for (size_t k = 0; k < items.size(); ++k) {
      KILN_CHECK(items[k].size() == items[0].size(), "DataLoader", "sample ", indices[k], " has ",
                 items[k].size(), " fields, sample ", indices[0], " has ", items[0].size());
      field.push_back(items[k][f]);
    }
    batch.push_back(stack(field, 0));  // stack names mismatched shapes itself
  }
  return batch;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  KILN_CHECK(!tensors_.empty(), "TensorDataset", "needs at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    KILN_CHECK(tensors_[k].defined(), "TensorDataset", "tensor ", k, " is undefined");
    KILN_CHECK(tensors_[k].dim() >= 1, "TensorDataset", "tensor ", k, " is 0-d; samples are rows of dim 0");
    KILN_CHECK(tensors_[k].size(0) == tensors_[0].size(0), "TensorDataset", "size mismatch between tensors: tensor ",
               k, " has ", tensors_[k].size(0), " rows, tensor 0 has ", tensors_[0].size(0));
  }
}

int64_t TensorDataset::size() const { return tensors_[0].size(0); }

Sample TensorDataset::get(int64_t i) const {
  KILN_CHECK(i >= 0 && i < size(), "TensorDataset", "index ", i, " is out of range for ", size(), " samples");
  Sample s;
  for (const Tensor& t : tensors_) s.push_back(t.select(0, i));
  return s;
}

Sample TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  KILN_CHECK(!indices.empty(), "DataLoader", "a batch needs at least one index");
  for (int64_t i : indices)
    KILN_CHECK(i >= 0 && i < size(), "TensorDataset", "index ", i, " is out of range for ", size(), " samples");
  Tensor idx = from_vector<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  Sample s;
  for (const Tensor& t : tensors_) s.push_back(index_select(t, 0, idx.to(t.device())));
  return s;
}

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
