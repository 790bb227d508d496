#include "bert/bert.h"

#include <algorithm>
#include <filesystem>

namespace kiln::bert {
namespace {

constexpr const char* kModelOp = "BertModel";

Tensor activate(const Tensor& x, const std::string& act) {
  if (act == "gelu") return gelu(x);
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") return gelu(x, "tanh");
  if (act == "relu") return relu(x);
  return silu(x);  // "silu" / "swish" (BertConfig::validate allows no other)
}

}  // namespace

BertEmbeddings::BertEmbeddings(const BertConfig& c) : nn::Module("BertEmbeddings") {
  word_embeddings = register_module("word_embeddings",
                                    std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size, c.pad_token_id));
  position_embeddings = register_module("position_embeddings",
                                        std::make_shared<nn::Embedding>(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings =
      register_module("token_type_embeddings", std::make_shared<nn::Embedding>(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob));
}

Tensor BertEmbeddings::forward(const Tensor& input_ids, const Tensor& token_type_ids) {
  const int64_t T = input_ids.size(1);
  const Tensor positions = arange(static_cast<double>(T), TensorOptions(kInt64).device(input_ids.device()));
  // transformers' order: (words + token types) + positions.
  Tensor h = add(word_embeddings->forward(input_ids), token_type_embeddings->forward(token_type_ids));
  h = add(h, position_embeddings->forward(positions));
  return dropout->forward(LayerNorm->forward(h));
}

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : nn::Module("BertSelfAttention"), num_heads(c.num_attention_heads),
      attention_dropout(c.attention_probs_dropout_prob) {
  query = register_module("query", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size));
  key = register_module("key", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size));
  value = register_module("value", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size));
}

Tensor BertSelfAttention::forward(const Tensor& x, const Tensor& may_attend) {
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), d = H / num_heads;
  const auto heads = [&](const Tensor& t) { return t.view({B, T, num_heads, d}).transpose(1, 2); };
  // Three products, not one over the concatenated weights: the concatenation copied 1.8 MB
  // of weights a layer every call, which cost a one-sentence forward 15% (measured:
  // 7.5 -> 6.4 ms), and the batch-32 forward gained nothing from the one pass over x.
  const Tensor q = heads(query->forward(x)), k = heads(key->forward(x)), v = heads(value->forward(x));  // (B, heads, T, d)
  const double p = training_effective() ? attention_dropout : 0.0;
  const Tensor ctx = scaled_dot_product_attention(q, k, v, may_attend, p);  // (B, heads, T, d)
  return ctx.transpose(1, 2).reshape({B, T, H});
}

BertResidualOutput::BertResidualOutput(const char* type_name, int64_t in_features, const BertConfig& c)
    : nn::Module(type_name) {
  dense = register_module("dense", std::make_shared<nn::Linear>(in_features, c.hidden_size));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(c.hidden_size, c.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob));
}

Tensor BertResidualOutput::forward(const Tensor& h, const Tensor& residual) {
  return LayerNorm->forward_add(dropout->forward(dense->forward(h)), residual);
}

BertAttention::BertAttention(const BertConfig& c) : nn::Module("BertAttention") {
  self = register_module("self", std::make_shared<BertSelfAttention>(c));
  output = register_module("output", std::make_shared<BertResidualOutput>("BertSelfOutput", c.hidden_size, c));
}

Tensor BertAttention::forward(const Tensor& x, const Tensor& may_attend) {
  return output->forward(self->forward(x, may_attend), x);
}

BertIntermediate::BertIntermediate(const BertConfig& c) : nn::Module("BertIntermediate"), activation(c.hidden_act) {
  dense = register_module("dense", std::make_shared<nn::Linear>(c.hidden_size, c.intermediate_size));
}

Tensor BertIntermediate::forward(const Tensor& x) { return activate(dense->forward(x), activation); }

BertLayer::BertLayer(const BertConfig& c) : nn::Module("BertLayer") {
  attention = register_module("attention", std::make_shared<BertAttention>(c));
  intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(c));
  output = register_module("output", std::make_shared<BertResidualOutput>("BertOutput", c.intermediate_size, c));
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& may_attend) {
  const Tensor a = attention->forward(x, may_attend);
  return output->forward(intermediate->forward(a), a);
}

BertEncoder::BertEncoder(const BertConfig& c) : nn::Module("BertEncoder") {
  layer = register_module("layer", std::make_shared<nn::ModuleList<BertLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer->push_back(std::make_shared<BertLayer>(c));
}

Tensor BertEncoder::forward(const Tensor& x, const Tensor& may_attend) {
  Tensor h = x;
  for (const auto& l : *layer) h = l->forward(h, may_attend);
  return h;
}

BertPooler::BertPooler(const BertConfig& c) : nn::Module("BertPooler") {
  dense = register_module("dense", std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size));
}

Tensor BertPooler::forward(const Tensor& hidden) { return tanh(dense->forward(select(hidden, 1, 0))); }

BertModel::BertModel(const BertConfig& c, bool add_pooling_layer) : nn::Module("BertModel"), config(c) {
  config.validate();
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(c));
  encoder = register_module("encoder", std::make_shared<BertEncoder>(c));
  if (add_pooling_layer) pooler = register_module("pooler", std::make_shared<BertPooler>(c));
}

BertOutput BertModel::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  KILN_CHECK(input_ids.defined() && input_ids.dim() == 2 && input_ids.dtype() == kInt64, kModelOp,
             "input_ids must be (batch, tokens) int64, got ",
             input_ids.defined() ? shape_str(input_ids.shape()) + " " + dtype_name(input_ids.dtype()) : "undefined");
  const int64_t T = input_ids.size(1);
  KILN_CHECK(T <= config.max_position_embeddings, kModelOp, "input_ids has ", T,
             " tokens, more than max_position_embeddings ", config.max_position_embeddings);
  const auto check_like_ids = [&](const Tensor& t, const char* name) {
    KILN_CHECK(t.shape() == input_ids.shape(), kModelOp, name, " must have input_ids' shape ", shape_str(input_ids.shape()),
               ", got ", shape_str(t.shape()));
  };
  Tensor types = token_type_ids;
  if (types.defined()) {
    check_like_ids(types, "token_type_ids");
    KILN_CHECK(types.dtype() == kInt64, kModelOp, "token_type_ids must be int64, got ", dtype_name(types.dtype()));
  } else {
    types = zeros(input_ids.shape(), TensorOptions(kInt64).device(input_ids.device()));
  }
  Tensor may_attend;  // (B, 1, 1, T): which keys each query may attend to; none: all
  if (attention_mask.defined()) {
    check_like_ids(attention_mask, "attention_mask");
    const Tensor keep = ne(attention_mask, 0.0);
    if (!all(keep).item()) may_attend = keep.unsqueeze(1).unsqueeze(1);  // a batch without padding needs no mask
  }
  const Tensor hidden = encoder->forward(embeddings->forward(input_ids, types), may_attend);
  return {hidden, pooler ? pooler->forward(hidden) : Tensor()};
}

void BertModel::load_hf_state_dict(io::TensorMap state) {
  const bool prefixed = !state.empty() && std::all_of(state.begin(), state.end(), [](const auto& kv) {
    return kv.first.rfind("bert.", 0) == 0;
  });
  if (prefixed) {
    io::TensorMap bare;
    for (auto& [name, t] : state) bare.emplace(name.substr(5), std::move(t));
    state = std::move(bare);
  }
  if (auto it = state.find("embeddings.position_ids"); it != state.end()) {
    // A buffer transformers no longer saves or reads: 0, 1, 2, ... or the file is odd.
    const Tensor& p = it->second;
    KILN_CHECK(p.dtype() == kInt64 && p.numel() == config.max_position_embeddings &&
                   equal(p.reshape({-1}), arange(static_cast<double>(p.numel()))),
               kModelOp, "embeddings.position_ids is not 0, 1, ..., ", config.max_position_embeddings - 1, " (shape ",
               shape_str(p.shape()), ")");
    state.erase(it);
  }
  if (!pooler) {
    for (auto it = state.begin(); it != state.end();) it = it->first.rfind("pooler.", 0) == 0 ? state.erase(it) : std::next(it);
  }
  load_state_dict(state, /*strict=*/true);
}

std::shared_ptr<BertModel> BertModel::from_pretrained(const std::string& directory, bool add_pooling_layer) {
  const std::filesystem::path dir(directory);
  KILN_CHECK(std::filesystem::is_directory(dir), kModelOp, "'", directory, "' is not a folder (expected config.json and "
             "model.safetensors in it)");
  const BertConfig config = BertConfig::from_file((dir / "config.json").string());
  // The strict load below sets every parameter.
  const auto model = nn::skip_init<BertModel>(config, add_pooling_layer);
  model->load_hf_state_dict(io::load_safetensors((dir / "model.safetensors").string()).tensors);
  return model;
}

}  // namespace kiln::bert
