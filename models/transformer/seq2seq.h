#pragma once
// The sequence-to-sequence model of the seeds (000/002/004): token embeddings (scaled by
// sqrt(d_model) as the paper, or not as seeds 002/004), positional encoding, the
// Transformer (with or without the final encoder and decoder norms: nn.Transformer has
// them, seeds 002/004's hand-written stacks do not), and a generator Linear to the
// target vocabulary. It returns logits; the loss applies log-softmax itself.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "positional_encoding.h"
#include "transformer.h"

namespace kiln::transformer {

struct Seq2SeqOptions {
  int64_t src_vocab_size = 0;
  int64_t tgt_vocab_size = 0;
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  bool norm_first = false;
  int64_t max_len = 512;
  bool learned_positions = false;  // 003's learned positional encoding instead of sinusoids
  int64_t pad_id = 0;
  bool scale_embedding = true;  // embeddings · sqrt(d_model) (the paper); false as seeds 002/004
  bool final_norms = true;      // a LayerNorm after the encoder and the decoder (nn.Transformer)
  // One embedding table for source and target (a joint vocabulary, as a SentencePiece
  // model trained on both languages gives): src_embedding and tgt_embedding are then the
  // same module, its weight one parameter (listed once; the state dict has it under both
  // names, as torch's). The vocabulary sizes must be equal.
  bool share_embeddings = false;
  // Every encoder and decoder layer through utils::checkpoint in training: less memory
  // at the step's peak for one more forward pass of the layers in backward.
  bool checkpoint_layers = false;
  // Only each layer's feed-forward hidden layer through utils::checkpoint (the layers'
  // checkpoint_feed_forward): its d_ff-wide activation is not kept, for linear1 and the
  // activation once more in backward. Same outputs and gradients, bit for bit.
  // std::nullopt (the default): on under autocast where saved activations are written
  // again in backward (a GPU by default; feed_forward.h), else off; true or false: always,
  // never.
  std::optional<bool> checkpoint_feed_forward;
};

class Seq2SeqTransformer : public nn::Cloneable<Seq2SeqTransformer> {
 public:
  explicit Seq2SeqTransformer(Seq2SeqOptions opts);

  // src (N, S), tgt_in (N, T) int64 ids -> logits (N, T, tgt_vocab_size). Padding and
  // causal masks are built from the ids.
  Tensor forward(const Tensor& src, const Tensor& tgt_in);
  // The same without the generator: the decoder's output (N, T, d_model), for a loss that
  // applies the generator itself (linear_cross_entropy(states, generator->weight,
  // generator->bias, labels): the logits are then never held whole).
  Tensor decoder_output(const Tensor& src, const Tensor& tgt_in);

  // src (N, S) -> memory (N, S, d_model).
  Tensor encode(const Tensor& src);
  // tgt_in (N, T), memory (N, S, d_model) -> logits (N, T, V).
  Tensor decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src);
  // The logits of new positions tgt (N, L) placed after `cache`'s positions -> (N, L, V).
  Tensor decode_step(const Tensor& tgt, const Tensor& memory, const Tensor& src,
                     std::vector<DecoderLayerCache>& cache);
  // The last decoder layer's cross-attention weights, head by head, while it reads
  // tgt_in (N, T) against src (N, S): (N, nhead, T, S), rows summing to 1, none on padded
  // source positions. Eval behaviour, no graph (what a picture of attention shows).
  Tensor cross_attention(const Tensor& src, const Tensor& tgt_in);
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  Seq2SeqOptions options;
  std::shared_ptr<nn::Embedding> src_embedding, tgt_embedding;
  std::shared_ptr<nn::UnaryModule> positional_encoding;
  std::shared_ptr<Transformer> transformer;
  std::shared_ptr<nn::Linear> generator;

 private:
  Tensor embed(nn::Embedding& table, const Tensor& ids, int64_t offset);
  // encode and decode after the ids were checked, with the source padding mask given.
  Tensor encode_ids(const Tensor& src, const Tensor& src_kpm);
  Tensor decode_ids(const Tensor& tgt_in, const Tensor& memory, const Tensor& memory_kpm);
  // The decoder's output (before the generator) for ids already checked.
  Tensor decoder_states(const Tensor& tgt_in, const Tensor& memory, const Tensor& memory_kpm);
  void check_ids(const char* what, const Tensor& ids, int64_t vocab) const;
};

}  // namespace kiln::transformer
