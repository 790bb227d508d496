#pragma once
// torch.utils.data's Dataset, TensorDataset and DataLoader: a dataset is indexable
// samples (each a list of tensors), and a DataLoader cuts it into batches (each a list of
// tensors with a new leading batch dim), in order or reshuffled every epoch:
//
//   auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{enc_inputs, dec_inputs, dec_outputs});
//   data::DataLoader loader(ds, /*batch_size=*/2, /*shuffle=*/true);
//   for (const std::vector<Tensor>& batch : loader) { … batch[0] (2, 5) … }
//
// Iterating a DataLoader again starts a new epoch: with shuffle, a new order drawn from
// its generator (the default generator unless one is given), as PyTorch's does.
#include <cstdint>
#include <memory>
#include <vector>

#include "../core/generator.h"
#include "../core/tensor.h"
#include "distributed_sampler.h"

namespace kiln::data {

using Sample = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample i, 0 <= i < size().
  virtual Sample get(int64_t i) const = 0;
  // The samples at `indices` collated: each field stacked along a new dim 0. Override
  // for a faster path (TensorDataset gathers rows in one op per field).
  virtual Sample get_batch(const std::vector<int64_t>& indices) const;
};

// Samples are the rows (dim 0) of tensors that all have the same size(0).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override;
  Sample get(int64_t i) const override;
  Sample get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
};

class DataLoader {
 public:
  // gen: where shuffled orders come from (the default generator when null); it must
  // outlive the loader.
  DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch_size = 1, bool shuffle = false,
             bool drop_last = false, Generator* gen = nullptr);
  // torch's DataLoader(dataset, batch_size, sampler=DistributedSampler(…)): batches of
  // the sampler's indices for its current epoch (sampler->set_epoch(e) before each
  // epoch), this rank's shard in data-parallel training. It must cover the dataset.
  DataLoader(std::shared_ptr<Dataset> dataset, int64_t batch_size, std::shared_ptr<DistributedSampler> sampler,
             bool drop_last = false);

  int64_t size() const;  // batches per epoch, len(loader)
  const Dataset& dataset() const { return *dataset_; }

  // The sample indices of each batch of a new epoch.
  std::vector<std::vector<int64_t>> next_epoch_indices();

  // One epoch's batches; compares unequal to end() until they are used up.
  class Iterator {
   public:
    Iterator(const DataLoader* loader, std::vector<std::vector<int64_t>> batches)
        : loader_(loader), batches_(std::move(batches)) {}
    Sample operator*() const { return loader_->dataset_->get_batch(batches_[pos_]); }
    Iterator& operator++() { ++pos_; return *this; }
    struct End {};
    bool operator!=(End) const { return pos_ < batches_.size(); }

   private:
    const DataLoader* loader_;
    std::vector<std::vector<int64_t>> batches_;
    size_t pos_ = 0;
  };
  // Each begin() is a new epoch.
  Iterator begin() { return Iterator(this, next_epoch_indices()); }
  Iterator::End end() const { return {}; }

 private:
  std::shared_ptr<Dataset> dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  Generator* gen_;
  std::shared_ptr<DistributedSampler> sampler_;
};

}  // namespace kiln::data
