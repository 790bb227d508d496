// Seed 003, "Transformer101", in Kiln: attention heads as separate modules concatenated,
// a GELU feed-forward block in nn::Sequential, sinusoidal and learned positional
// encodings, and pre-norm encoder layers stacked into an encoder, each called as the
// notebook calls it and printing the sizes it prints.
//
//   seed003_transformer101 [--scale K] [--seed S]   (K divides the embedding and feed-forward sizes; 1 = the notebook's)
#include <cmath>
#include <iostream>
#include <stdexcept>

#include <kiln/kiln.h>

#include "../common/cli.h"

using namespace kiln;

// One attention head: n_embd -> head_dim queries, keys and values.
struct AttentionHead : nn::Cloneable<AttentionHead> {
  AttentionHead(int64_t n_embd, int64_t n_headd) {
    q = register_module("q", std::make_shared<nn::Linear>(n_embd, n_headd));
    k = register_module("k", std::make_shared<nn::Linear>(n_embd, n_headd));
    v = register_module("v", std::make_shared<nn::Linear>(n_embd, n_headd));
  }

  Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {}) {
    Tensor dim_k = tensor(static_cast<double>(k.size(-1)), kFloat32);
    Tensor attn_scores = bmm(q, k.transpose(1, 2)) / sqrt(dim_k);
    if (mask.defined()) attn_scores = attn_scores.masked_fill(mask == 0, -INFINITY);
    Tensor attn_weights = softmax(attn_scores, -1);
    return bmm(attn_weights, v);
  }

  Tensor forward(const Tensor& hidden_state) {
    return scaled_dot_product_attention((*q)(hidden_state), (*k)(hidden_state), (*v)(hidden_state));
  }

  std::shared_ptr<nn::Linear> q, k, v;
};

struct MultiHeadAttention : nn::Cloneable<MultiHeadAttention> {
  MultiHeadAttention(int64_t n_embd, int64_t n_head) {
    if (n_embd < 0 || n_head < 0) throw std::invalid_argument("Embedding dimension and number of heads must be greater than 0");
    KILN_CHECK(n_embd % n_head == 0, "MultiHeadAttention", "n_embd must be divisible by n_head");
    int64_t head_dim = n_embd / n_head;
    heads = register_module("heads", std::make_shared<nn::ModuleList<AttentionHead>>());
    for (int64_t i = 0; i < n_head; ++i) heads->push_back(std::make_shared<AttentionHead>(n_embd, head_dim));
    output_linear = register_module("output_linear", std::make_shared<nn::Linear>(n_embd, n_embd));
  }

  Tensor forward(const Tensor& hidden_state) {
    std::vector<Tensor> head_outputs;
    for (const auto& head : *heads) head_outputs.push_back((*head)(hidden_state));
    Tensor attn_outputs = cat(head_outputs, -1);
    return (*output_linear)(attn_outputs);
  }

  std::shared_ptr<nn::ModuleList<AttentionHead>> heads;
  std::shared_ptr<nn::Linear> output_linear;
};

struct PositionWiseFeedForward : nn::Cloneable<PositionWiseFeedForward> {
  PositionWiseFeedForward(int64_t n_embd, int64_t ff_dim) {
    ff = register_module("ff", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(n_embd, ff_dim),
                                                                std::make_shared<nn::GELU>(),
                                                                std::make_shared<nn::Linear>(ff_dim, n_embd),
                                                                std::make_shared<nn::Dropout>(0.1)));
  }
  Tensor forward(const Tensor& hidden_state) { return (*ff)(hidden_state); }
  std::shared_ptr<nn::Sequential> ff;
};

struct SinusoidalPositionalEncoding : nn::Cloneable<SinusoidalPositionalEncoding> {
  explicit SinusoidalPositionalEncoding(int64_t n_embd) : n_embd(n_embd) {}

  Tensor forward(int64_t max_seq_len) {
    Tensor pos = arange(static_cast<double>(max_seq_len)).unsqueeze(1);
    Tensor div_term = exp(arange(0, static_cast<double>(n_embd), 2) * -(log(tensor(10000.0)) / n_embd));
    Tensor pe = zeros({max_seq_len, n_embd});
    pe.slice(1, 0, n_embd, 2).copy_(sin(pos * div_term));  // pe[:, 0::2] = torch.sin(pos * div_term)
    pe.slice(1, 1, n_embd, 2).copy_(cos(pos * div_term));  // pe[:, 1::2] = torch.cos(pos * div_term)
    return pe;
  }
  int64_t n_embd;
};

struct LearnedPositionalEncoding : nn::Cloneable<LearnedPositionalEncoding> {
  LearnedPositionalEncoding(int64_t max_seq_len, int64_t n_embd) {
    position_embeddings = register_module("position_embeddings", std::make_shared<nn::Embedding>(max_seq_len, n_embd));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(0.1));
  }
  Tensor forward(const Tensor& hidden_state) {
    Tensor embeddings = hidden_state + (*position_embeddings)(arange(static_cast<double>(hidden_state.size(1)),
                                                                     TensorOptions(kInt64).device(hidden_state.device())));
    return (*dropout)(embeddings);
  }
  std::shared_ptr<nn::Embedding> position_embeddings;
  std::shared_ptr<nn::Dropout> dropout;
};

// Pre-norm: x + attn(norm(x)), then x + ffn(norm(x)).
struct EncoderLayer : nn::Cloneable<EncoderLayer> {
  EncoderLayer(int64_t n_embd, int64_t n_head, int64_t ff_dim) {
    layer_norm_1 = register_module("layer_norm_1", std::make_shared<nn::LayerNorm>(n_embd));
    multihead_attn = register_module("multihead_attn", std::make_shared<MultiHeadAttention>(n_embd, n_head));
    layer_norm_2 = register_module("layer_norm_2", std::make_shared<nn::LayerNorm>(n_embd));
    feed_forward = register_module("feed_forward", std::make_shared<PositionWiseFeedForward>(n_embd, ff_dim));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(0.1));
  }
  Tensor forward(Tensor hidden_state) {
    Tensor attn_outputs = (*multihead_attn)((*layer_norm_1)(hidden_state));
    hidden_state = hidden_state + (*dropout)(attn_outputs);
    Tensor output = hidden_state + (*dropout)((*feed_forward)((*layer_norm_2)(hidden_state)));
    return output;
  }
  std::shared_ptr<nn::LayerNorm> layer_norm_1, layer_norm_2;
  std::shared_ptr<MultiHeadAttention> multihead_attn;
  std::shared_ptr<PositionWiseFeedForward> feed_forward;
  std::shared_ptr<nn::Dropout> dropout;
};

struct Encoder : nn::Cloneable<Encoder> {
  Encoder(int64_t n_embd, int64_t n_head, int64_t ff_dim, int64_t n_layer = 6) {
    positional_encoding = register_module("positional_encoding", std::make_shared<LearnedPositionalEncoding>(100, n_embd));
    layers = register_module("layers", std::make_shared<nn::ModuleList<EncoderLayer>>());
    for (int64_t i = 0; i < n_layer; ++i) layers->push_back(std::make_shared<EncoderLayer>(n_embd, n_head, ff_dim));
  }
  Tensor forward(Tensor hidden_state) {
    hidden_state = (*positional_encoding)(hidden_state);
    for (const auto& layer : *layers) hidden_state = (*layer)(hidden_state);
    return hidden_state;
  }
  std::shared_ptr<LearnedPositionalEncoding> positional_encoding;
  std::shared_ptr<nn::ModuleList<EncoderLayer>> layers;
};

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "seed003_transformer101 [--scale K] [--seed S]");
  const int64_t scale = cli.integer("--scale", 1, 1, 64);
  const uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  cli.finish();
  if ((768 / scale) % 12 != 0 || 768 % scale != 0)
    cli.fail("--scale must divide 64 (12 heads share 768 / scale features), got " + std::to_string(scale));
  manual_seed(seed);
  const int64_t n_embd = 768 / scale, ff_dim = 3072 / scale;

  MultiHeadAttention multihead_attn(n_embd, 12);
  Tensor attn_outputs = multihead_attn(rand({1, 10, n_embd}));
  std::cout << attn_outputs.sizes() << "\n";  // torch.Size([1, 10, 768])

  PositionWiseFeedForward feed_forward(n_embd, ff_dim);
  Tensor feed_forward_outputs = feed_forward(rand({1, 10, n_embd}));
  std::cout << feed_forward_outputs.sizes() << "\n";

  SinusoidalPositionalEncoding pos_encoder(n_embd);
  Tensor pos_encoding = pos_encoder(100);
  std::cout << pos_encoding.sizes() << "\n";  // [max_seq_len, n_embd]

  LearnedPositionalEncoding encoding_layer(10, n_embd);
  Tensor encoding_outputs = encoding_layer(rand({1, 10, n_embd}));
  std::cout << encoding_outputs.sizes() << "\n";

  EncoderLayer encoder_layer(n_embd, 12, ff_dim);
  std::cout << encoder_layer(rand({1, 10, n_embd})).sizes() << "\n";

  Encoder encoder(n_embd, 12, ff_dim, 6);
  Tensor out = encoder(rand({1, 10, n_embd}));
  std::cout << out.sizes() << "\n";  // torch.Size([1, 10, 768])
  std::cout << encoder << "\n";
  return out.sizes() == Shape{1, 10, n_embd} ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln_examples::run_main("seed003_transformer101", [&] { return run(argc, argv); });
}
