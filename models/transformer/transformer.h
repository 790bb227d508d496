#pragma once
// nn.Transformer: every constructor argument and forward mask, the same state_dict keys
// ("encoder.layers.0.self_attn.in_proj_weight", …, "decoder.norm.bias"), so a state
// dict saved from PyTorch as safetensors loads unchanged.
#include <memory>

#include "decoder.h"
#include "encoder.h"
#include "masks.h"

namespace kiln::transformer {

struct TransformerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  std::shared_ptr<TransformerEncoder> custom_encoder;  // used instead of a built one when set
  std::shared_ptr<TransformerDecoder> custom_decoder;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;

  TransformerLayerOptions layer_options() const;
};

class Transformer : public nn::Cloneable<Transformer> {
 public:
  explicit Transformer(TransformerOptions opts = {});

  // src (S, N, E), tgt (T, N, E) (batch-first: (N, S, E), (N, T, E)); src_mask (S, S),
  // tgt_mask (T, T), memory_mask (T, S), each bool or float, 2-D or (N·nhead, ·, ·);
  // padding masks (N, S), (N, T), (N, S). -> (T, N, E) or (N, T, E).
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor());

  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  static Tensor generate_square_subsequent_mask(int64_t size, TensorOptions opts = {}) {
    return transformer::generate_square_subsequent_mask(size, opts);
  }

  TransformerOptions options;
  std::shared_ptr<TransformerEncoder> encoder;
  std::shared_ptr<TransformerDecoder> decoder;
};

}  // namespace kiln::transformer
