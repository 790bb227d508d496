#include "llama/config.h"

#include <fstream>
#include <sstream>

#include <kiln/kiln.h>

namespace kiln::llama {
namespace {

constexpr const char* kConfigOp = "LlamaConfig";
using io::JsonValue;
using Kind = JsonValue::Kind;

void read_int(const JsonValue& root, const std::string& name, const char* key, int64_t& out) {
  const JsonValue* v = root.find(key);
  if (!v || v->kind == Kind::Null) return;
  KILN_CHECK(v->kind == Kind::Number && v->is_integer, kConfigOp, name, ": ", key, " must be an integer");
  out = v->integer;
}

void read_real(const JsonValue& root, const std::string& name, const char* key, double& out) {
  const JsonValue* v = root.find(key);
  if (!v || v->kind == Kind::Null) return;
  KILN_CHECK(v->kind == Kind::Number, kConfigOp, name, ": ", key, " must be a number");
  out = v->number;
}

void read_bool(const JsonValue& root, const std::string& name, const char* key, bool& out) {
  const JsonValue* v = root.find(key);
  if (!v || v->kind == Kind::Null) return;
  KILN_CHECK(v->kind == Kind::Bool, kConfigOp, name, ": ", key, " must be true or false");
  out = v->boolean;
}

std::string read_string(const JsonValue& root, const std::string& name, const char* key, const std::string& fallback) {
  const JsonValue* v = root.find(key);
  if (!v || v->kind == Kind::Null) return fallback;
  KILN_CHECK(v->kind == Kind::String, kConfigOp, name, ": ", key, " must be a string");
  return v->string;
}

// An integer key of the GGUF's architecture, or `fallback` when the file lacks it.
int64_t gguf_int(const io::GGUFFile& f, const std::string& key, int64_t fallback) {
  const io::GGUFValue* v = f.find(key);
  return v ? v->as_int(key) : fallback;
}
double gguf_real(const io::GGUFFile& f, const std::string& key, double fallback) {
  const io::GGUFValue* v = f.find(key);
  return v ? v->as_float(key) : fallback;
}

}  // namespace

LlamaConfig LlamaConfig::from_json(const std::string& json, const std::string& name) {
  const JsonValue root = io::parse_json(json, kConfigOp, name + ": ");
  KILN_CHECK(root.kind == Kind::Object, kConfigOp, name, ": expected a JSON object");
  const std::string type = read_string(root, name, "model_type", "llama");
  KILN_CHECK(type == "llama", kConfigOp, name, ": model_type \"", type, "\" is not a Llama model (\"llama\")");
  const std::string act = read_string(root, name, "hidden_act", "silu");
  KILN_CHECK(act == "silu", kConfigOp, name, ": hidden_act \"", act, "\" is not supported (silu)");
  const JsonValue* scaling = root.find("rope_scaling");
  KILN_CHECK(!scaling || scaling->kind == Kind::Null, kConfigOp, name, ": rope_scaling is not supported");
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool on = false;
    read_bool(root, name, key, on);
    KILN_CHECK(!on, kConfigOp, name, ": ", key, " true is not supported");
  }
  LlamaConfig c;
  c.num_key_value_heads = 0;  // unset: as many as the query heads
  read_int(root, name, "vocab_size", c.vocab_size);
  read_int(root, name, "hidden_size", c.hidden_size);
  read_int(root, name, "intermediate_size", c.intermediate_size);
  read_int(root, name, "num_hidden_layers", c.num_hidden_layers);
  read_int(root, name, "num_attention_heads", c.num_attention_heads);
  read_int(root, name, "num_key_value_heads", c.num_key_value_heads);
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  read_int(root, name, "head_dim", c.head_dim);
  read_int(root, name, "max_position_embeddings", c.max_position_embeddings);
  read_real(root, name, "rms_norm_eps", c.rms_norm_eps);
  read_real(root, name, "rope_theta", c.rope_theta);
  // Newer transformers keep it in rope_parameters, with the kind of rotary embedding.
  if (const JsonValue* rope = root.find("rope_parameters"); rope && rope->kind != Kind::Null) {
    const std::string where = name + ": rope_parameters";
    KILN_CHECK(rope->kind == Kind::Object, kConfigOp, where, " must be an object");
    const std::string type = read_string(*rope, where, "rope_type", "default");
    KILN_CHECK(type == "default", kConfigOp, where, ".rope_type \"", type, "\" is not supported (\"default\")");
    read_real(*rope, where, "rope_theta", c.rope_theta);
  }
  read_bool(root, name, "tie_word_embeddings", c.tie_word_embeddings);
  read_int(root, name, "bos_token_id", c.bos_token_id);
  read_int(root, name, "eos_token_id", c.eos_token_id);
  c.validate(name + ": ");
  return c;
}

LlamaConfig LlamaConfig::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), kConfigOp, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), path);
}

LlamaConfig LlamaConfig::from_gguf(const io::GGUFFile& f) {
  const std::string arch = f.at("general.architecture").as_string("general.architecture");
  KILN_CHECK(arch == "llama", kConfigOp, f.source, ": general.architecture is \"", arch,
             "\", not a Llama model (\"llama\")");
  LlamaConfig c;
  c.hidden_size = f.at("llama.embedding_length").as_int("llama.embedding_length");
  c.intermediate_size = f.at("llama.feed_forward_length").as_int("llama.feed_forward_length");
  c.num_hidden_layers = f.at("llama.block_count").as_int("llama.block_count");
  c.num_attention_heads = f.at("llama.attention.head_count").as_int("llama.attention.head_count");
  c.num_key_value_heads = gguf_int(f, "llama.attention.head_count_kv", c.num_attention_heads);
  c.max_position_embeddings = gguf_int(f, "llama.context_length", c.max_position_embeddings);
  c.rms_norm_eps = gguf_real(f, "llama.attention.layer_norm_rms_epsilon", 1e-5);
  c.rope_theta = gguf_real(f, "llama.rope.freq_base", 10000.0);
  const int64_t head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  c.head_dim = gguf_int(f, "llama.attention.key_length", head_dim);
  const int64_t rope_dims = gguf_int(f, "llama.rope.dimension_count", c.head_dim);
  KILN_CHECK(rope_dims == c.head_dim, kConfigOp, f.source, ": llama.rope.dimension_count ", rope_dims,
             " differs from the head size ", c.head_dim, " (partial rotary embeddings are not supported)");
  const io::GGUFValue* scaling = f.find("llama.rope.scaling.type");
  KILN_CHECK(!scaling || scaling->as_string("llama.rope.scaling.type") == "none", kConfigOp, f.source,
             ": llama.rope.scaling.type is not supported");
  if (const io::GGUFValue* tokens = f.find("tokenizer.ggml.tokens"))
    c.vocab_size = static_cast<int64_t>(tokens->items.size());
  c.vocab_size = gguf_int(f, "llama.vocab_size", c.vocab_size);
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.rope_interleaved = true;
  c.bos_token_id = gguf_int(f, "tokenizer.ggml.bos_token_id", c.bos_token_id);
  c.eos_token_id = gguf_int(f, "tokenizer.ggml.eos_token_id", c.eos_token_id);
  c.validate(f.source + ": ");
  return c;
}

void LlamaConfig::validate(const std::string& where) const {
  const auto in_range = [&](const char* key, int64_t v, int64_t hi) {
    KILN_CHECK(v >= 1 && v <= hi, kConfigOp, where, key, " must be in [1, ", hi, "], got ", v);
  };
  in_range("vocab_size", vocab_size, int64_t{1} << 31);
  in_range("hidden_size", hidden_size, 1 << 17);
  in_range("intermediate_size", intermediate_size, 1 << 20);
  in_range("num_hidden_layers", num_hidden_layers, 1024);
  in_range("num_attention_heads", num_attention_heads, hidden_size);
  in_range("num_key_value_heads", num_key_value_heads, num_attention_heads);
  in_range("max_position_embeddings", max_position_embeddings, 1 << 24);
  KILN_CHECK(num_attention_heads % num_key_value_heads == 0, kConfigOp, where, "num_attention_heads ",
             num_attention_heads, " is not a multiple of num_key_value_heads ", num_key_value_heads);
  const int64_t d = attention_head_dim();
  KILN_CHECK(d >= 2 && d % 2 == 0, kConfigOp, where, "the head size must be even and at least 2, got ", d);
  KILN_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, kConfigOp, where, "hidden_size ", hidden_size,
             " is not a multiple of num_attention_heads ", num_attention_heads);
  KILN_CHECK(rms_norm_eps > 0, kConfigOp, where, "rms_norm_eps must be positive, got ", rms_norm_eps);
  KILN_CHECK(rope_theta > 0, kConfigOp, where, "rope_theta must be positive, got ", rope_theta);
}

}  // namespace kiln::llama
