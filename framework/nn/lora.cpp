#include "nn/lora.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/grad_mode.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "nn/layers.h"
#include "ops/ops.h"

namespace kiln::nn {
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

bool matches(const std::string& name, const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    if (name == t) return true;
    if (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
        name[name.size() - t.size() - 1] == '.')
      return true;
  }
  return false;
}

// Every nn::Linear with an adapter, by name.
std::vector<std::pair<std::string, Linear*>> adapted_layers(const Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, m] : const_cast<Module&>(model).named_modules())
    if (auto* l = dynamic_cast<Linear*>(m.get()); l && l->has_lora()) out.emplace_back(name, l);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> add_lora(Module& model, const LoraConfig& c) {
  KILN_CHECK(c.r >= 1, "add_lora", "r must be at least 1, got ", c.r);
  KILN_CHECK(c.alpha > 0, "add_lora", "alpha must be positive, got ", c.alpha);
  KILN_CHECK(c.dropout >= 0 && c.dropout < 1, "add_lora", "dropout must be in [0, 1), got ", c.dropout);
  KILN_CHECK(!c.target_modules.empty(), "add_lora", "target_modules is empty: name the Linear layers to adapt");
  std::vector<std::pair<std::string, Linear*>> chosen;
  for (auto& [name, m] : model.named_modules()) {
    auto* l = dynamic_cast<Linear*>(m.get());
    // A layer inside an adapter (lora_A, lora_B) is never a target.
    if (!l || name.find("lora_") != std::string::npos || !matches(name, c.target_modules)) continue;
    KILN_CHECK(!l->has_lora(), "add_lora", "layer '", name, "' already has an adapter");
    chosen.emplace_back(name, l);
  }
  KILN_CHECK(!chosen.empty(), "add_lora", "no Linear layer matches target_modules [", join(c.target_modules), "]");
  for (Tensor& p : model.parameters()) p.requires_grad_(false);
  std::vector<std::string> names;
  for (auto& [name, l] : chosen) {
    // alpha / r, or alpha / sqrt(r) for rank-stabilised LoRA (Kalajdzievski, 2023).
    const double scaling = c.alpha / (c.rank_stabilized ? std::sqrt(static_cast<double>(c.r)) : static_cast<double>(c.r));
    l->attach_lora(c.r, scaling, c.dropout);
    l->train(model.is_training());
    names.push_back(name);
  }
  return names;
}

std::vector<Tensor> trainable_parameters(const Module& model) {
  std::vector<Tensor> out;
  for (const Tensor& p : model.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

void merge_lora(Module& model) {
  NoGradGuard no_grad;
  for (auto& [name, l] : adapted_layers(model)) {
    if (l->lora_merged) continue;
    KILN_CHECK(!l->is_quantized(), "merge_lora", name, "'s weight is quantized (",
               ggml_type_info(l->qweight->type).name, "): an adapter cannot be merged into blocks");
    l->weight.add_(mul(matmul(l->lora_B->weight, l->lora_A->weight), l->lora_scaling));
    l->lora_merged = true;
  }
}

void unmerge_lora(Module& model) {
  NoGradGuard no_grad;
  for (auto& [name, l] : adapted_layers(model)) {
    if (!l->lora_merged) continue;
    l->weight.sub_(mul(matmul(l->lora_B->weight, l->lora_A->weight), l->lora_scaling));
    l->lora_merged = false;
  }
}

StateDict lora_state_dict(const Module& model) {
  StateDict out;
  for (auto& [name, l] : adapted_layers(model)) {
    out[kPeftPrefix + name + ".lora_A.weight"] = l->lora_A->weight;
    out[kPeftPrefix + name + ".lora_B.weight"] = l->lora_B->weight;
  }
  return out;
}

void save_lora(const std::string& dir, const Module& model, const LoraConfig& c) {
  const StateDict sd = lora_state_dict(model);
  KILN_CHECK(!sd.empty(), "save_lora", "the model has no LoRA adapter (add_lora first)");
  std::filesystem::create_directories(dir);
  io::TensorMap tensors;
  for (const auto& [k, v] : sd) tensors[k] = v.detach().contiguous();
  io::save_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  std::ostringstream json;
  json << "{\n  \"peft_type\": \"LORA\",\n  \"r\": " << c.r << ",\n  \"lora_alpha\": " << c.alpha
       << ",\n  \"lora_dropout\": " << c.dropout << ",\n  \"use_rslora\": " << (c.rank_stabilized ? "true" : "false")
       << ",\n  \"bias\": \"none\",\n  \"target_modules\": [";
  for (size_t i = 0; i < c.target_modules.size(); ++i)
    json << (i ? ", " : "") << io::json_quote(c.target_modules[i]);
  json << "],\n  \"fan_in_fan_out\": false,\n  \"inference_mode\": true\n}\n";
  std::ofstream out(dir + "/adapter_config.json");
  out << json.str();
  KILN_CHECK(out.good(), "save_lora", "cannot write '", dir, "/adapter_config.json'");
}

LoraConfig load_lora(const std::string& dir, Module& model) {
  const std::string config_path = dir + "/adapter_config.json";
  std::ifstream in(config_path, std::ios::binary);
  KILN_CHECK(in.good(), "load_lora", "cannot open '", config_path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const io::JsonValue root = io::parse_json(ss.str(), "load_lora", config_path + ": ");
  using Kind = io::JsonValue::Kind;
  KILN_CHECK(root.kind == Kind::Object, "load_lora", config_path, ": expected a JSON object");
  const auto number = [&](const char* key, double fallback) {
    const io::JsonValue* v = root.find(key);
    if (!v) return fallback;
    KILN_CHECK(v->kind == Kind::Number, "load_lora", config_path, ": ", key, " must be a number");
    return v->number;
  };
  if (const io::JsonValue* t = root.find("peft_type"))
    KILN_CHECK(t->kind == Kind::String && t->string == "LORA", "load_lora", config_path,
               ": peft_type must be \"LORA\"");
  if (const io::JsonValue* b = root.find("bias"); b && b->kind != Kind::Null)
    KILN_CHECK(b->kind == Kind::String && b->string == "none", "load_lora", config_path,
               ": bias \"", b->kind == Kind::String ? b->string : "?", "\" is not supported (only \"none\")");
  // PEFT's options Kiln's adapters do not have: refused unless at their defaults, so
  // that an adapter is never loaded to compute something else than it was trained to.
  const auto is_default = [](const io::JsonValue& v) {
    return v.kind == Kind::Null || (v.kind == Kind::Bool && !v.boolean) ||
           (v.kind == Kind::Object && v.object.empty()) || (v.kind == Kind::Array && v.array.empty());
  };
  for (const char* key : {"use_dora", "rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern",
                          "modules_to_save", "exclude_modules", "lora_bias", "fan_in_fan_out", "use_qalora",
                          "trainable_token_indices", "target_parameters", "layer_replication"})
    if (const io::JsonValue* v = root.find(key); v && !is_default(*v))
      KILN_FAIL("load_lora", config_path, ": ", key, " is set, which Kiln's LoRA does not support");
  LoraConfig c;
  if (const io::JsonValue* v = root.find("use_rslora"); v && v->kind == Kind::Bool) c.rank_stabilized = v->boolean;
  const double r = number("r", 8);
  KILN_CHECK(r >= 1 && r == static_cast<double>(static_cast<int64_t>(r)), "load_lora", config_path,
             ": r must be a positive integer, got ", r);
  c.r = static_cast<int64_t>(r);
  c.alpha = number("lora_alpha", 8);
  c.dropout = number("lora_dropout", 0);
  const io::JsonValue* targets = root.find("target_modules");
  KILN_CHECK(targets && targets->kind == Kind::Array, "load_lora", config_path,
             ": target_modules must be a list of names (a regular expression is not supported)");
  for (const io::JsonValue& t : targets->array) {
    KILN_CHECK(t.kind == Kind::String, "load_lora", config_path, ": target_modules must hold strings");
    c.target_modules.push_back(t.string);
  }
  add_lora(model, c);
  const io::SafetensorsContents file = io::load_safetensors(dir + "/adapter_model.safetensors");
  StateDict expected = lora_state_dict(model);
  std::vector<std::string> missing, unexpected;
  for (const auto& [k, v] : expected) {
    // PEFT also writes the adapter's name into keys for non-default adapters' files;
    // the default one's are the plain names.
    auto it = file.tensors.find(k);
    if (it == file.tensors.end()) {
      missing.push_back(k);
      continue;
    }
    KILN_CHECK(it->second.shape() == v.shape(), "load_lora", k, ": the file has shape ", shape_str(it->second.shape()),
               ", the adapter ", shape_str(v.shape()));
    NoGradGuard no_grad;
    Tensor target = v;
    target.copy_(it->second.to(v.dtype()));
  }
  for (const auto& [k, v] : file.tensors)
    if (!expected.count(k)) unexpected.push_back(k);
  KILN_CHECK(missing.empty() && unexpected.empty(), "load_lora", dir, "/adapter_model.safetensors: missing [",
             join(missing), "], unexpected [", join(unexpected), "]");
  return c;
}

}  // namespace kiln::nn
