#pragma once
// LoRA (Hu et al., 2021) as PEFT applies it: chosen nn::Linear layers get a trainable
// low-rank update, W x + (alpha / r) B A x, with the rest of the model frozen; the
// adapters merge into the weights for inference and save and load alone, in PEFT's file
// layout (adapter_model.safetensors with base_model.model.<path>.lora_A.weight names, and
// adapter_config.json), so adapters trained here load in PEFT and the other way round.
//
//   nn::LoraConfig c{.r = 8, .alpha = 16, .target_modules = {"query", "value"}};
//   std::vector<std::string> adapted = nn::add_lora(model, c);  // "encoder.layer.0.attention.self.query", ...
//   optim::AdamW opt(nn::trainable_parameters(model), {.lr = 1e-4});
//   ... train ...
//   nn::save_lora("adapter", model, c);   // adapter_model.safetensors + adapter_config.json
//   nn::merge_lora(model);                // W += (alpha / r) B A: inference at the base's cost
#include <string>
#include <vector>

#include "module.h"

namespace kiln::nn {

struct LoraConfig {
  int64_t r = 8;         // the rank
  double alpha = 8.0;    // lora_alpha: the update is scaled by alpha / r
  double dropout = 0.0;  // lora_dropout, on the adapter's input while training
  bool rank_stabilized = false;  // use_rslora: scaled by alpha / sqrt(r) instead
  // Which Linear layers: a layer whose dotted name equals an entry or ends with "." and
  // the entry ("query" takes every ...attention.self.query), as PEFT's list matches.
  std::vector<std::string> target_modules;
};

// Attaches an adapter to every matching nn::Linear and freezes every other parameter
// (requires_grad false), the adapters' trainable. Returns the adapted layers' names in
// module order. Throws naming the targets when none matches, and when a matching layer
// already has an adapter.
std::vector<std::string> add_lora(Module& model, const LoraConfig& config);

// The parameters that require a gradient (the adapters' after add_lora), for an optimizer.
std::vector<Tensor> trainable_parameters(const Module& model);

// W += scaling · B A in every adapted layer not yet merged (forward then skips the
// adapter: the base's cost); unmerge_lora subtracts it again. Both leave the adapters.
void merge_lora(Module& model);
void unmerge_lora(Module& model);

// The adapters' weights under PEFT's names: base_model.model.<layer>.lora_A.weight and
// ...lora_B.weight.
StateDict lora_state_dict(const Module& model);

// Writes DIR/adapter_model.safetensors and DIR/adapter_config.json (PEFT's keys: r,
// lora_alpha, lora_dropout, use_rslora, target_modules, peft_type "LORA", bias "none").
void save_lora(const std::string& dir, const Module& model, const LoraConfig& config);
// Reads what save_lora (or PEFT's save_pretrained) wrote: adds adapters to `model` as the
// config says, then loads their weights strictly (a missing or extra name is an error
// naming it). Returns the config. PEFT options Kiln does not run (DoRA, per-layer ranks,
// a regular expression for target_modules, modules_to_save, ...) are errors naming them.
LoraConfig load_lora(const std::string& dir, Module& model);

}  // namespace kiln::nn
