#include "llama/kv_cache.h"

namespace kiln::llama {

namespace {
constexpr const char* kCacheOp = "llama.KVCache";
}  // namespace

KVCache::KVCache(const LlamaConfig& c, int64_t batch, int64_t capacity, TensorOptions opts)
    : batch_(batch), capacity_(capacity) {
  KILN_CHECK(batch >= 1, kCacheOp, "batch must be at least 1, got ", batch);
  KILN_CHECK(capacity >= 1 && capacity <= c.max_position_embeddings, kCacheOp, "capacity must be in [1, ",
             c.max_position_embeddings, "] (max_position_embeddings), got ", capacity);
  const Shape shape{batch, c.num_key_value_heads, capacity, c.attention_head_dim()};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    keys_.push_back(empty(shape, opts));
    values_.push_back(empty(shape, opts));
  }
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  KILN_CHECK(layer >= 0 && layer < static_cast<int64_t>(keys_.size()), kCacheOp, "layer ", layer,
             " out of range for ", keys_.size(), " layers");
  const Tensor& K = keys_[layer];
  KILN_CHECK(k.dim() == 4 && k.size(0) == batch_ && k.size(1) == K.size(1) && k.size(3) == K.size(3) &&
                 v.shape() == k.shape(),
             kCacheOp, "keys and values must be (", batch_, ", ", K.size(1), ", T, ", K.size(3), "), got ",
             shape_str(k.shape()), " and ", shape_str(v.shape()));
  const int64_t T = k.size(2);
  KILN_CHECK(length_ + T <= capacity_, kCacheOp, length_, " positions held and ", T, " more exceed the capacity ",
             capacity_);
  {
    NoGradGuard no_grad;  // the cache holds values, not a graph
    K.narrow(2, length_, T).copy_(k.detach());
    values_[layer].narrow(2, length_, T).copy_(v.detach());
  }
  return {K.narrow(2, 0, length_ + T), values_[layer].narrow(2, 0, length_ + T)};
}

void KVCache::advance(int64_t T) {
  KILN_CHECK(T >= 0 && length_ + T <= capacity_, kCacheOp, "cannot advance ", length_, " positions by ", T,
             " (capacity ", capacity_, ")");
  length_ += T;
}

void KVCache::truncate(int64_t length) {
  KILN_CHECK(length >= 0 && length <= length_, kCacheOp, "cannot truncate ", length_, " positions to ", length);
  length_ = length;
}

}  // namespace kiln::llama
