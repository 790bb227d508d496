#include "transformer/decoder.h"

#include "transformer/feed_forward.h"
#include "transformer/layer_stack.h"

namespace kiln::transformer {

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions opts)
    : TransformerDecoderLayer(with_sizes(std::move(opts), d_model, nhead)) {}

TransformerDecoderLayer::TransformerDecoderLayer(TransformerLayerOptions o)
    : Cloneable("TransformerDecoderLayer"), options(std::move(o)) {
  check_activation("TransformerDecoderLayer", options.activation);
  MultiheadAttentionOptions mha;
  mha.dropout = options.dropout;
  mha.batch_first = options.batch_first;
  const int64_t d = options.d_model;
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d, options.nhead, mha));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(d, options.nhead, mha));
  linear1 = register_module("linear1", std::make_shared<nn::Linear>(d, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<nn::Linear>(options.dim_feedforward, d));
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(d, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(d, options.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<nn::LayerNorm>(d, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<nn::Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::feed_forward_block(const Tensor& x) {
  return dropout3->forward(feed_forward(x, linear1, *dropout, *linear2, options.activation, checkpoint_feed_forward));
}

Tensor TransformerDecoderLayer::keep(const AttentionOutput& a) {
  if (keep_cross_attention) last_cross_attention = a.weights.detach();
  return a.output;
}

template <class SelfAttention, class CrossAttention>
Tensor TransformerDecoderLayer::sublayers(const Tensor& tgt, SelfAttention sa, CrossAttention ca) {
  // Each residual add and the norm that reads its sum are one pass (add_layer_norm).
  if (options.norm_first) {
    SumAndNorm x = norm2->forward_add_with_sum(tgt, sa(norm1->forward(tgt)));
    x = norm3->forward_add_with_sum(x.sum, ca(x.norm));
    return add(x.sum, feed_forward_block(x.norm));
  }
  Tensor x = norm1->forward_add(tgt, sa(tgt));
  x = norm2->forward_add(x, ca(x));
  return norm3->forward_add(x, feed_forward_block(x));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_kpm,
                                        const Tensor& memory_kpm) {
  auto sa = [&](const Tensor& x) {
    return dropout1->forward(self_attn->forward(x, x, x, tgt_kpm, false, tgt_mask).output);
  };
  auto ca = [&](const Tensor& x) {
    AttentionOutput a = multihead_attn->forward(x, memory, memory, memory_kpm, keep_cross_attention, memory_mask,
                                                /*average_attn_weights=*/false);
    return dropout2->forward(keep(a));
  };
  return sublayers(tgt, sa, ca);
}

Tensor TransformerDecoderLayer::forward_step(const Tensor& tgt, const Tensor& memory, DecoderLayerCache& cache,
                                             const Tensor& memory_kpm) {
  auto sa = [&](const Tensor& x) {
    return dropout1->forward(self_attn->forward_cached(x, x, cache.self_attn, /*static_kv=*/false).output);
  };
  auto ca = [&](const Tensor& x) {
    AttentionOutput a = multihead_attn->forward_cached(x, memory, cache.cross_attn, /*static_kv=*/true, memory_kpm,
                                                       keep_cross_attention, false);
    return dropout2->forward(keep(a));
  };
  return sublayers(tgt, sa, ca);
}

std::shared_ptr<nn::Module> TransformerDecoderLayer::make_fresh() const {
  auto copy = std::make_shared<TransformerDecoderLayer>(options);
  copy->keep_cross_attention = keep_cross_attention;
  copy->checkpoint_feed_forward = checkpoint_feed_forward;
  return copy;
}

TransformerDecoder::TransformerDecoder(std::shared_ptr<nn::ModuleList<TransformerDecoderLayer>> l,
                                       std::shared_ptr<nn::UnaryModule> n)
    : Cloneable("TransformerDecoder"), layers(register_module("layers", std::move(l))) {
  if (n) norm = register_module("norm", std::move(n));
}

TransformerDecoder::TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer>& layer, int64_t num_layers,
                                       std::shared_ptr<nn::UnaryModule> final_norm)
    : TransformerDecoder(detail::layer_clones("TransformerDecoder", "decoder_layer", layer, num_layers),
                         std::move(final_norm)) {}

TransformerDecoder::TransformerDecoder(TransformerLayerOptions layer, int64_t num_layers, bool final_norm)
    : TransformerDecoder(detail::fresh_layers<TransformerDecoderLayer>("TransformerDecoder", layer, num_layers),
                         nullptr) {
  if (final_norm) norm = register_module("norm", std::make_shared<nn::LayerNorm>(layer.d_model, layer.layer_norm_eps));
}

std::shared_ptr<nn::Module> TransformerDecoder::make_fresh() const {
  // Not make_shared: this constructor is private.
  auto fresh = std::shared_ptr<TransformerDecoder>(new TransformerDecoder(clone_child(layers), clone_child(norm)));
  fresh->checkpoint_layers = checkpoint_layers;
  return fresh;
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& memory_kpm) {
  Tensor x = tgt;
  for (const auto& layer : *layers) {
    if (checkpoint_layers) {
      // By value: the layer runs again in backward, after this call has returned.
      auto run = [layer, tgt_mask, memory_mask, tgt_kpm, memory_kpm](const std::vector<Tensor>& in) {
        WholeLayerCheckpoint whole;  // no second checkpoint of the hidden layer inside
        return std::vector<Tensor>{layer->forward(in[0], in[1], tgt_mask, memory_mask, tgt_kpm, memory_kpm)};
      };
      x = utils::checkpoint(run, {x, memory})[0];
    } else {
      x = layer->forward(x, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm);
    }
  }
  return norm ? norm->forward(x) : x;
}

Tensor TransformerDecoder::forward_step(const Tensor& tgt, const Tensor& memory, std::vector<DecoderLayerCache>& cache,
                                        const Tensor& memory_kpm) {
  if (cache.empty()) cache.resize(layers->size());
  KILN_CHECK(cache.size() == layers->size(), "TransformerDecoder::forward_step", "the cache has ", cache.size(),
             " layers, the decoder ", layers->size());
  Tensor x = tgt;
  size_t i = 0;
  for (const auto& layer : *layers) x = layer->forward_step(x, memory, cache[i++], memory_kpm);
  return norm ? norm->forward(x) : x;
}

}  // namespace kiln::transformer
