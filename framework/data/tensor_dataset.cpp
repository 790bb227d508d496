#include "data/tensor_dataset.h"

#include <algorithm>
#include <numeric>

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

}  // namespace kiln::data
