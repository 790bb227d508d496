#pragma once
// nn.TransformerDecoderLayer and nn.TransformerDecoder, same parameter names, plus a
// one-step forward with cached keys and values for decoding.
#include <memory>
#include <optional>
#include <vector>

#include "attention.h"
#include "layer_options.h"

namespace kiln::transformer {

// What one decoder layer remembers between decoding steps.
struct DecoderLayerCache {
  KVCache self_attn;   // grows by one position per step
  KVCache cross_attn;  // the memory's keys and values, computed once
};

class TransformerDecoderLayer : public nn::Cloneable<TransformerDecoderLayer> {
 public:
  explicit TransformerDecoderLayer(TransformerLayerOptions opts = {});
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions opts = {});

  // tgt (T, N, E) or (N, T, E) with batch_first; memory (S, N, E) likewise; masks as
  // nn.TransformerDecoderLayer: tgt_mask (T, T), memory_mask (T, S), padding masks
  // (N, T) and (N, S). -> same shape as tgt.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());

  // The new target positions only (usually one), attending to every cached position.
  Tensor forward_step(const Tensor& tgt, const Tensor& memory, DecoderLayerCache& cache,
                      const Tensor& memory_key_padding_mask = Tensor());
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  // When set, forward and forward_step keep the cross-attention weights of the last call,
  // per head: (N, nhead, T, S).
  bool keep_cross_attention = false;
  Tensor last_cross_attention;

  // Kiln's own: the feed-forward block's hidden layer through utils::checkpoint (while grad
  // is on), so the layer keeps nothing d_ff wide for backward, which runs linear1 and the
  // activation once more (feed_forward.h). Same outputs and gradients, bit for bit.
  // std::nullopt (the default): under autocast where saved activations are written again
  // (a GPU by default: checkpoint_feed_forward_by_default); true or false: always, never.
  std::optional<bool> checkpoint_feed_forward;
  TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<nn::Linear> linear1, linear2;
  std::shared_ptr<nn::Dropout> dropout, dropout1, dropout2, dropout3;
  std::shared_ptr<nn::LayerNorm> norm1, norm2, norm3;

 private:
  Tensor feed_forward_block(const Tensor& x);
  Tensor keep(const AttentionOutput& a);
  // The three residual sub-layers, pre- or post-norm, around self-attention `sa` and
  // cross-attention `ca` (full or cached): what forward and forward_step share.
  template <class SelfAttention, class CrossAttention>
  Tensor sublayers(const Tensor& tgt, SelfAttention sa, CrossAttention ca);
};

class TransformerDecoder : public nn::Cloneable<TransformerDecoder> {
 public:
  // As nn.TransformerDecoder(decoder_layer, num_layers, norm): num_layers deep copies of
  // `layer` (identical initial weights, as torch's _get_clones), then `norm` when not null.
  TransformerDecoder(const std::shared_ptr<TransformerDecoderLayer>& layer, int64_t num_layers,
                     std::shared_ptr<nn::UnaryModule> norm = nullptr);
  // num_layers fresh layers built from `layer` options, then a LayerNorm when final_norm.
  TransformerDecoder(TransformerLayerOptions layer, int64_t num_layers, bool final_norm = false);

  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());

  // One cache per layer; start with an empty vector.
  Tensor forward_step(const Tensor& tgt, const Tensor& memory, std::vector<DecoderLayerCache>& cache,
                      const Tensor& memory_key_padding_mask = Tensor());
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  std::shared_ptr<nn::ModuleList<TransformerDecoderLayer>> layers;
  std::shared_ptr<nn::UnaryModule> norm;  // null without a final norm
  // Each layer through utils::checkpoint while grad is on (TransformerEncoder's).
  bool checkpoint_layers = false;

 private:
  // The layers and the optional final norm, registered as given: what the public
  // constructors and make_fresh share.
  TransformerDecoder(std::shared_ptr<nn::ModuleList<TransformerDecoderLayer>> layers,
                     std::shared_ptr<nn::UnaryModule> norm);
};

}  // namespace kiln::transformer
