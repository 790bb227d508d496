#include "transformer/transformer.h"

namespace kiln::transformer {

TransformerLayerOptions TransformerOptions::layer_options() const {
  TransformerLayerOptions o;
  o.d_model = d_model;
  o.nhead = nhead;
  o.dim_feedforward = dim_feedforward;
  o.dropout = dropout;
  o.activation = activation;
  o.layer_norm_eps = layer_norm_eps;
  o.batch_first = batch_first;
  o.norm_first = norm_first;
  return o;
}

Transformer::Transformer(TransformerOptions o) : Cloneable("Transformer"), options(std::move(o)) {
  TransformerLayerOptions layer = options.layer_options();
  encoder = options.custom_encoder ? options.custom_encoder
                                   : std::make_shared<TransformerEncoder>(layer, options.num_encoder_layers, true);
  decoder = options.custom_decoder ? options.custom_decoder
                                   : std::make_shared<TransformerDecoder>(layer, options.num_decoder_layers, true);
  register_module("encoder", encoder);
  register_module("decoder", decoder);
  // As nn.Transformer._reset_parameters: Xavier-uniform on every matrix.
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (p.dim() > 1) nn::init::xavier_uniform_(p);
  }
}

std::shared_ptr<nn::Module> Transformer::make_fresh() const {
  // The encoder and decoder as they are (built or custom), cloned; the new Transformer's
  // re-initialisation is overwritten by clone's copy of the values.
  TransformerOptions o = options;
  o.custom_encoder = clone_child(encoder);
  o.custom_decoder = clone_child(decoder);
  return std::make_shared<Transformer>(o);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_kpm, const Tensor& tgt_kpm,
                            const Tensor& memory_kpm) {
  const char* op = "Transformer";
  KILN_CHECK(src.defined() && tgt.defined(), op, "src and tgt must be defined");
  const bool batched = src.dim() == 3;
  KILN_CHECK((src.dim() == 3 || src.dim() == 2) && tgt.dim() == src.dim(), op,
             "src and tgt must both be 3-D (batched) or 2-D, got shapes ", shape_str(src.shape()), " and ",
             shape_str(tgt.shape()));
  if (batched) {
    int64_t bd = options.batch_first ? 0 : 1;
    KILN_CHECK(src.size(bd) == tgt.size(bd), op, "the batch number of src and tgt must be equal, got shapes ",
               shape_str(src.shape()), " and ", shape_str(tgt.shape()));
  }
  KILN_CHECK(src.size(-1) == options.d_model && tgt.size(-1) == options.d_model, op,
             "the feature number of src and tgt must be equal to d_model (", options.d_model, "), got shapes ",
             shape_str(src.shape()), " and ", shape_str(tgt.shape()));
  Tensor memory = encoder->forward(src, src_mask, src_kpm);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_kpm, memory_kpm);
}

}  // namespace kiln::transformer
