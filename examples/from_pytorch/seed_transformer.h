#pragma once
// The model of seeds 002 and 004, line for line: a post-norm encoder-decoder built from
// its own MultiHeadAttention (split_heads / combine_heads), PositionWiseFeedForward,
// PositionalEncoding, EncoderLayer, DecoderLayer and Transformer with generate_mask.
// 004's forward ends in F.softmax before nn.CrossEntropyLoss, which applies log_softmax
// itself: that is a bug (the loss then sees probabilities as logits), so this model
// returns logits, and seed004_inference applies the softmax only where it shows
// probabilities.
#include <cmath>
#include <memory>
#include <vector>

#include <kiln/kiln.h>

namespace seed {

using namespace kiln;

struct MultiHeadAttention : nn::Cloneable<MultiHeadAttention> {
  MultiHeadAttention(int64_t d_model, int64_t num_heads) : d_model(d_model), num_heads(num_heads) {
    KILN_CHECK(d_model % num_heads == 0, "MultiHeadAttention", "d_model must be divisible by num_heads");
    d_k = d_model / num_heads;
    W_Q = register_module("W_Q", std::make_shared<nn::Linear>(d_model, d_model));
    W_K = register_module("W_K", std::make_shared<nn::Linear>(d_model, d_model));
    W_V = register_module("W_V", std::make_shared<nn::Linear>(d_model, d_model));
    W_o = register_module("W_o", std::make_shared<nn::Linear>(d_model, d_model));
  }

  Tensor scaled_dot_product_attention(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& mask = {}) {
    Tensor attn_scores = matmul(Q, K.transpose(-2, -1)) / std::sqrt(static_cast<double>(d_k));
    if (mask.defined()) attn_scores = attn_scores.masked_fill(mask == 0, -1e9);
    Tensor attn_probs = softmax(attn_scores, -1);
    return matmul(attn_probs, V);
  }

  // (batch, seq, d_model) -> (batch, heads, seq, d_k)
  Tensor split_heads(const Tensor& x) {
    int64_t batch_size = x.size(0), seq_length = x.size(1);
    return x.view({batch_size, seq_length, num_heads, d_k}).transpose(1, 2);
  }
  // (batch, heads, seq, d_k) -> (batch, seq, d_model)
  Tensor combine_heads(const Tensor& x) {
    int64_t batch_size = x.size(0), seq_length = x.size(2);
    return x.transpose(1, 2).contiguous().view({batch_size, seq_length, d_model});
  }

  Tensor forward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& mask = {}) {
    Tensor q = split_heads((*W_Q)(Q));
    Tensor k = split_heads((*W_K)(K));
    Tensor v = split_heads((*W_V)(V));
    Tensor attn_outputs = scaled_dot_product_attention(q, k, v, mask);
    return (*W_o)(combine_heads(attn_outputs));
  }

  int64_t d_model, num_heads, d_k;
  std::shared_ptr<nn::Linear> W_Q, W_K, W_V, W_o;
};

struct PositionWiseFeedForward : nn::Cloneable<PositionWiseFeedForward> {
  PositionWiseFeedForward(int64_t d_model, int64_t d_ff) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(d_model, d_ff));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(d_ff, d_model));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor forward(const Tensor& x) { return (*fc2)((*relu)((*fc1)(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::ReLU> relu;
};

struct PositionalEncoding : nn::Cloneable<PositionalEncoding> {
  PositionalEncoding(int64_t d_model, int64_t max_seq_length) {
    Tensor pe = zeros({max_seq_length, d_model});
    Tensor position = arange(0, static_cast<double>(max_seq_length), 1, kFloat32).unsqueeze(1);
    Tensor div_term = exp(arange(0, static_cast<double>(d_model), 2).to(kFloat32) * -(std::log(10000.0) / d_model));
    pe.slice(1, 0, d_model, 2).copy_(sin(position * div_term));  // pe[:, 0::2]
    pe.slice(1, 1, d_model, 2).copy_(cos(position * div_term));  // pe[:, 1::2]
    this->pe = register_buffer("pe", pe.unsqueeze(0));             // (1, max_seq_length, d_model)
  }
  // x (batch, seq, d_model) + the first seq rows of the table
  Tensor forward(const Tensor& x) { return x + pe.slice(1, 0, x.size(1)); }
  Tensor pe;
};

struct EncoderLayer : nn::Cloneable<EncoderLayer> {
  EncoderLayer(int64_t d_model, int64_t num_heads, int64_t d_ff, double dropout) {
    self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(d_model, num_heads));
    feed_forward = register_module("feed_forward", std::make_shared<PositionWiseFeedForward>(d_model, d_ff));
    norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(d_model));
    norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(d_model));
    this->dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout));
  }
  Tensor forward(Tensor x, const Tensor& mask) {
    Tensor attn_output = (*self_attn)(x, x, x, mask);
    x = (*norm1)(x + (*dropout)(attn_output));
    Tensor ff_output = (*feed_forward)(x);
    x = (*norm2)(x + (*dropout)(ff_output));
    return x;
  }
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<PositionWiseFeedForward> feed_forward;
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  std::shared_ptr<nn::Dropout> dropout;
};

struct DecoderLayer : nn::Cloneable<DecoderLayer> {
  DecoderLayer(int64_t d_model, int64_t num_heads, int64_t d_ff, double dropout) {
    self_attn = register_module("self_attn", std::make_shared<MultiHeadAttention>(d_model, num_heads));
    cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(d_model, num_heads));
    feed_forward = register_module("feed_forward", std::make_shared<PositionWiseFeedForward>(d_model, d_ff));
    norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(d_model));
    norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(d_model));
    norm3 = register_module("norm3", std::make_shared<nn::LayerNorm>(d_model));
    this->dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout));
  }
  Tensor forward(Tensor x, const Tensor& enc_output, const Tensor& src_mask, const Tensor& tgt_mask) {
    Tensor attn_output = (*self_attn)(x, x, x, tgt_mask);
    x = (*norm1)(x + (*dropout)(attn_output));
    Tensor cross_output = (*cross_attn)(x, enc_output, enc_output, src_mask);
    x = (*norm2)(x + (*dropout)(cross_output));
    Tensor ff_output = (*feed_forward)(x);
    x = (*norm3)(x + (*dropout)(ff_output));
    return x;
  }
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<PositionWiseFeedForward> feed_forward;
  std::shared_ptr<nn::LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<nn::Dropout> dropout;
};

struct Transformer : nn::Cloneable<Transformer> {
  Transformer(int64_t src_vocab_size, int64_t tgt_vocab_size, int64_t d_model, int64_t num_heads, int64_t num_layers,
              int64_t d_ff, int64_t max_seq_length, double dropout) {
    encoder_embedding = register_module("encoder_embedding", std::make_shared<nn::Embedding>(src_vocab_size, d_model));
    decoder_embedding = register_module("decoder_embedding", std::make_shared<nn::Embedding>(tgt_vocab_size, d_model));
    positional_encoding = register_module("positional_encoding", std::make_shared<PositionalEncoding>(d_model, max_seq_length));
    encoder_layers = register_module("encoder_layers", std::make_shared<nn::ModuleList<EncoderLayer>>());
    decoder_layers = register_module("decoder_layers", std::make_shared<nn::ModuleList<DecoderLayer>>());
    for (int64_t i = 0; i < num_layers; ++i) {
      encoder_layers->push_back(std::make_shared<EncoderLayer>(d_model, num_heads, d_ff, dropout));
      decoder_layers->push_back(std::make_shared<DecoderLayer>(d_model, num_heads, d_ff, dropout));
    }
    fc = register_module("fc", std::make_shared<nn::Linear>(d_model, tgt_vocab_size));
    this->dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout));
  }

  // src (batch, S), tgt (batch, T) -> src_mask (batch, 1, 1, S), tgt_mask (batch, 1, T, T)
  std::pair<Tensor, Tensor> generate_mask(const Tensor& src, const Tensor& tgt) {
    Tensor src_mask = (src != 0).unsqueeze(1).unsqueeze(2);
    Tensor tgt_mask = (tgt != 0).unsqueeze(1).unsqueeze(3);
    int64_t seq_length = tgt.size(1);
    Tensor nopeak_mask = (1 - triu(ones({1, seq_length, seq_length}), 1)).to(kBool);
    tgt_mask = tgt_mask & nopeak_mask;
    return {src_mask, tgt_mask};
  }

  // -> logits (batch, T, tgt_vocab_size)
  Tensor forward(const Tensor& src, const Tensor& tgt) {
    auto [src_mask, tgt_mask] = generate_mask(src, tgt);
    Tensor src_embedded = (*dropout)((*positional_encoding)((*encoder_embedding)(src)));
    Tensor tgt_embedded = (*dropout)((*positional_encoding)((*decoder_embedding)(tgt)));
    Tensor enc_output = src_embedded;
    for (const auto& enc_layer : *encoder_layers) enc_output = (*enc_layer)(enc_output, src_mask);
    Tensor dec_output = tgt_embedded;
    for (const auto& dec_layer : *decoder_layers) dec_output = (*dec_layer)(dec_output, enc_output, src_mask, tgt_mask);
    return (*fc)(dec_output);
  }

  std::shared_ptr<nn::Embedding> encoder_embedding, decoder_embedding;
  std::shared_ptr<PositionalEncoding> positional_encoding;
  std::shared_ptr<nn::ModuleList<EncoderLayer>> encoder_layers;
  std::shared_ptr<nn::ModuleList<DecoderLayer>> decoder_layers;
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Dropout> dropout;
};

}  // namespace seed
