// Seed 000, "Transformer from scratch", in Kiln: the notebook's padding and subsequence
// masks (printed as it prints them), its ScaledDotProductAttention, MultiHeadAttention
// and PositionwiseFeedForward, line for line, and the toy German→English translator built
// from them and trained on the notebook's two sentences through a DataLoader(batch 2,
// shuffle). The notebook leaves the encoder, decoder and training cells empty; they are
// written here in the same from-scratch style.
//
//   seed000_from_scratch [--epochs N] [--seed S]
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "../common/cli.h"

using namespace kiln;

// ---------------------------------------------------------------- masks

// True where seq_k is padding (0): [batch_size, len_q, len_k].
Tensor get_attn_pad_mask(const Tensor& seq_q, const Tensor& seq_k) {
  int64_t batch_size = seq_q.size(0), len_q = seq_q.size(1);
  int64_t len_k = seq_k.size(1);
  Tensor pad_attn_mask = seq_k.eq(0).unsqueeze(1);  // [batch_size, 1, len_k]
  return pad_attn_mask.expand({batch_size, len_q, len_k});
}

// 1 above the diagonal (future positions): [batch_size, tgt_len, tgt_len]. The notebook
// makes it with np.triu(np.ones(attn_shape), k=1) and keeps it as uint8; Kiln's
// integer dtype is int64.
Tensor get_attn_subsequence_mask(const Tensor& seq) {
  Shape attn_shape = {seq.size(0), seq.size(1), seq.size(1)};
  Tensor subsequence_mask = triu(ones(attn_shape), 1);
  return subsequence_mask.to(kInt64);
}

// ---------------------------------------------------------------- attention

struct ScaledDotProductAttention : nn::Cloneable<ScaledDotProductAttention> {
  // Q [batch_size, n_heads, len_q, d_k], K [.., len_k, d_k], V [.., len_k, d_v],
  // attn_mask [batch_size, n_heads, len_q, len_k] -> context [batch_size, n_heads, len_q, d_v]
  Tensor forward(const Tensor& Q, const Tensor& K, const Tensor& V, const Tensor& attn_mask) {
    int64_t d_k = Q.size(3);
    Tensor scores = matmul(Q, K.transpose(-1, -2)) / std::sqrt(static_cast<double>(d_k));
    scores.masked_fill_(attn_mask, -1e9);  // recorded in the graph, as in PyTorch
    Tensor attn = nn::Softmax(-1)(scores);
    Tensor context = matmul(attn, V);
    return context;
  }
};

struct MultiHeadAttention : nn::Cloneable<MultiHeadAttention> {
  MultiHeadAttention(int64_t d_model, int64_t n_heads, double dropout_rate)
      : d_model(d_model), n_heads(n_heads), dropout_rate(dropout_rate), head_dim(d_model / n_heads) {
    W_Q = register_module("W_Q", std::make_shared<nn::Linear>(d_model, d_model));
    W_K = register_module("W_K", std::make_shared<nn::Linear>(d_model, d_model));
    W_V = register_module("W_V", std::make_shared<nn::Linear>(d_model, d_model));
    scaled_dot_product_attention =
        register_module("scaled_dot_product_attention", std::make_shared<ScaledDotProductAttention>());
    W_O = register_module("W_O", std::make_shared<nn::Linear>(d_model, d_model));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout_rate));
  }

  // Q [batch_size, len_q, d_model], K, V [batch_size, len_k, d_model],
  // attn_mask [batch_size, len_q, len_k] -> [batch_size, len_q, d_model]
  Tensor forward(Tensor Q, Tensor K, Tensor V, const Tensor& attn_mask) {
    int64_t batch_size = Q.size(0), len_q = Q.size(1);
    int64_t len_k = K.size(1), len_v = V.size(1);
    // 1) linear projection
    Q = (*W_Q)(Q);
    K = (*W_K)(K);
    V = (*W_V)(V);
    // 2) split by heads, 3) heads before positions
    Q = Q.reshape({batch_size, len_q, n_heads, head_dim}).transpose(1, 2);
    K = K.reshape({batch_size, len_k, n_heads, head_dim}).transpose(1, 2);
    V = V.reshape({batch_size, len_v, n_heads, head_dim}).transpose(1, 2);
    // 4) attention; the mask repeated for every head
    Tensor mask = attn_mask.unsqueeze(1).expand({batch_size, n_heads, len_q, len_k});
    Tensor context = scaled_dot_product_attention->forward(Q, K, V, mask);
    // 5) concat heads, 6) output projection
    Tensor output = context.transpose(1, 2).reshape({batch_size, len_q, d_model});
    return (*W_O)(output);
  }

  int64_t d_model, n_heads;
  double dropout_rate;
  int64_t head_dim;
  std::shared_ptr<nn::Linear> W_Q, W_K, W_V, W_O;
  std::shared_ptr<ScaledDotProductAttention> scaled_dot_product_attention;
  std::shared_ptr<nn::Dropout> dropout;
};

struct PositionwiseFeedForward : nn::Cloneable<PositionwiseFeedForward> {
  PositionwiseFeedForward(int64_t d_model, int64_t d_ff, double dropout_rate) : d_model(d_model), d_ff(d_ff) {
    W_1 = register_module("W_1", std::make_shared<nn::Linear>(d_model, d_ff));
    W_2 = register_module("W_2", std::make_shared<nn::Linear>(d_ff, d_model));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout_rate));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor forward(const Tensor& x) {  // [batch_size, seq_len, d_model]
    Tensor output = (*relu)((*W_1)(x));
    output = (*W_2)(output);
    return output;
  }
  int64_t d_model, d_ff;
  std::shared_ptr<nn::Linear> W_1, W_2;
  std::shared_ptr<nn::Dropout> dropout;
  std::shared_ptr<nn::ReLU> relu;
};

// ---------------------------------------------------------------- the cells the notebook leaves empty

// pe[pos, 2i] = sin(pos / 10000^(2i/d_model)), pe[pos, 2i+1] = cos(…), added to x.
struct PositionalEncoding : nn::Cloneable<PositionalEncoding> {
  PositionalEncoding(int64_t d_model, double dropout_rate, int64_t max_len = 64) {
    Tensor pe = zeros({max_len, d_model});
    Tensor position = arange(0, static_cast<double>(max_len), 1, kFloat32).unsqueeze(1);
    Tensor div_term = exp(arange(0, static_cast<double>(d_model), 2, kFloat32) * (-std::log(10000.0) / d_model));
    pe.slice(1, 0, d_model, 2).copy_(sin(position * div_term));  // pe[:, 0::2]
    pe.slice(1, 1, d_model, 2).copy_(cos(position * div_term));  // pe[:, 1::2]
    this->pe = register_buffer("pe", pe.unsqueeze(0));             // [1, max_len, d_model]
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(dropout_rate));
  }
  Tensor forward(const Tensor& x) { return (*dropout)(x + pe.narrow(1, 0, x.size(1))); }
  Tensor pe;
  std::shared_ptr<nn::Dropout> dropout;
};

struct EncoderLayer : nn::Cloneable<EncoderLayer> {
  EncoderLayer(int64_t d_model, int64_t n_heads, int64_t d_ff, double p) {
    enc_self_attn = register_module("enc_self_attn", std::make_shared<MultiHeadAttention>(d_model, n_heads, p));
    pos_ffn = register_module("pos_ffn", std::make_shared<PositionwiseFeedForward>(d_model, d_ff, p));
    norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(d_model));
    norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(d_model));
  }
  Tensor forward(const Tensor& enc_inputs, const Tensor& enc_self_attn_mask) {
    Tensor x = (*norm1)(enc_inputs + enc_self_attn->forward(enc_inputs, enc_inputs, enc_inputs, enc_self_attn_mask));
    return (*norm2)(x + pos_ffn->forward(x));
  }
  std::shared_ptr<MultiHeadAttention> enc_self_attn;
  std::shared_ptr<PositionwiseFeedForward> pos_ffn;
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
};

struct DecoderLayer : nn::Cloneable<DecoderLayer> {
  DecoderLayer(int64_t d_model, int64_t n_heads, int64_t d_ff, double p) {
    dec_self_attn = register_module("dec_self_attn", std::make_shared<MultiHeadAttention>(d_model, n_heads, p));
    dec_enc_attn = register_module("dec_enc_attn", std::make_shared<MultiHeadAttention>(d_model, n_heads, p));
    pos_ffn = register_module("pos_ffn", std::make_shared<PositionwiseFeedForward>(d_model, d_ff, p));
    norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(d_model));
    norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(d_model));
    norm3 = register_module("norm3", std::make_shared<nn::LayerNorm>(d_model));
  }
  Tensor forward(const Tensor& dec_inputs, const Tensor& enc_outputs, const Tensor& dec_self_attn_mask,
                 const Tensor& dec_enc_attn_mask) {
    Tensor x = (*norm1)(dec_inputs + dec_self_attn->forward(dec_inputs, dec_inputs, dec_inputs, dec_self_attn_mask));
    x = (*norm2)(x + dec_enc_attn->forward(x, enc_outputs, enc_outputs, dec_enc_attn_mask));
    return (*norm3)(x + pos_ffn->forward(x));
  }
  std::shared_ptr<MultiHeadAttention> dec_self_attn, dec_enc_attn;
  std::shared_ptr<PositionwiseFeedForward> pos_ffn;
  std::shared_ptr<nn::LayerNorm> norm1, norm2, norm3;
};

struct Transformer : nn::Cloneable<Transformer> {
  Transformer(int64_t src_vocab_size, int64_t tgt_vocab_size, int64_t d_model, int64_t n_heads, int64_t d_ff,
              int64_t n_layers, double p) {
    src_emb = register_module("src_emb", std::make_shared<nn::Embedding>(src_vocab_size, d_model));
    tgt_emb = register_module("tgt_emb", std::make_shared<nn::Embedding>(tgt_vocab_size, d_model));
    pos_emb = register_module("pos_emb", std::make_shared<PositionalEncoding>(d_model, p));
    encoder = register_module("encoder", std::make_shared<nn::ModuleList<EncoderLayer>>());
    decoder = register_module("decoder", std::make_shared<nn::ModuleList<DecoderLayer>>());
    for (int64_t i = 0; i < n_layers; ++i) {
      encoder->push_back(std::make_shared<EncoderLayer>(d_model, n_heads, d_ff, p));
      decoder->push_back(std::make_shared<DecoderLayer>(d_model, n_heads, d_ff, p));
    }
    projection = register_module("projection", std::make_shared<nn::Linear>(d_model, tgt_vocab_size, false));
  }

  // enc_inputs [batch_size, src_len], dec_inputs [batch_size, tgt_len] -> logits [batch_size * tgt_len, tgt_vocab_size]
  Tensor forward(const Tensor& enc_inputs, const Tensor& dec_inputs) {
    Tensor enc_outputs = pos_emb->forward((*src_emb)(enc_inputs));
    Tensor enc_self_attn_mask = get_attn_pad_mask(enc_inputs, enc_inputs);
    for (const auto& layer : *encoder) enc_outputs = layer->forward(enc_outputs, enc_self_attn_mask);

    Tensor dec_outputs = pos_emb->forward((*tgt_emb)(dec_inputs));
    Tensor dec_self_attn_pad_mask = get_attn_pad_mask(dec_inputs, dec_inputs);
    Tensor dec_self_attn_subsequence_mask = get_attn_subsequence_mask(dec_inputs);
    Tensor dec_self_attn_mask = (dec_self_attn_pad_mask.to(kInt64) + dec_self_attn_subsequence_mask) > 0;
    Tensor dec_enc_attn_mask = get_attn_pad_mask(dec_inputs, enc_inputs);
    for (const auto& layer : *decoder)
      dec_outputs = layer->forward(dec_outputs, enc_outputs, dec_self_attn_mask, dec_enc_attn_mask);
    Tensor dec_logits = (*projection)(dec_outputs);
    return dec_logits.view({-1, dec_logits.size(-1)});
  }

  std::shared_ptr<nn::Embedding> src_emb, tgt_emb;
  std::shared_ptr<PositionalEncoding> pos_emb;
  std::shared_ptr<nn::ModuleList<EncoderLayer>> encoder;
  std::shared_ptr<nn::ModuleList<DecoderLayer>> decoder;
  std::shared_ptr<nn::Linear> projection;
};

// ---------------------------------------------------------------- data, as the notebook's

const std::vector<std::vector<std::string>> sentence = {
    // enc_input               dec_input             dec_output
    {"ich mochte ein bier P", "S i want a beer .", "i want a beer . E"},
    {"ich mochte ein cola P", "S i want a coke .", "i want a coke . E"},
};
const std::map<std::string, int64_t> src_vocab = {{"P", 0}, {"ich", 1}, {"mochte", 2}, {"ein", 3}, {"bier", 4}, {"cola", 5}};
const std::map<std::string, int64_t> tgt_vocab = {{"P", 0}, {"i", 1},    {"want", 2}, {"a", 3}, {"beer", 4},
                                                  {"coke", 5}, {"S", 6}, {"E", 7},    {".", 8}};

std::vector<int64_t> tokens(const std::string& s, const std::map<std::string, int64_t>& vocab) {
  std::istringstream words(s);
  std::vector<int64_t> ids;
  for (std::string w; words >> w;) ids.push_back(vocab.at(w));
  return ids;
}

// enc_inputs [2, 5], dec_inputs [2, 6], dec_outputs [2, 6]
std::vector<Tensor> make_data(const std::vector<std::vector<std::string>>& sentence) {
  std::vector<int64_t> enc, dec_in, dec_out;
  for (const auto& s : sentence) {
    for (int64_t id : tokens(s[0], src_vocab)) enc.push_back(id);
    for (int64_t id : tokens(s[1], tgt_vocab)) dec_in.push_back(id);
    for (int64_t id : tokens(s[2], tgt_vocab)) dec_out.push_back(id);
  }
  int64_t n = static_cast<int64_t>(sentence.size());
  return {from_vector<int64_t>(enc, {n, static_cast<int64_t>(enc.size()) / n}),
          from_vector<int64_t>(dec_in, {n, static_cast<int64_t>(dec_in.size()) / n}),
          from_vector<int64_t>(dec_out, {n, static_cast<int64_t>(dec_out.size()) / n})};
}

// Greedy decoding: start from "S", append the most likely next word until "E".
std::string translate(Transformer& model, const Tensor& enc_input) {
  NoGradGuard no_grad;
  std::map<int64_t, std::string> idx2word;
  for (const auto& [w, i] : tgt_vocab) idx2word[i] = w;
  std::vector<int64_t> dec = {tgt_vocab.at("S")};
  std::string out;
  for (int step = 0; step < 10; ++step) {
    Tensor dec_input = from_vector<int64_t>(dec, {1, static_cast<int64_t>(dec.size())});
    Tensor logits = model.forward(enc_input.unsqueeze(0), dec_input);
    int64_t next = static_cast<int64_t>(argmax(logits.select(0, logits.size(0) - 1)).item());
    if (next == tgt_vocab.at("E")) break;
    out += (out.empty() ? "" : " ") + idx2word[next];
    dec.push_back(next);
  }
  return out;
}

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "seed000_from_scratch [--epochs N] [--seed S]");
  int64_t epochs = cli.integer("--epochs", 60, 1, 100000);
  uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  cli.finish();
  manual_seed(seed);

  // The notebook's mask cells, printed as it prints them.
  Tensor seq_q = tensor({{1, 2, 3, 0, 0}, {3, 4, 5, 6, 0}, {2, 3, 0, 0, 0}});
  Tensor seq_k = tensor({{1, 2, 3, 4, 5}, {1, 2, 0, 0, 0}, {1, 2, 3, 0, 0}});
  std::cout << get_attn_pad_mask(seq_q, seq_k) << "\n";
  Tensor seq = tensor({{1, 2, 3, 0, 0}, {1, 2, 3, 4, 0}});
  std::cout << get_attn_subsequence_mask(seq) << "\n";

  std::vector<Tensor> data = make_data(sentence);
  Tensor enc_inputs = data[0], dec_inputs = data[1], dec_outputs = data[2];
  std::cout << " enc_inputs: \n" << enc_inputs << "\n";
  std::cout << " dec_inputs: \n" << dec_inputs << "\n";
  std::cout << " dec_outputs: \n" << dec_outputs << "\n";

  data::DataLoader loader(std::make_shared<data::TensorDataset>(data), /*batch_size=*/2, /*shuffle=*/true);

  Transformer model(src_vocab.size(), tgt_vocab.size(), /*d_model=*/32, /*n_heads=*/4, /*d_ff=*/64,
                    /*n_layers=*/2, /*dropout=*/0.0);
  nn::CrossEntropyLoss criterion(/*ignore_index=*/0);
  optim::AdamOptions o;
  o.lr = 1e-3;
  optim::Adam optimizer(model.parameters(), o);
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    for (const std::vector<Tensor>& batch : loader) {
      Tensor outputs = model.forward(batch[0], batch[1]);
      Tensor loss = criterion(outputs, batch[2].view({-1}));
      if (epoch % 10 == 0 || epoch == 1) std::printf("Epoch: %04lld loss = %.6f\n", (long long)epoch, loss.item());
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
  }

  model.eval();
  int correct = 0;
  for (int64_t i = 0; i < enc_inputs.size(0); ++i) {
    std::string got = translate(model, enc_inputs.select(0, i));
    std::string want = sentence[static_cast<size_t>(i)][1].substr(2);  // without "S "
    correct += got == want;
    std::cout << sentence[static_cast<size_t>(i)][0] << " -> " << got << "\n";
  }
  std::printf("%d/%lld translated exactly\n", correct, (long long)enc_inputs.size(0));
  return correct == enc_inputs.size(0) ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln_examples::run_main("seed000_from_scratch", [&] { return run(argc, argv); });
}
