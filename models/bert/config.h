#pragma once
// A BERT-family configuration as Hugging Face's config.json holds it (BertConfig's names
// and defaults).
//
//   bert::BertConfig c = bert::BertConfig::from_file("all-MiniLM-L6-v2/config.json");
#include <cstdint>
#include <string>

namespace kiln::bert {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  // "gelu" (exact, erf), "gelu_new" / "gelu_pytorch_tanh" (tanh approximation), "relu",
  // "silu" / "swish".
  std::string hidden_act = "gelu";
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  int64_t pad_token_id = 0;

  // Reads config.json; fields it does not use are ignored, a field it uses with the wrong
  // type or an impossible value, a model_type other than "bert" or a
  // position_embedding_type other than "absolute" is an error naming the file and field.
  static BertConfig from_file(const std::string& path);
  static BertConfig from_json(const std::string& json, const std::string& name = "<config.json>");
  // Throws "[BertConfig] <where>…" naming the first size that cannot make a model.
  void validate(const std::string& where = "") const;
};

}  // namespace kiln::bert
