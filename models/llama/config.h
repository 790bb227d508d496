#pragma once
// A Llama-family configuration: Hugging Face's LlamaConfig names and defaults, read from
// config.json or from a GGUF file's "llama.*" metadata.
//
//   llama::LlamaConfig c = llama::LlamaConfig::from_gguf(io::read_gguf("model.gguf"));
#include <cstdint>
#include <string>

#include <kiln/io/gguf.h>

namespace kiln::llama {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // grouped-query attention: heads share K and V in groups
  int64_t head_dim = 0;              // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  // Which features rotary embeddings pair: (2i, 2i+1) in llama.cpp's GGUF layout, whose
  // converter permuted the query and key rows to it; (i, i + head_dim/2) in Hugging
  // Face's (rotate_half). The same model either way, with its rows in the matching order.
  bool rope_interleaved = false;
  int64_t bos_token_id = 1, eos_token_id = 2;
  // Inference computes as llama.cpp's CPU backend does (set for a GGUF file's quantized
  // weights): keys and values kept in float16 and attended as llama.cpp does
  // (f16_attention.h), ggml's rotary tables and SwiGLU (ggml_math.h), so that the logits
  // are llama.cpp's to the bit. A forward that records gradients, or runs off the host,
  // uses the float32 ops whatever this says.
  bool llama_cpp_numerics = false;

  int64_t attention_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }

  // config.json: fields it does not use are ignored; a model_type other than "llama",
  // rope_scaling, attention or mlp biases, or a hidden_act other than silu is an error
  // naming the file and field.
  static LlamaConfig from_file(const std::string& path);
  static LlamaConfig from_json(const std::string& json, const std::string& name = "<config.json>");
  // general.architecture "llama" and its llama.* keys (block_count, embedding_length, ...);
  // the vocabulary's size from tokenizer.ggml.tokens; rope_interleaved set.
  static LlamaConfig from_gguf(const io::GGUFFile& file);
  // Throws "[LlamaConfig] <where>…" naming the first size that cannot make a model.
  void validate(const std::string& where = "") const;
};

}  // namespace kiln::llama
