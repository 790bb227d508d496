#include "llama/kv_cache.h"

#include "llama/ggml_math.h"

namespace kiln::llama {

namespace {
constexpr const char* kCacheOp = "llama.KVCache";
}  // namespace

KVCache::KVCache(const LlamaConfig& c, int64_t batch, int64_t capacity, TensorOptions opts)
    : batch_(batch), capacity_(capacity), kv_heads_(c.num_key_value_heads), head_dim_(c.attention_head_dim()) {
  KILN_CHECK(batch >= 1, kCacheOp, "batch must be at least 1, got ", batch);
  KILN_CHECK(capacity >= 1 && capacity <= c.max_position_embeddings, kCacheOp, "capacity must be in [1, ",
             c.max_position_embeddings, "] (max_position_embeddings), got ", capacity);
  const bool float16 = c.llama_cpp_numerics && opts.dtype_ == kFloat32 && opts.device_ == kCPU;
  const Shape shape{batch, kv_heads_, capacity, head_dim_};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (float16) {
      keys16_.emplace_back(static_cast<size_t>(batch * kv_heads_ * capacity * head_dim_));
      values16_.emplace_back(static_cast<size_t>(batch * kv_heads_ * head_dim_ * padded_capacity()), uint16_t{0});
    } else {
      keys_.push_back(empty(shape, opts));
      values_.push_back(empty(shape, opts));
    }
  }
}

void KVCache::check_append(int64_t layer, const Tensor& k, const Tensor& v) const {
  const int64_t layers = static_cast<int64_t>(is_float16() ? keys16_.size() : keys_.size());
  KILN_CHECK(layer >= 0 && layer < layers, kCacheOp, "layer ", layer, " out of range for ", layers, " layers");
  KILN_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.size(0) == batch_ && k.size(1) == kv_heads_ &&
                 k.size(3) == head_dim_ && v.shape() == k.shape(),
             kCacheOp, "keys and values must be (", batch_, ", ", kv_heads_, ", T, ", head_dim_, "), got ",
             k.defined() ? shape_str(k.shape()) : "undefined", " and ", v.defined() ? shape_str(v.shape()) : "undefined");
  KILN_CHECK(length_ + k.size(2) <= capacity_, kCacheOp, length_, " positions held and ", k.size(2),
             " more exceed the capacity ", capacity_);
}

std::pair<Tensor, Tensor> KVCache::append(int64_t layer, const Tensor& k, const Tensor& v) {
  KILN_CHECK(!is_float16(), kCacheOp, "a float16 cache is written with append_float16");
  check_append(layer, k, v);
  const Tensor& K = keys_[layer];
  const int64_t T = k.size(2);
  {
    NoGradGuard no_grad;  // the cache holds values, not a graph
    K.narrow(2, length_, T).copy_(k.detach());
    values_[layer].narrow(2, length_, T).copy_(v.detach());
  }
  return {K.narrow(2, 0, length_ + T), values_[layer].narrow(2, 0, length_ + T)};
}

void KVCache::append_float16(int64_t layer, const Tensor& k, const Tensor& v) {
  KILN_CHECK(is_float16(), kCacheOp, "append_float16 needs a float16 cache");
  check_append(layer, k, v);
  KILN_CHECK(k.dtype() == kFloat32 && v.dtype() == kFloat32 && k.device() == kCPU && v.device() == kCPU, kCacheOp,
             "a float16 cache takes float32 host keys and values, got ", dtype_name(k.dtype()), " and ",
             dtype_name(v.dtype()));
  const Tensor kc = k.detach().contiguous(), vc = v.detach().contiguous();
  const int64_t T = k.size(2), D = head_dim_, cap = capacity_, pad = padded_capacity();
  uint16_t* K = keys16_[layer].data();
  uint16_t* V = values16_[layer].data();
  std::vector<uint16_t> row(static_cast<size_t>(D));
  for (int64_t bh = 0; bh < batch_ * kv_heads_; ++bh) {
    for (int64_t t = 0; t < T; ++t) {
      ggml::to_half(kc.data<float>() + (bh * T + t) * D, K + (bh * cap + length_ + t) * D, D);
      ggml::to_half(vc.data<float>() + (bh * T + t) * D, row.data(), D);
      for (int64_t d = 0; d < D; ++d) V[(bh * D + d) * pad + length_ + t] = row[static_cast<size_t>(d)];
    }
  }
}

const uint16_t* KVCache::keys_f16(int64_t layer) const {
  KILN_CHECK(is_float16() && layer >= 0 && layer < static_cast<int64_t>(keys16_.size()), kCacheOp,
             "no float16 layer ", layer);
  return keys16_[layer].data();
}

const uint16_t* KVCache::values_f16(int64_t layer) const {
  KILN_CHECK(is_float16() && layer >= 0 && layer < static_cast<int64_t>(values16_.size()), kCacheOp,
             "no float16 layer ", layer);
  return values16_[layer].data();
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
