#include "transformer/seq2seq.h"

#include <cmath>

namespace kiln::transformer {

Seq2SeqTransformer::Seq2SeqTransformer(Seq2SeqOptions o) : Cloneable("Seq2SeqTransformer"), options(std::move(o)) {
  const char* op = "Seq2SeqTransformer";
  KILN_CHECK(options.src_vocab_size > 0 && options.tgt_vocab_size > 0, op,
             "vocabulary sizes must be positive, got src ", options.src_vocab_size, ", tgt ", options.tgt_vocab_size);
  KILN_CHECK(options.pad_id >= 0 && options.pad_id < std::min(options.src_vocab_size, options.tgt_vocab_size), op,
             "pad_id ", options.pad_id, " is not in both vocabularies");
  const int64_t d = options.d_model;
  src_embedding = register_module("src_embedding", std::make_shared<nn::Embedding>(options.src_vocab_size, d, options.pad_id));
  KILN_CHECK(!options.share_embeddings || options.src_vocab_size == options.tgt_vocab_size, op,
             "share_embeddings needs one vocabulary size, got src ", options.src_vocab_size, ", tgt ",
             options.tgt_vocab_size);
  tgt_embedding = register_module("tgt_embedding", options.share_embeddings
                                                       ? src_embedding
                                                       : std::make_shared<nn::Embedding>(options.tgt_vocab_size, d, options.pad_id));
  if (options.learned_positions) {
    positional_encoding = std::make_shared<LearnedPositionalEncoding>(d, options.dropout, options.max_len, true);
  } else {
    positional_encoding = std::make_shared<SinusoidalPositionalEncoding>(d, options.dropout, options.max_len, true);
  }
  register_module("positional_encoding", positional_encoding);
  TransformerOptions t;
  t.d_model = d;
  t.nhead = options.nhead;
  t.num_encoder_layers = options.num_encoder_layers;
  t.num_decoder_layers = options.num_decoder_layers;
  t.dim_feedforward = options.dim_feedforward;
  t.dropout = options.dropout;
  t.activation = options.activation;
  t.batch_first = true;
  t.norm_first = options.norm_first;
  if (!options.final_norms) {
    // The seeds' stacks: layers only, no LayerNorm after the last one.
    TransformerLayerOptions layer = t.layer_options();
    t.custom_encoder = std::make_shared<TransformerEncoder>(layer, t.num_encoder_layers, /*final_norm=*/false);
    t.custom_decoder = std::make_shared<TransformerDecoder>(layer, t.num_decoder_layers, /*final_norm=*/false);
  }
  transformer = register_module("transformer", std::make_shared<Transformer>(t));
  transformer->encoder->checkpoint_layers = transformer->decoder->checkpoint_layers = options.checkpoint_layers;
  for (const auto& layer : *transformer->encoder->layers) layer->checkpoint_feed_forward = options.checkpoint_feed_forward;
  for (const auto& layer : *transformer->decoder->layers) layer->checkpoint_feed_forward = options.checkpoint_feed_forward;
  generator = register_module("generator", std::make_shared<nn::Linear>(d, options.tgt_vocab_size));
}

void Seq2SeqTransformer::check_ids(const char* what, const Tensor& ids, int64_t vocab) const {
  KILN_CHECK(ids.defined() && ids.dtype() == kInt64 && ids.dim() == 2, "Seq2SeqTransformer", what,
             " must be (batch, length) int64 ids, got ",
             ids.defined() ? dtype_name(ids.dtype()) + std::string(" ") + shape_str(ids.shape()) : "undefined");
  KILN_CHECK(ids.size(1) > 0, "Seq2SeqTransformer", what, " is empty: shape ", shape_str(ids.shape()));
  // Checked here too (the embedding would only say "embedding"): which input, which id.
  if (ids.numel() == 0) return;
  const int64_t lo = static_cast<int64_t>(ids.amin().item()), hi = static_cast<int64_t>(ids.amax().item());
  KILN_CHECK(lo >= 0 && hi < vocab, "Seq2SeqTransformer", what, " has token id ", lo < 0 ? lo : hi,
             ", outside the vocabulary of ", vocab, " ids (0..", vocab - 1, ")");
}

Tensor Seq2SeqTransformer::embed(nn::Embedding& table, const Tensor& ids, int64_t offset) {
  Tensor x = table.forward(ids);
  if (options.scale_embedding) x = mul(x, std::sqrt(static_cast<double>(options.d_model)));
  if (options.learned_positions) return static_cast<LearnedPositionalEncoding&>(*positional_encoding).forward(x, offset);
  return static_cast<SinusoidalPositionalEncoding&>(*positional_encoding).forward(x, offset);
}

Tensor Seq2SeqTransformer::encode_ids(const Tensor& src, const Tensor& src_kpm) {
  return transformer->encoder->forward(embed(*src_embedding, src, 0), Tensor(), src_kpm);
}

Tensor Seq2SeqTransformer::decoder_states(const Tensor& tgt_in, const Tensor& memory, const Tensor& memory_kpm) {
  const int64_t T = tgt_in.size(1);
  return transformer->decoder->forward(embed(*tgt_embedding, tgt_in, 0), memory, causal_mask(T, tgt_in.device()),
                                       Tensor(), key_padding_mask(tgt_in, options.pad_id), memory_kpm);
}

Tensor Seq2SeqTransformer::decode_ids(const Tensor& tgt_in, const Tensor& memory, const Tensor& memory_kpm) {
  return generator->forward(decoder_states(tgt_in, memory, memory_kpm));
}

Tensor Seq2SeqTransformer::encode(const Tensor& src) {
  check_ids("src", src, options.src_vocab_size);
  return encode_ids(src, key_padding_mask(src, options.pad_id));
}

Tensor Seq2SeqTransformer::decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src) {
  check_ids("tgt", tgt_in, options.tgt_vocab_size);
  return decode_ids(tgt_in, memory, key_padding_mask(src, options.pad_id));
}

Tensor Seq2SeqTransformer::decode_step(const Tensor& tgt, const Tensor& memory, const Tensor& src,
                                       std::vector<DecoderLayerCache>& cache) {
  check_ids("tgt", tgt, options.tgt_vocab_size);
  int64_t offset = cache.empty() ? 0 : cache.front().self_attn.length();
  Tensor y = transformer->decoder->forward_step(embed(*tgt_embedding, tgt, offset), memory, cache,
                                                key_padding_mask(src, options.pad_id));
  return generator->forward(y);
}

Tensor Seq2SeqTransformer::cross_attention(const Tensor& src, const Tensor& tgt_in) {
  TransformerDecoderLayer& last = *(*transformer->decoder->layers)[transformer->decoder->layers->size() - 1];
  // The layer keeps its weights only while asked to, also when decode throws.
  struct Keep {
    TransformerDecoderLayer& layer;
    explicit Keep(TransformerDecoderLayer& l) : layer(l) { layer.keep_cross_attention = true; }
    ~Keep() { layer.keep_cross_attention = false; }
  } keep(last);
  NoGradGuard no_grad;
  nn::TrainingModeGuard eval(*this, false);
  decode(tgt_in, encode(src), src);
  return last.last_cross_attention;
}

std::shared_ptr<nn::Module> Seq2SeqTransformer::make_fresh() const {
  return std::make_shared<Seq2SeqTransformer>(options);
}

Tensor Seq2SeqTransformer::forward(const Tensor& src, const Tensor& tgt_in) {
  return generator->forward(decoder_output(src, tgt_in));
}

Tensor Seq2SeqTransformer::decoder_output(const Tensor& src, const Tensor& tgt_in) {
  check_ids("src", src, options.src_vocab_size);
  check_ids("tgt", tgt_in, options.tgt_vocab_size);
  KILN_CHECK(src.size(0) == tgt_in.size(0), "Seq2SeqTransformer", "src and tgt batch sizes differ: ",
             shape_str(src.shape()), " and ", shape_str(tgt_in.shape()));
  // Validated once here; the masks of src serve the encoder and the cross-attention.
  Tensor src_kpm = key_padding_mask(src, options.pad_id);
  // The encoder's output goes when this returns, before the generator's product allocates
  // the step's largest tensor (the logits): its readers, the cross-attention projections,
  // keep it as a recipe (autograd/recompute.h), so it is not held at the training peak.
  return decoder_states(tgt_in, encode_ids(src, src_kpm), src_kpm);
}

}  // namespace kiln::transformer
