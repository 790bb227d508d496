#pragma once
// torch.utils.data's Dataset and TensorDataset: a dataset is indexable samples (each a
// list of tensors); data/dataloader.h cuts one into batches.
#include <cstdint>
#include <memory>
#include <vector>

#include "../core/tensor.h"

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

}  // namespace kiln::data

// DataLoader was declared here before it had a header of its own.
#include "dataloader.h"
