#pragma once
// torch.utils.data's DataLoader: cuts a Dataset (data/tensor_dataset.h) into batches
// (each a list of tensors with a new leading batch dim), in order or reshuffled every
// epoch:
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
#include "tensor_dataset.h"

namespace kiln::data {

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

// PairDataLoader was declared here before it had a header of its own.
#include "pair_dataloader.h"
