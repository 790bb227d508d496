#pragma once
// A Kiln Llama written as llama.cpp's GGUF file: the llama.* metadata of its
// configuration, the tokenizer's metadata as given, and every weight under llama.cpp's
// name in the chosen block type (norms in float32, as llama.cpp's converter keeps them).
//
//   const io::GGUFFile source = io::read_gguf("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto model = llama::LlamaForCausalLM::from_gguf(source, {.dequantize = true});
//   ... fine-tune ...
//   llama::save_gguf(*model, "tuned.Q8_0.gguf", {.type = GGMLType::Q8_0,
//                                               .tokenizer = llama::tokenizer_metadata(source)});
#include <string>

#include "llama.h"

namespace kiln::llama {

struct GGUFSaveOptions {
  // The block type of the matrices (the embedding, projections and head): F32, F16,
  // BF16, Q8_0, Q4_0 or Q4_1. A weight already held in that type is copied as it is; any
  // other is dequantised (if need be) and stored anew.
  GGMLType type = GGMLType::Q8_0;
  // The tokenizer.* keys llama.cpp reads (tokenizer.ggml.model, .tokens, .merges, ...):
  // a model file without them does not load there.
  io::GGUFMetadata tokenizer = {};
  std::string name = {};  // general.name (optional)
};

// Every tokenizer.* key of a GGUF file, in its order.
io::GGUFMetadata tokenizer_metadata(const io::GGUFFile& file);

// general.* and llama.* keys of a configuration, as llama.cpp reads them back (and as
// LlamaConfig::from_gguf does).
io::GGUFMetadata llama_metadata(const LlamaConfig& config, GGMLType type, const std::string& name = "");

// The file's tensors: each weight under llama.cpp's name, query and key rows in the
// interleaved rotary layout llama.cpp expects (permuted from Hugging Face's if the model
// holds that one; rows of blocks move without being quantised again).
std::vector<io::GGUFTensorData> gguf_tensors(const LlamaForCausalLM& model, GGMLType type);

// Writes the file atomically. Throws "[save_gguf] ..." for a type it cannot write or a
// tokenizer whose vocabulary is not the model's size.
void save_gguf(const LlamaForCausalLM& model, const std::string& path, const GGUFSaveOptions& options);

}  // namespace kiln::llama
