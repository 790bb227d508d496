#pragma once
// Where a Llama model's layers get their weights as it is built, named as Hugging Face
// names the parameters ("model.layers.3.self_attn.q_proj"): fresh ones initialised as
// transformers initialises LlamaForCausalLM (normal(0, 0.02) weights, unit norms), or a
// GGUF file's tensors, kept in their blocks (gguf_source.h).
#include <memory>
#include <string>

#include <kiln/kiln.h>

namespace kiln::llama {

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // (out, in) weight, no bias.
  virtual std::shared_ptr<nn::Linear> linear(const std::string& name, int64_t in, int64_t out);
  virtual std::shared_ptr<nn::Embedding> embedding(const std::string& name, int64_t num, int64_t dim);
  virtual std::shared_ptr<nn::RMSNorm> rms_norm(const std::string& name, int64_t dim, double eps);
  // The output projection of a model with tied embeddings: `embed`'s table as its weight.
  virtual std::shared_ptr<nn::Linear> tied_head(const nn::Embedding& embed);
};

}  // namespace kiln::llama
