#include "llama/gguf_source.h"

#include <utility>
#include <vector>

namespace kiln::llama {

namespace {

constexpr const char* kSourceOp = "LlamaForCausalLM.from_gguf";

// Hugging Face's per-block module paths and llama.cpp's names for them.
const std::vector<std::pair<std::string, std::string>> kBlockNames = {
    {"self_attn.q_proj", "attn_q"},        {"self_attn.k_proj", "attn_k"}, {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},   {"mlp.gate_proj", "ffn_gate"},  {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},         {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"},
};
const std::vector<std::pair<std::string, std::string>> kModelNames = {
    {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};

bool is_block_type(GGMLType t) { return t == GGMLType::Q4_0 || t == GGMLType::Q4_1 || t == GGMLType::Q8_0; }

}  // namespace

std::string gguf_tensor_name(const std::string& hf_name) {
  const std::string suffix = ".weight";
  KILN_CHECK(hf_name.size() > suffix.size() && hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) == 0,
             "gguf_tensor_name", "'", hf_name, "' is not a Llama weight (expected a name ending in .weight)");
  const std::string path = hf_name.substr(0, hf_name.size() - suffix.size());
  for (const auto& [hf, gg] : kModelNames)
    if (path == hf) return gg + suffix;
  const std::string layers = "model.layers.";
  if (path.rfind(layers, 0) == 0) {
    const size_t dot = path.find('.', layers.size());
    const std::string index = path.substr(layers.size(), dot == std::string::npos ? std::string::npos : dot - layers.size());
    const bool digits = !index.empty() && index.find_first_not_of("0123456789") == std::string::npos;
    if (digits && dot != std::string::npos) {
      const std::string rest = path.substr(dot + 1);
      for (const auto& [hf, gg] : kBlockNames)
        if (rest == hf) return "blk." + index + "." + gg + suffix;
    }
  }
  throw Error(std::string("[gguf_tensor_name] '") + hf_name + "' is not a Llama weight");
}

GGUFSource::GGUFSource(const io::GGUFFile& file, GGUFLoadOptions options) : file_(file), options_(options) {
  KILN_CHECK(options.dtype == kFloat32 || options.dtype == kBFloat16, kSourceOp,
             "float weights must be float32 or bfloat16, got ", dtype_name(options.dtype));
}

const io::GGUFTensorInfo& GGUFSource::take(const std::string& hf_name, const Shape& shape) {
  const std::string name = gguf_tensor_name(hf_name);
  const io::GGUFTensorInfo* t = file_.find_tensor(name);
  KILN_CHECK(t != nullptr, kSourceOp, file_.source, ": no tensor ", name, " (", hf_name, ")");
  KILN_CHECK(t->shape() == shape, kSourceOp, file_.source, ": ", name, " has shape ", shape_str(t->shape()),
             ", the configuration needs ", shape_str(shape));
  used_.insert(name);
  return *t;
}

bool GGUFSource::keep_blocks(const io::GGUFTensorInfo& t) const { return !options_.dequantize && is_block_type(t.type); }

QuantizedMatrix GGUFSource::blocks(const io::GGUFTensorInfo& t) const {
  QuantizedMatrix q;
  q.type = t.type;
  q.rows = t.ne[1];
  q.cols = t.ne[0];
  q.data = file_.data(t);
  q.owner = file_.keep_alive();  // the mapped file lives as long as a layer uses it
  return q;
}

Tensor GGUFSource::floats(const io::GGUFTensorInfo& t) const {
  const Tensor w = file_.to_float(t);
  return options_.dtype == kFloat32 ? w : w.to(options_.dtype);
}

std::shared_ptr<nn::Linear> GGUFSource::linear(const std::string& name, int64_t in, int64_t out) {
  const io::GGUFTensorInfo& t = take(name + ".weight", {out, in});
  if (keep_blocks(t)) return std::make_shared<nn::Linear>(blocks(t));
  auto l = std::make_shared<nn::Linear>(0, 0, false);
  l->in_features = in;
  l->out_features = out;
  l->weight = floats(t).requires_grad_();
  l->parameter_slot("weight") = l->weight;
  return l;
}

std::shared_ptr<nn::Embedding> GGUFSource::embedding(const std::string& name, int64_t num, int64_t dim) {
  const io::GGUFTensorInfo& t = take(name + ".weight", {num, dim});
  if (keep_blocks(t)) return std::make_shared<nn::Embedding>(blocks(t));
  auto e = std::make_shared<nn::Embedding>(0, 0);
  e->num_embeddings = num;
  e->embedding_dim = dim;
  e->weight = floats(t).requires_grad_();
  e->parameter_slot("weight") = e->weight;
  return e;
}

std::shared_ptr<nn::RMSNorm> GGUFSource::rms_norm(const std::string& name, int64_t dim, double eps) {
  const io::GGUFTensorInfo& t = take(name + ".weight", {dim});
  auto n = std::make_shared<nn::RMSNorm>(dim, eps);
  NoGradGuard no_grad;
  n->weight.copy_(file_.to_float(t));
  if (options_.dequantize) n->to(options_.dtype);
  return n;
}

void GGUFSource::check_all_used() const {
  std::string unused;
  for (const io::GGUFTensorInfo& t : file_.tensors)
    if (!used_.count(t.name)) unused += (unused.empty() ? "" : ", ") + t.name;
  KILN_CHECK(unused.empty(), kSourceOp, file_.source, ": tensors the Llama architecture does not use: ", unused);
}

}  // namespace kiln::llama
