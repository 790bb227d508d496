#include "bert/config.h"

#include <fstream>
#include <sstream>

#include <kiln/kiln.h>

namespace kiln::bert {
namespace {

constexpr const char* kConfigOp = "BertConfig";
using io::JsonValue;
using Kind = JsonValue::Kind;

void read_int(const JsonValue& root, const std::string& name, const char* key, int64_t& out) {
  const JsonValue* v = root.find(key);
  if (!v) return;
  KILN_CHECK(v->kind == Kind::Number && v->is_integer, kConfigOp, name, ": ", key, " must be an integer");
  out = v->integer;
}

void read_real(const JsonValue& root, const std::string& name, const char* key, double& out) {
  const JsonValue* v = root.find(key);
  if (!v) return;
  KILN_CHECK(v->kind == Kind::Number, kConfigOp, name, ": ", key, " must be a number");
  out = v->number;
}

std::string read_string(const JsonValue& root, const std::string& name, const char* key, const std::string& fallback) {
  const JsonValue* v = root.find(key);
  if (!v) return fallback;
  KILN_CHECK(v->kind == Kind::String, kConfigOp, name, ": ", key, " must be a string");
  return v->string;
}

}  // namespace

BertConfig BertConfig::from_json(const std::string& json, const std::string& name) {
  const JsonValue root = io::parse_json(json, kConfigOp, name + ": ");
  KILN_CHECK(root.kind == Kind::Object, kConfigOp, name, ": expected a JSON object");
  const std::string type = read_string(root, name, "model_type", "bert");
  KILN_CHECK(type == "bert", kConfigOp, name, ": model_type \"", type, "\" is not a BERT model (\"bert\")");
  const std::string positions = read_string(root, name, "position_embedding_type", "absolute");
  KILN_CHECK(positions == "absolute", kConfigOp, name, ": position_embedding_type \"", positions,
             "\" is not supported (Kiln's BERT has absolute positions)");
  BertConfig c;
  read_int(root, name, "vocab_size", c.vocab_size);
  read_int(root, name, "hidden_size", c.hidden_size);
  read_int(root, name, "num_hidden_layers", c.num_hidden_layers);
  read_int(root, name, "num_attention_heads", c.num_attention_heads);
  read_int(root, name, "intermediate_size", c.intermediate_size);
  c.hidden_act = read_string(root, name, "hidden_act", c.hidden_act);
  read_real(root, name, "hidden_dropout_prob", c.hidden_dropout_prob);
  read_real(root, name, "attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  read_int(root, name, "max_position_embeddings", c.max_position_embeddings);
  read_int(root, name, "type_vocab_size", c.type_vocab_size);
  read_real(root, name, "layer_norm_eps", c.layer_norm_eps);
  if (const JsonValue* v = root.find("pad_token_id"); v && v->kind != Kind::Null) read_int(root, name, "pad_token_id", c.pad_token_id);
  c.validate(name + ": ");
  return c;
}

BertConfig BertConfig::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), kConfigOp, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path);
}

void BertConfig::validate(const std::string& where) const {
  const auto positive = [&](const char* key, int64_t v, int64_t hi) {
    KILN_CHECK(v >= 1 && v <= hi, kConfigOp, where, key, " must be in [1, ", hi, "], got ", v);
  };
  positive("vocab_size", vocab_size, int64_t{1} << 31);
  positive("hidden_size", hidden_size, 1 << 16);
  positive("num_hidden_layers", num_hidden_layers, 1024);
  positive("num_attention_heads", num_attention_heads, hidden_size);
  positive("intermediate_size", intermediate_size, 1 << 20);
  positive("max_position_embeddings", max_position_embeddings, 1 << 20);
  positive("type_vocab_size", type_vocab_size, 1 << 16);
  KILN_CHECK(hidden_size % num_attention_heads == 0, kConfigOp, where, "hidden_size ", hidden_size,
             " is not a multiple of num_attention_heads ", num_attention_heads);
  KILN_CHECK(hidden_act == "gelu" || hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" ||
                 hidden_act == "relu" || hidden_act == "silu" || hidden_act == "swish",
             kConfigOp, where, "hidden_act \"", hidden_act, "\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)");
  KILN_CHECK(hidden_dropout_prob >= 0 && hidden_dropout_prob < 1, kConfigOp, where, "hidden_dropout_prob must be in [0, 1), got ",
             hidden_dropout_prob);
  KILN_CHECK(attention_probs_dropout_prob >= 0 && attention_probs_dropout_prob < 1, kConfigOp, where,
             "attention_probs_dropout_prob must be in [0, 1), got ", attention_probs_dropout_prob);
  KILN_CHECK(layer_norm_eps > 0, kConfigOp, where, "layer_norm_eps must be positive, got ", layer_norm_eps);
  KILN_CHECK(pad_token_id >= 0 && pad_token_id < vocab_size, kConfigOp, where, "pad_token_id ", pad_token_id,
             " is outside the vocabulary of ", vocab_size);
}

}  // namespace kiln::bert
