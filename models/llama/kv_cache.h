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
  // Memory for `capacity` positions is taken at once. A model that computes as llama.cpp
  // (config.llama_cpp_numerics) gets float16 keys and values on the host, as llama.cpp
  // keeps them (half the memory; its attention reads them through f16_attention.h), when
  // opts are the default host float32; otherwise tensors of opts (float32 on the host
  // unless they say otherwise).
  KVCache(const LlamaConfig& config, int64_t batch, int64_t capacity, TensorOptions opts = {});

  int64_t length() const { return length_; }     // positions held
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  bool is_float16() const { return !keys16_.empty(); }
  // Layer `layer`'s keys and values for positions [0, length() + T) once k and v
  // (batch, kv_heads, T, head_dim) are written after the held ones: views of the cache.
  // Float32 caches only.
  std::pair<Tensor, Tensor> append(int64_t layer, const Tensor& k, const Tensor& v);
  // The same for a float16 cache: k and v float32 on the host, rounded to float16.
  void append_float16(int64_t layer, const Tensor& k, const Tensor& v);
  // A float16 cache's layer: keys (batch, kv_heads, capacity, head_dim) and values
  // transposed, (batch, kv_heads, head_dim, padded_capacity()), so that a query's
  // attention weights dot rows of them, as llama.cpp keeps them. The values' rows are
  // zero past what was written, up to a multiple of 32 positions.
  const uint16_t* keys_f16(int64_t layer) const;
  const uint16_t* values_f16(int64_t layer) const;
  int64_t padded_capacity() const { return (capacity_ + 31) / 32 * 32; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  // Counts the T positions every layer has appended (the model calls it after its layers).
  void advance(int64_t T);
  // Forgets positions from `length` on (0: all), e.g. to reuse a prompt's prefix.
  void truncate(int64_t length);

 private:
  void check_append(int64_t layer, const Tensor& k, const Tensor& v) const;
  std::vector<Tensor> keys_, values_;
  std::vector<std::vector<uint16_t>> keys16_, values16_;
  int64_t batch_, capacity_, kv_heads_, head_dim_, length_ = 0;
};

}  // namespace kiln::llama
