#pragma once
// Llama-family decoders (Touvron et al., 2023): pre-norm blocks of RMSNorm, grouped-query
// attention with rotary position embeddings, and a SwiGLU feed-forward, with Hugging
// Face's module and parameter names (model.layers.0.self_attn.q_proj.weight, ...), so
// LlamaForCausalLM's model.safetensors loads as it is, and from llama.cpp's GGUF files
// with their quantized weights kept in blocks (Linear::qweight).
//
//   auto model = llama::LlamaForCausalLM::from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf");
//   llama::KVCache cache(model->config, 1, 256);
//   Tensor logits = model->forward(ids, &cache);  // ids (B, T) int64 -> (B, T, vocab)
#include <memory>
#include <string>

#include <kiln/kiln.h>

#include "config.h"
#include "kv_cache.h"
#include "layer_source.h"

namespace kiln::llama {

// What every block of one forward shares: the rotary tables of its positions and the
// causal mask of its queries (computed once per forward, not per layer).
struct ForwardContext {
  Tensor cos, sin;  // (T, head_dim / 2)
  int64_t past = 0; // positions already in the cache
  Tensor may_attend;  // (group * T, past + T) bool, true where a query sees a key; undefined: all
  KVCache* cache = nullptr;
  bool llama_cpp = false;  // attention over the float16 cache, ggml's SwiGLU (config.h)
};

class LlamaAttention : public nn::Module {
 public:
  LlamaAttention(const LlamaConfig& c, const std::string& prefix, LayerSource& source, int64_t layer_index);
  // x (B, T, hidden) -> (B, T, hidden)
  Tensor forward(const Tensor& x, const ForwardContext& ctx);

  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;
  int64_t num_heads, num_kv_heads, head_dim, layer_index;
  bool rope_interleaved;
};

// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLP : public nn::Module {
 public:
  LlamaMLP(const LlamaConfig& c, const std::string& prefix, LayerSource& source);
  // (B, T, hidden) -> (B, T, hidden); llama_cpp: the product silu · up as ggml computes it
  // (inference only).
  Tensor forward(const Tensor& x, bool llama_cpp = false);

  std::shared_ptr<nn::Linear> gate_proj, up_proj, down_proj;
};

class LlamaDecoderLayer : public nn::Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& c, const std::string& prefix, LayerSource& source, int64_t layer_index);
  Tensor forward(const Tensor& x, const ForwardContext& ctx);  // (B, T, hidden) -> (B, T, hidden)

  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
};

class LlamaModel : public nn::Module {
 public:
  LlamaModel(const LlamaConfig& c, LayerSource& source);
  // input_ids (B, T) int64 -> the final norm's output (B, T, hidden). With a cache, the
  // tokens come after the cache's positions and their keys and values are added to it.
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr);

  LlamaConfig config;
  std::shared_ptr<nn::Embedding> embed_tokens;
  std::shared_ptr<nn::ModuleList<LlamaDecoderLayer>> layers;
  std::shared_ptr<nn::RMSNorm> norm;

 private:
  // The rotary tables for positions [from, from + T), from a table grown as needed.
  std::pair<Tensor, Tensor> rope(int64_t from, int64_t T, const Device& device);
  Tensor rope_cos_, rope_sin_;
};

// How from_gguf keeps the weights.
struct GGUFLoadOptions {
  // false: quantized tensors stay in their blocks (inference); true: dequantised into
  // float weights of `dtype` (float32 or bfloat16), e.g. to fine-tune or to compare.
  bool dequantize = false;
  DType dtype = kFloat32;
  // A file with quantized weights kept in blocks (dequantize false) computes as llama.cpp
  // does (LlamaConfig::llama_cpp_numerics), so that greedy decoding picks its tokens.
  bool llama_cpp_numerics = true;
};

class LlamaForCausalLM : public nn::Module {
 public:
  explicit LlamaForCausalLM(const LlamaConfig& config);
  LlamaForCausalLM(const LlamaConfig& config, LayerSource& source);

  // input_ids (B, T) int64 -> logits (B, logits_to_keep or T, vocab) float32 for the last
  // logits_to_keep positions (0: all), as transformers' logits_to_keep.
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr, int64_t logits_to_keep = 0);

  // llama.cpp's file: the configuration from its metadata, the tensors memory-mapped
  // (quantized ones used in place unless options.dequantize). Every tensor of the file
  // must be used and every weight found, with its shape (errors name the tensor).
  static std::shared_ptr<LlamaForCausalLM> from_gguf(const std::string& path, const GGUFLoadOptions& options = {});
  static std::shared_ptr<LlamaForCausalLM> from_gguf(const io::GGUFFile& file, const GGUFLoadOptions& options = {});
  // A folder as Hugging Face saves LlamaForCausalLM: config.json and model.safetensors
  // (float weights; a tied model's file may lack lm_head.weight).
  static std::shared_ptr<LlamaForCausalLM> from_pretrained(const std::string& directory);
  void load_hf_state_dict(io::TensorMap state);

  LlamaConfig config;
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<nn::Linear> lm_head;
};

}  // namespace kiln::llama
