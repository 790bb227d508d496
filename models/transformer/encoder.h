#pragma once
// nn.TransformerEncoderLayer and nn.TransformerEncoder, same parameter names.
#include <memory>
#include <optional>

#include "attention.h"
#include "layer_options.h"

namespace kiln::transformer {

class TransformerEncoderLayer : public nn::Cloneable<TransformerEncoderLayer> {
 public:
  explicit TransformerEncoderLayer(TransformerLayerOptions opts = {});
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions opts = {});

  // src (S, N, E), or (N, S, E) with batch_first; src_mask (S, S) or (N·nhead, S, S);
  // src_key_padding_mask (N, S). -> same shape as src.
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor());
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  // Kiln's own: the feed-forward block's hidden layer through utils::checkpoint (while grad
  // is on), so the layer keeps nothing d_ff wide for backward, which runs linear1 and the
  // activation once more (feed_forward.h). Same outputs and gradients, bit for bit.
  // std::nullopt (the default): under autocast where saved activations are written again
  // (a GPU by default: checkpoint_feed_forward_by_default); true or false: always, never.
  std::optional<bool> checkpoint_feed_forward;
  TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<nn::Linear> linear1, linear2;
  std::shared_ptr<nn::Dropout> dropout, dropout1, dropout2;
  std::shared_ptr<nn::LayerNorm> norm1, norm2;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor feed_forward_block(const Tensor& x);
};

class TransformerEncoder : public nn::Cloneable<TransformerEncoder> {
 public:
  // As nn.TransformerEncoder(encoder_layer, num_layers, norm): num_layers deep copies of
  // `layer` (layer->clone(): identical initial weights, as torch's _get_clones; `layer`
  // itself is not part of the encoder), then `norm` (used as given) when not null.
  TransformerEncoder(const std::shared_ptr<TransformerEncoderLayer>& layer, int64_t num_layers,
                     std::shared_ptr<nn::UnaryModule> norm = nullptr);
  // num_layers fresh layers built from `layer` options (independently initialised),
  // followed by a final LayerNorm when final_norm.
  TransformerEncoder(TransformerLayerOptions layer, int64_t num_layers, bool final_norm = false);

  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor());
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  std::shared_ptr<nn::ModuleList<TransformerEncoderLayer>> layers;
  std::shared_ptr<nn::UnaryModule> norm;  // null without a final norm
  // Each layer through utils::checkpoint while grad is on: its activations are not kept
  // but written again in backward (one more forward of the layers for their memory).
  bool checkpoint_layers = false;

 private:
  // The layers and the optional final norm, registered as given: what the public
  // constructors and make_fresh share.
  TransformerEncoder(std::shared_ptr<nn::ModuleList<TransformerEncoderLayer>> layers,
                     std::shared_ptr<nn::UnaryModule> norm);
};

}  // namespace kiln::transformer
