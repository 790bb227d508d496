#include "gguf_export.h"

#include <algorithm>
#include <optional>

#include "gguf_source.h"

namespace kiln::llama {
namespace {

constexpr const char* kOp = "save_gguf";

// ggml's general.file_type of a file whose matrices are all `type` (llama_ftype).
uint32_t file_type(GGMLType type) {
  switch (type) {
    case GGMLType::F32: return 0;
    case GGMLType::F16: return 1;
    case GGMLType::Q4_0: return 2;
    case GGMLType::Q4_1: return 3;
    case GGMLType::Q8_0: return 7;
    case GGMLType::BF16: return 32;
    case GGMLType::Q5_0:
    case GGMLType::Q5_1:
    case GGMLType::Q4_K:
    case GGMLType::Q5_K:
    case GGMLType::Q6_K: break;  // read, not written
  }
  throw Error(std::string("[") + kOp + "] cannot write ggml type " + ggml_type_info(type).name);
}

// The rows of a (H · head_dim, in) query or key projection in llama.cpp's order: row
// h·d + 2j + s holds Hugging Face's row h·d + s·d/2 + j (the pairs (j, j + d/2) that
// rotate_half turns together become neighbours, as llama.cpp's converter permutes them).
std::vector<int64_t> interleaved_rows(int64_t heads, int64_t head_dim) {
  std::vector<int64_t> rows(static_cast<size_t>(heads * head_dim));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < head_dim / 2; ++j)
      for (int64_t s = 0; s < 2; ++s) rows[h * head_dim + 2 * j + s] = h * head_dim + s * head_dim / 2 + j;
  return rows;
}

// ne in ggml's order (innermost first) of a (rows, cols) matrix.
std::vector<int64_t> ne_of(int64_t rows, int64_t cols) { return {cols, rows}; }

// Blocks of `q` with its rows in `order` (none: as they are), bytes unchanged.
io::GGUFTensorData reordered_blocks(const std::string& name, const QuantizedMatrix& q,
                                    const std::vector<int64_t>& order) {
  io::GGUFTensorData t{name, q.type, ne_of(q.rows, q.cols), {}};
  const size_t row_bytes = static_cast<size_t>(q.row_bytes());
  t.bytes.resize(row_bytes * static_cast<size_t>(q.rows));
  for (int64_t r = 0; r < q.rows; ++r) {
    const int64_t from = order.empty() ? r : order[static_cast<size_t>(r)];
    std::copy_n(q.row(from), row_bytes, t.bytes.data() + static_cast<size_t>(r) * row_bytes);
  }
  return t;
}

// A weight as the file holds it: its blocks copied (rows in `order`) where they already
// are `type` and nothing is added to them; otherwise its float values (dequantised), plus
// `delta` where given, rows in `order`, stored anew.
io::GGUFTensorData stored(const std::string& name, const std::optional<QuantizedMatrix>& q, const Tensor& weight,
                          GGMLType type, const std::vector<int64_t>& order, const Tensor& delta = Tensor()) {
  if (q && q->type == type && !delta.defined()) return reordered_blocks(name, *q, order);
  NoGradGuard no_grad;
  Tensor w = q ? dequantize(*q) : weight.detach().to(kCPU).to(kFloat32);
  if (delta.defined()) w = w + delta;
  if (!order.empty()) w = index_select(w, 0, from_vector<int64_t>(order, {static_cast<int64_t>(order.size())}));
  return io::gguf_tensor(name, w.contiguous(), type);
}

// A projection: an unmerged LoRA adapter's scaling · B A goes into its weight.
io::GGUFTensorData matrix(const std::string& name, const nn::Linear& l, GGMLType type,
                          const std::vector<int64_t>& order) {
  KILN_CHECK(!l.bias.defined(), kOp, name, " has a bias, which llama.cpp's Llama layout has no place for");
  Tensor delta;
  if (l.has_lora() && !l.lora_merged) {
    NoGradGuard no_grad;
    delta = matmul(l.lora_B->weight.detach().to(kCPU).to(kFloat32), l.lora_A->weight.detach().to(kCPU).to(kFloat32)) *
            l.lora_scaling;
  }
  return stored(name, l.qweight, l.weight, type, order, delta);
}

io::GGUFTensorData embedding(const std::string& name, const nn::Embedding& e, GGMLType type) {
  return stored(name, e.qweight, e.weight, type, {});
}

io::GGUFTensorData norm(const std::string& name, const nn::RMSNorm& n) {
  NoGradGuard no_grad;
  return io::gguf_tensor(name, n.weight.detach().to(kCPU).to(kFloat32).contiguous(), GGMLType::F32);
}

}  // namespace

io::GGUFMetadata tokenizer_metadata(const io::GGUFFile& file) {
  io::GGUFMetadata out;
  for (const auto& kv : file.metadata)
    if (kv.first.rfind("tokenizer.", 0) == 0) out.push_back(kv);
  return out;
}

io::GGUFMetadata llama_metadata(const LlamaConfig& c, GGMLType type, const std::string& name) {
  using V = io::GGUFValue;
  auto u32 = [](int64_t v) { return V::u32(static_cast<uint32_t>(v)); };
  io::GGUFMetadata m = {{"general.architecture", V::str("llama")}};
  if (!name.empty()) m.push_back({"general.name", V::str(name)});
  m.push_back({"general.file_type", V::u32(file_type(type))});
  m.push_back({"llama.vocab_size", u32(c.vocab_size)});
  m.push_back({"llama.context_length", u32(c.max_position_embeddings)});
  m.push_back({"llama.embedding_length", u32(c.hidden_size)});
  m.push_back({"llama.block_count", u32(c.num_hidden_layers)});
  m.push_back({"llama.feed_forward_length", u32(c.intermediate_size)});
  m.push_back({"llama.attention.head_count", u32(c.num_attention_heads)});
  m.push_back({"llama.attention.head_count_kv", u32(c.num_key_value_heads)});
  m.push_back({"llama.attention.key_length", u32(c.attention_head_dim())});
  m.push_back({"llama.attention.value_length", u32(c.attention_head_dim())});
  m.push_back({"llama.rope.dimension_count", u32(c.attention_head_dim())});
  m.push_back({"llama.rope.freq_base", V::f32(static_cast<float>(c.rope_theta))});
  m.push_back({"llama.attention.layer_norm_rms_epsilon", V::f32(static_cast<float>(c.rms_norm_eps))});
  return m;
}

std::vector<io::GGUFTensorData> gguf_tensors(const LlamaForCausalLM& model, GGMLType type) {
  const LlamaConfig& c = model.config;
  file_type(type);  // refuses a type it cannot write before any work
  // Hugging Face's query and key rows move to llama.cpp's order; a model read from GGUF
  // holds that order already.
  const std::vector<int64_t> q_order = c.rope_interleaved ? std::vector<int64_t>{}
                                                          : interleaved_rows(c.num_attention_heads, c.attention_head_dim());
  const std::vector<int64_t> k_order = c.rope_interleaved ? std::vector<int64_t>{}
                                                          : interleaved_rows(c.num_key_value_heads, c.attention_head_dim());
  const LlamaModel& m = *model.model;
  std::vector<io::GGUFTensorData> out;
  out.push_back(embedding(gguf_tensor_name("model.embed_tokens.weight"), *m.embed_tokens, type));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LlamaDecoderLayer& layer = *(*m.layers)[static_cast<size_t>(i)];
    auto name = [&](const std::string& hf) { return gguf_tensor_name("model.layers." + std::to_string(i) + "." + hf); };
    out.push_back(norm(name("input_layernorm.weight"), *layer.input_layernorm));
    out.push_back(matrix(name("self_attn.q_proj.weight"), *layer.self_attn->q_proj, type, q_order));
    out.push_back(matrix(name("self_attn.k_proj.weight"), *layer.self_attn->k_proj, type, k_order));
    out.push_back(matrix(name("self_attn.v_proj.weight"), *layer.self_attn->v_proj, type, {}));
    out.push_back(matrix(name("self_attn.o_proj.weight"), *layer.self_attn->o_proj, type, {}));
    out.push_back(norm(name("post_attention_layernorm.weight"), *layer.post_attention_layernorm));
    out.push_back(matrix(name("mlp.gate_proj.weight"), *layer.mlp->gate_proj, type, {}));
    out.push_back(matrix(name("mlp.up_proj.weight"), *layer.mlp->up_proj, type, {}));
    out.push_back(matrix(name("mlp.down_proj.weight"), *layer.mlp->down_proj, type, {}));
  }
  out.push_back(norm(gguf_tensor_name("model.norm.weight"), *m.norm));
  if (!c.tie_word_embeddings) out.push_back(matrix(gguf_tensor_name("lm_head.weight"), *model.lm_head, type, {}));
  return out;
}

void save_gguf(const LlamaForCausalLM& model, const std::string& path, const GGUFSaveOptions& options) {
  const LlamaConfig& c = model.config;
  bool has_tokens = false;
  for (const auto& [key, value] : options.tokenizer) {
    KILN_CHECK(key.rfind("tokenizer.", 0) == 0, kOp, "tokenizer metadata holds '", key,
               "', which is not a tokenizer.* key");
    if (key != "tokenizer.ggml.tokens") continue;
    has_tokens = true;
    KILN_CHECK(static_cast<int64_t>(value.items.size()) == c.vocab_size, kOp, "the tokenizer has ",
               value.items.size(), " tokens, the model's vocabulary ", c.vocab_size);
  }
  KILN_CHECK(has_tokens, kOp, "the tokenizer metadata has no tokenizer.ggml.tokens: llama.cpp cannot load a model "
             "without its vocabulary (llama::tokenizer_metadata copies a GGUF file's)");
  io::GGUFMetadata metadata = llama_metadata(c, options.type, options.name);
  metadata.insert(metadata.end(), options.tokenizer.begin(), options.tokenizer.end());
  io::write_gguf(path, metadata, gguf_tensors(model, options.type));
}

}  // namespace kiln::llama
