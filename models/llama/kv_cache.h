#pragma once
// The keys and values a Llama model has computed, kept for the next tokens: one
// (batch, kv_heads, capacity, head_dim) pair of tensors a layer, filled up to length().
//
//   llama::KVCache cache(model->config, /*batch=*/1, /*capacity=*/512);
//   Tensor logits = model->forward(prompt_ids, &cache);   // prefill: length() = T
//   logits = model->forward(next_id, &cache);              // one more position
#include <cstdint>
#include <utility>
#include <vector>

#include <kiln/kiln.h>

#include "config.h"

namespace kiln::llama {

class KVCache {
 public:
  // Float32 tensors on the host unless opts say otherwise; memory for `capacity`
  // positions is taken at once.
  KVCache(const LlamaConfig& config, int64_t batch, int64_t capacity, TensorOptions opts = {});

  int64_t length() const { return length_; }     // positions held
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  // Layer `layer`'s keys and values for positions [0, length() + T) once k and v
  // (batch, kv_heads, T, head_dim) are written after the held ones: views of the cache.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // Counts the T positions every layer has appended (the model calls it after its layers).
  void advance(int64_t T);
  // Forgets positions from `length` on (0: all), e.g. to reuse a prompt's prefix.
  void truncate(int64_t length);

 private:
  std::vector<Tensor> keys_, values_;
  int64_t batch_, capacity_, length_ = 0;
};

}  // namespace kiln::llama
