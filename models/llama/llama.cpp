#include "llama/llama.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "llama/f16_attention.h"
#include "llama/ggml_math.h"
#include "llama/gguf_source.h"

namespace kiln::llama {

namespace {

constexpr const char* kModelOp = "LlamaForCausalLM";

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

// (group * T, past + T) bool: query row r is position past + r % T (rows are the group's
// heads' queries one after another) and sees keys up to its own position.
Tensor causal_rows(int64_t group, int64_t T, int64_t past, const Device& device) {
  std::vector<int64_t> row_pos(static_cast<size_t>(group * T));
  for (int64_t r = 0; r < group * T; ++r) row_pos[r] = past + r % T;
  const Tensor rows = from_vector<int64_t>(row_pos, {group * T, 1}).to(device);
  const Tensor keys = arange(static_cast<double>(past + T), TensorOptions(kInt64).device(device));
  return le(keys.unsqueeze(0), rows);
}

}  // namespace

// ---------------------------------------------------------------- attention
LlamaAttention::LlamaAttention(const LlamaConfig& c, const std::string& prefix, LayerSource& source, int64_t index)
    : nn::Module("LlamaAttention"),
      num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_dim(c.attention_head_dim()),
      layer_index(index),
      rope_interleaved(c.rope_interleaved) {
  const int64_t H = c.hidden_size;
  q_proj = register_module("q_proj", source.linear(prefix + "q_proj", H, num_heads * head_dim));
  k_proj = register_module("k_proj", source.linear(prefix + "k_proj", H, num_kv_heads * head_dim));
  v_proj = register_module("v_proj", source.linear(prefix + "v_proj", H, num_kv_heads * head_dim));
  o_proj = register_module("o_proj", source.linear(prefix + "o_proj", num_heads * head_dim, H));
}

Tensor LlamaAttention::forward(const Tensor& x, const ForwardContext& ctx) {
  const int64_t B = x.size(0), T = x.size(1), group = num_heads / num_kv_heads;
  // The rotary tables broadcast over (B, T, heads, head_dim / 2).
  const Tensor cos = ctx.cos.unsqueeze(1), sin = ctx.sin.unsqueeze(1);
  // (B, T, heads * head_dim) -> (B, T, heads, head_dim): turned there, while contiguous
  const auto heads = [&](const Tensor& y, int64_t n) { return y.view({B, T, n, head_dim}); };
  const Tensor q = apply_rotary_emb(heads(q_proj->forward(x), num_heads), cos, sin, rope_interleaved).transpose(1, 2);
  Tensor k = apply_rotary_emb(heads(k_proj->forward(x), num_kv_heads), cos, sin, rope_interleaved).transpose(1, 2);
  Tensor v = heads(v_proj->forward(x), num_kv_heads).transpose(1, 2);
  if (ctx.llama_cpp) {
    ctx.cache->append_float16(layer_index, k, v);
    const Tensor o = f16_attention(q.reshape({B, num_kv_heads, group * T, head_dim}), *ctx.cache, layer_index, T);
    return o_proj->forward(o.view({B, num_heads, T, head_dim}).transpose(1, 2).reshape({B, T, num_heads * head_dim}));
  }
  if (ctx.cache) std::tie(k, v) = ctx.cache->append(layer_index, k, v);
  // A kv head's `group` query heads as one (group * T)-row query: K and V are read as
  // they are, never repeated per head.
  const Tensor qg = q.reshape({B, num_kv_heads, group * T, head_dim});
  const Tensor o = scaled_dot_product_attention(qg, k, v, ctx.may_attend);
  return o_proj->forward(o.reshape({B, num_heads, T, head_dim}).transpose(1, 2).reshape({B, T, num_heads * head_dim}));
}

// ---------------------------------------------------------------- feed-forward
LlamaMLP::LlamaMLP(const LlamaConfig& c, const std::string& prefix, LayerSource& source) : nn::Module("LlamaMLP") {
  gate_proj = register_module("gate_proj", source.linear(prefix + "gate_proj", c.hidden_size, c.intermediate_size));
  up_proj = register_module("up_proj", source.linear(prefix + "up_proj", c.hidden_size, c.intermediate_size));
  down_proj = register_module("down_proj", source.linear(prefix + "down_proj", c.intermediate_size, c.hidden_size));
}

Tensor LlamaMLP::forward(const Tensor& x, bool llama_cpp) {
  if (llama_cpp) return down_proj->forward(ggml::swiglu(gate_proj->forward(x), up_proj->forward(x)));
  return down_proj->forward(mul(silu(gate_proj->forward(x)), up_proj->forward(x)));
}

// ---------------------------------------------------------------- block
LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, const std::string& prefix, LayerSource& source,
                                     int64_t index)
    : nn::Module("LlamaDecoderLayer") {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, prefix + "self_attn.", source, index));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c, prefix + "mlp.", source));
  input_layernorm =
      register_module("input_layernorm", source.rms_norm(prefix + "input_layernorm", c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module(
      "post_attention_layernorm", source.rms_norm(prefix + "post_attention_layernorm", c.hidden_size, c.rms_norm_eps));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const ForwardContext& ctx) {
  const Tensor h = add(x, self_attn->forward(input_layernorm->forward(x), ctx));
  return add(h, mlp->forward(post_attention_layernorm->forward(h), ctx.llama_cpp));
}

// ---------------------------------------------------------------- the stack
LlamaModel::LlamaModel(const LlamaConfig& c, LayerSource& source) : nn::Module("LlamaModel"), config(c) {
  config.validate();
  embed_tokens = register_module("embed_tokens", source.embedding("model.embed_tokens", c.vocab_size, c.hidden_size));
  layers = register_module("layers", std::make_shared<nn::ModuleList<LlamaDecoderLayer>>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers->push_back(std::make_shared<LlamaDecoderLayer>(c, layer_prefix(i), source, i));
  norm = register_module("norm", source.rms_norm("model.norm", c.hidden_size, c.rms_norm_eps));
}

std::pair<Tensor, Tensor> LlamaModel::rope(int64_t from, int64_t T, const Device& device) {
  const int64_t need = from + T;
  if (!rope_cos_.defined() || rope_cos_.size(0) < need || rope_cos_.device() != device) {
    int64_t n = 64;
    while (n < need) n *= 2;
    n = std::min(n, config.max_position_embeddings);  // forward checked need <= it
    const RotaryTables t =
        config.llama_cpp_numerics
            ? ggml::rope_tables(0, n, config.attention_head_dim(), config.rope_theta)
            : rotary_tables(arange(static_cast<double>(n), TensorOptions(kInt64)), config.attention_head_dim(),
                            config.rope_theta, TensorOptions(kFloat32));
    rope_cos_ = t.cos.to(device);
    rope_sin_ = t.sin.to(device);
  }
  return {rope_cos_.narrow(0, from, T), rope_sin_.narrow(0, from, T)};
}

Tensor LlamaModel::forward(const Tensor& input_ids, KVCache* cache) {
  KILN_CHECK(input_ids.defined() && input_ids.dim() == 2 && input_ids.dtype() == kInt64, kModelOp,
             "input_ids must be (batch, tokens) int64, got ",
             input_ids.defined() ? shape_str(input_ids.shape()) + " " + dtype_name(input_ids.dtype()) : "undefined");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  KILN_CHECK(T >= 1, kModelOp, "input_ids has no tokens");
  ForwardContext ctx;
  ctx.cache = cache;
  if (cache) {
    KILN_CHECK(cache->batch() == B, kModelOp, "the cache holds a batch of ", cache->batch(), ", input_ids has ", B);
    ctx.past = cache->length();
  }
  KILN_CHECK(ctx.past + T <= config.max_position_embeddings, kModelOp, ctx.past, " cached and ", T,
             " new positions exceed max_position_embeddings ", config.max_position_embeddings);
  // llama.cpp's arithmetic needs its float16 cache: one for this call when none is given.
  ctx.llama_cpp = config.llama_cpp_numerics && !is_grad_enabled() && input_ids.device() == kCPU &&
                  (!cache || cache->is_float16());
  std::optional<KVCache> own;
  if (ctx.llama_cpp && !cache) ctx.cache = &own.emplace(config, B, T);
  KILN_CHECK(!cache || !cache->is_float16() || ctx.llama_cpp, kModelOp,
             "a float16 KV cache serves inference only (under NoGradGuard, on the host)");
  std::tie(ctx.cos, ctx.sin) = rope(ctx.past, T, input_ids.device());
  // One new token sees every key; more need the causal rule.
  if (T > 1)
    ctx.may_attend = causal_rows(config.num_attention_heads / config.num_key_value_heads, T, ctx.past, input_ids.device());
  Tensor h = embed_tokens->forward(input_ids);
  for (const auto& layer : *layers) h = layer->forward(h, ctx);
  if (cache) cache->advance(T);
  return norm->forward(h);
}

// ---------------------------------------------------------------- the language model
LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c) : LlamaForCausalLM(c, *std::make_unique<LayerSource>()) {}

LlamaForCausalLM::LlamaForCausalLM(const LlamaConfig& c, LayerSource& source)
    : nn::Module("LlamaForCausalLM"), config(c) {
  model = register_module("model", std::make_shared<LlamaModel>(c, source));
  lm_head = register_module("lm_head", c.tie_word_embeddings ? source.tied_head(*model->embed_tokens)
                                                            : source.linear("lm_head", c.hidden_size, c.vocab_size));
}

Tensor LlamaForCausalLM::forward(const Tensor& input_ids, KVCache* cache, int64_t logits_to_keep) {
  KILN_CHECK(logits_to_keep >= 0, kModelOp, "logits_to_keep must be >= 0, got ", logits_to_keep);
  Tensor h = model->forward(input_ids, cache);
  const int64_t T = h.size(1);
  if (logits_to_keep > 0 && logits_to_keep < T) h = h.narrow(1, T - logits_to_keep, logits_to_keep);
  return lm_head->forward(h);
}

std::shared_ptr<LlamaForCausalLM> LlamaForCausalLM::from_gguf(const std::string& path, const GGUFLoadOptions& options) {
  return from_gguf(io::read_gguf(path), options);
}

std::shared_ptr<LlamaForCausalLM> LlamaForCausalLM::from_gguf(const io::GGUFFile& file, const GGUFLoadOptions& options) {
  LlamaConfig c = LlamaConfig::from_gguf(file);
  // llama.cpp's arithmetic where the weights stay in quantized blocks; float files load as
  // Hugging Face's model computes.
  const bool blocks = std::any_of(file.tensors.begin(), file.tensors.end(), [](const io::GGUFTensorInfo& t) {
    return ggml_type_info(t.type).block_values > 1;
  });
  c.llama_cpp_numerics = options.llama_cpp_numerics && !options.dequantize && blocks;
  GGUFSource source(file, options);
  auto m = std::make_shared<LlamaForCausalLM>(c, source);
  source.check_all_used();
  m->eval();
  return m;
}

void LlamaForCausalLM::load_hf_state_dict(io::TensorMap state) {
  // Buffers older transformers saved; a function of the configuration, not weights.
  for (auto it = state.begin(); it != state.end();)
    it = it->first.find("rotary_emb.inv_freq") != std::string::npos ? state.erase(it) : std::next(it);
  if (config.tie_word_embeddings) {
    // The head is the embedding table: a file may hold it under both names or only one.
    const auto head = state.find("lm_head.weight");
    const auto embed = state.find("model.embed_tokens.weight");
    if (embed == state.end() && head != state.end()) state.emplace("model.embed_tokens.weight", head->second);
    state.erase("lm_head.weight");
    state.emplace("lm_head.weight", state.at("model.embed_tokens.weight"));
  }
  load_state_dict(state, /*strict=*/true);
}

std::shared_ptr<LlamaForCausalLM> LlamaForCausalLM::from_pretrained(const std::string& directory) {
  const std::filesystem::path dir(directory);
  KILN_CHECK(std::filesystem::is_directory(dir), kModelOp, "'", directory,
             "' is not a folder (expected config.json and model.safetensors in it)");
  const LlamaConfig config = LlamaConfig::from_file((dir / "config.json").string());
  // The strict load below sets every parameter.
  const auto model = nn::skip_init<LlamaForCausalLM>(config);
  model->load_hf_state_dict(io::load_safetensors((dir / "model.safetensors").string()).tensors);
  model->eval();
  return model;
}

}  // namespace kiln::llama
