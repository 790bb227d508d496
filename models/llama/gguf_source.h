#pragma once
// A Llama model's layers from a GGUF file (llama.cpp's tensor names, mapped from Hugging
// Face's), built as LlamaForCausalLM::from_gguf asks: quantized tensors kept in their
// blocks, mapped in place, or dequantised into float weights.
#include <set>
#include <string>

#include "layer_source.h"
#include "llama.h"

namespace kiln::llama {

// llama.cpp's name of a Hugging Face Llama tensor: "model.layers.3.self_attn.q_proj.weight"
// -> "blk.3.attn_q.weight", "model.embed_tokens.weight" -> "token_embd.weight", ...;
// throws for a name outside the architecture.
std::string gguf_tensor_name(const std::string& hf_name);

class GGUFSource : public LayerSource {
 public:
  GGUFSource(const io::GGUFFile& file, GGUFLoadOptions options);
  std::shared_ptr<nn::Linear> linear(const std::string& name, int64_t in, int64_t out) override;
  std::shared_ptr<nn::Embedding> embedding(const std::string& name, int64_t num, int64_t dim) override;
  std::shared_ptr<nn::RMSNorm> rms_norm(const std::string& name, int64_t dim, double eps) override;
  // Throws naming the file's tensors that no layer took.
  void check_all_used() const;

 private:
  // The tensor behind `hf_name` ("model.norm.weight"), checked to have `shape`.
  const io::GGUFTensorInfo& take(const std::string& hf_name, const Shape& shape);
  bool keep_blocks(const io::GGUFTensorInfo& t) const;
  QuantizedMatrix blocks(const io::GGUFTensorInfo& t) const;
  Tensor floats(const io::GGUFTensorInfo& t) const;

  const io::GGUFFile& file_;
  GGUFLoadOptions options_;
  std::set<std::string> used_;
};

}  // namespace kiln::llama
