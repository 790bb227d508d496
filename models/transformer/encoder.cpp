#include "transformer/encoder.h"

#include "transformer/feed_forward.h"
#include "transformer/layer_stack.h"

namespace kiln::transformer {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions opts)
    : TransformerEncoderLayer(with_sizes(std::move(opts), d_model, nhead)) {}

TransformerEncoderLayer::TransformerEncoderLayer(TransformerLayerOptions o)
    : Cloneable("TransformerEncoderLayer"), options(std::move(o)) {
  check_activation("TransformerEncoderLayer", options.activation);
  MultiheadAttentionOptions mha;
  mha.dropout = options.dropout;
  mha.batch_first = options.batch_first;
  // Registration order follows PyTorch's, so printing and state_dict order agree.
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(options.d_model, options.nhead, mha));
  linear1 = register_module("linear1", std::make_shared<nn::Linear>(options.d_model, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<nn::Linear>(options.dim_feedforward, options.d_model));
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(options.d_model, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(options.d_model, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& kpm) {
  return dropout1->forward(self_attn->forward(x, x, x, kpm, /*need_weights=*/false, mask).output);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  return dropout2->forward(feed_forward(x, linear1, *dropout, *linear2, options.activation, checkpoint_feed_forward));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm) {
  // Each residual add and the norm that reads its sum are one pass (add_layer_norm).
  if (options.norm_first) {
    SumAndNorm x = norm2->forward_add_with_sum(src, self_attention_block(norm1->forward(src), src_mask, kpm));
    return add(x.sum, feed_forward_block(x.norm));
  }
  Tensor x = norm1->forward_add(src, self_attention_block(src, src_mask, kpm));
  return norm2->forward_add(x, feed_forward_block(x));
}

std::shared_ptr<nn::Module> TransformerEncoderLayer::make_fresh() const {
  auto copy = std::make_shared<TransformerEncoderLayer>(options);
  copy->checkpoint_feed_forward = checkpoint_feed_forward;
  return copy;
}

TransformerEncoder::TransformerEncoder(std::shared_ptr<nn::ModuleList<TransformerEncoderLayer>> l,
                                       std::shared_ptr<nn::UnaryModule> n)
    : Cloneable("TransformerEncoder"), layers(register_module("layers", std::move(l))) {
  if (n) norm = register_module("norm", std::move(n));
}

TransformerEncoder::TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& layer, int64_t num_layers,
                                       std::shared_ptr<nn::UnaryModule> final_norm)
    : TransformerEncoder(detail::layer_clones("TransformerEncoder", "encoder_layer", layer, num_layers),
                         std::move(final_norm)) {}

TransformerEncoder::TransformerEncoder(TransformerLayerOptions layer, int64_t num_layers, bool final_norm)
    : TransformerEncoder(detail::fresh_layers<TransformerEncoderLayer>("TransformerEncoder", layer, num_layers),
                         nullptr) {
  if (final_norm) norm = register_module("norm", std::make_shared<nn::LayerNorm>(layer.d_model, layer.layer_norm_eps));
}

std::shared_ptr<nn::Module> TransformerEncoder::make_fresh() const {
  // Not make_shared: this constructor is private.
  auto fresh = std::shared_ptr<TransformerEncoder>(new TransformerEncoder(clone_child(layers), clone_child(norm)));
  fresh->checkpoint_layers = checkpoint_layers;
  return fresh;
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& kpm) {
  Tensor x = src;
  for (const auto& layer : *layers) {
    if (checkpoint_layers) {
      // By value: the layer runs again in backward, after this call has returned.
      x = utils::checkpoint(
          [layer, mask, kpm](const Tensor& in) {
            WholeLayerCheckpoint whole;  // no second checkpoint of the hidden layer inside
            return layer->forward(in, mask, kpm);
          },
          x);
    } else {
      x = layer->forward(x, mask, kpm);
    }
  }
  return norm ? norm->forward(x) : x;
}

}  // namespace kiln::transformer
