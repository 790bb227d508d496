#include "bert/sentence_transformer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

namespace kiln::bert {
namespace {

constexpr const char* kEmbedderOp = "SentenceTransformer";
using io::JsonValue;
using Kind = JsonValue::Kind;
namespace fs = std::filesystem;

JsonValue read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good(), kEmbedderOp, "cannot open '", path.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const JsonValue v = io::parse_json(ss.str(), kEmbedderOp, path.string() + ": ");
  return v;
}

bool flag(const JsonValue& obj, const fs::path& path, const char* key) {
  const JsonValue* v = obj.find(key);
  if (!v) return false;
  KILN_CHECK(v->kind == Kind::Bool, kEmbedderOp, path.string(), ": ", key, " must be true or false");
  return v->boolean;
}

Pooling read_pooling(const fs::path& path) {
  const JsonValue c = read_json(path);
  KILN_CHECK(c.kind == Kind::Object, kEmbedderOp, path.string(), ": expected a JSON object");
  std::vector<Pooling> modes;
  if (flag(c, path, "pooling_mode_mean_tokens")) modes.push_back(Pooling::Mean);
  if (flag(c, path, "pooling_mode_cls_token")) modes.push_back(Pooling::Cls);
  if (flag(c, path, "pooling_mode_max_tokens")) modes.push_back(Pooling::Max);
  if (flag(c, path, "pooling_mode_mean_sqrt_len_tokens")) modes.push_back(Pooling::MeanSqrtLen);
  for (const char* key : {"pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
    KILN_CHECK(!flag(c, path, key), kEmbedderOp, path.string(), ": ", key, " is not supported (mean, cls, max, mean_sqrt_len)");
  KILN_CHECK(modes.size() == 1, kEmbedderOp, path.string(), ": expected exactly one pooling mode, got ", modes.size(),
             " (Kiln pools one way at a time)");
  return modes.front();
}

}  // namespace

const char* pooling_name(Pooling mode) {
  switch (mode) {
    case Pooling::Mean: return "mean";
    case Pooling::Cls: return "cls";
    case Pooling::Max: return "max";
    case Pooling::MeanSqrtLen: return "mean_sqrt_len";
  }
  return "?";
}

Tensor pool(const Tensor& hidden, const Tensor& attention_mask, Pooling mode) {
  KILN_CHECK(hidden.dim() == 3, "pool", "hidden must be (batch, tokens, features), got ", shape_str(hidden.shape()));
  KILN_CHECK(attention_mask.dim() == 2 && attention_mask.size(0) == hidden.size(0) &&
                 attention_mask.size(1) == hidden.size(1),
             "pool", "attention_mask must be (batch, tokens) = (", hidden.size(0), ", ", hidden.size(1), "), got ",
             shape_str(attention_mask.shape()));
  if (mode == Pooling::Cls) return select(hidden, 1, 0);
  const Tensor mask = attention_mask.to(hidden.dtype()).unsqueeze(-1);  // (B, T, 1)
  if (mode == Pooling::Max) {
    // Padding set to -1e9 before the max, as sentence-transformers does.
    const Tensor filled = where(eq(mask, 0.0), full_like(hidden, -1e9), hidden);
    return amax(filled, {1});
  }
  const Tensor summed = sum(mul(hidden, mask), {1});  // (B, H)
  const Tensor count = clamp(sum(mask, {1}), 1e-9, std::nullopt);   // (B, 1)
  return div(summed, mode == Pooling::Mean ? count : sqrt(count));
}

Tensor l2_normalize(const Tensor& x) {
  return div(x, clamp(norm(x, 2.0, {-1}, /*keepdim=*/true), 1e-12, std::nullopt));
}

Tensor cos_sim(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), "cos_sim",
             "expected (N, H) and (M, H) with one H, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  return matmul(l2_normalize(a), l2_normalize(b).t());
}

Tensor multiple_negatives_ranking_loss(const Tensor& anchors, const Tensor& positives, double scale) {
  KILN_CHECK(anchors.dim() == 2 && anchors.shape() == positives.shape(), "multiple_negatives_ranking_loss",
             "anchors and positives must be (B, H) of one shape, got ", shape_str(anchors.shape()), " and ",
             shape_str(positives.shape()));
  const Tensor labels = arange(static_cast<double>(anchors.size(0)), TensorOptions(kInt64).device(anchors.device()));
  return cross_entropy(mul(cos_sim(anchors, positives), scale), labels);
}

SentenceTransformer SentenceTransformer::from_directory(const std::string& directory) {
  const fs::path dir(directory);
  KILN_CHECK(fs::is_directory(dir), kEmbedderOp, "'", directory, "' is not a folder (a sentence-transformers model: "
             "modules.json, config.json, model.safetensors, tokenizer.json)");
  SentenceTransformer st;
  const fs::path modules_path = dir / "modules.json";
  const JsonValue modules = read_json(modules_path);
  KILN_CHECK(modules.kind == Kind::Array, kEmbedderOp, modules_path.string(), ": expected an array of modules");
  bool transformer = false, pooling = false;
  for (size_t i = 0; i < modules.array.size(); ++i) {
    const JsonValue& m = modules.array[i];
    const JsonValue* type = m.kind == Kind::Object ? m.find("type") : nullptr;
    const JsonValue* path = m.kind == Kind::Object ? m.find("path") : nullptr;
    KILN_CHECK(type && type->kind == Kind::String && path && path->kind == Kind::String, kEmbedderOp, modules_path.string(),
               ": module ", i, " needs a \"type\" and a \"path\" string");
    const std::string& t = type->string;
    if (t == "sentence_transformers.models.Transformer" && !transformer && !pooling) {
      transformer = true;
    } else if (t == "sentence_transformers.models.Pooling" && transformer && !pooling) {
      pooling = true;
      st.pooling_ = read_pooling(dir / path->string / "config.json");
    } else if (t == "sentence_transformers.models.Normalize" && pooling && !st.normalize_) {
      st.normalize_ = true;
    } else {
      KILN_FAIL(kEmbedderOp, modules_path.string(), ": module ", i, " \"", t, "\" is not supported here (Kiln runs "
                "Transformer, Pooling, then optionally Normalize, in that order)");
    }
  }
  KILN_CHECK(transformer && pooling, kEmbedderOp, modules_path.string(), ": expected a Transformer and a Pooling module");
  st.model_ = BertModel::from_pretrained(directory, /*add_pooling_layer=*/true);
  st.model_->eval();
  st.tokenizer_ = text::Tokenizer::from_file((dir / "tokenizer.json").string());
  st.max_seq_length_ = st.model_->config.max_position_embeddings;
  if (fs::exists(dir / "sentence_bert_config.json")) {
    const JsonValue c = read_json(dir / "sentence_bert_config.json");
    if (const JsonValue* v = c.kind == Kind::Object ? c.find("max_seq_length") : nullptr) {
      KILN_CHECK(v->kind == Kind::Number && v->is_integer && v->integer >= 2, kEmbedderOp,
                 (dir / "sentence_bert_config.json").string(), ": max_seq_length must be an integer >= 2");
      st.max_seq_length_ = std::min(v->integer, st.max_seq_length_);
    }
  }
  // As sentence-transformers calls its tokenizer: truncated to max_seq_length, padded to
  // the batch's longest (not tokenizer.json's own settings).
  text::TruncationOptions trunc;
  trunc.max_length = st.max_seq_length_;
  st.tokenizer_.enable_truncation(trunc);
  text::PaddingOptions pad;
  if (auto id = st.tokenizer_.token_to_id("[PAD]")) pad.pad_id = *id;
  pad.pad_id = st.tokenizer_.padding() ? st.tokenizer_.padding()->pad_id : pad.pad_id;
  st.tokenizer_.enable_padding(pad);
  return st;
}

Tensor SentenceTransformer::forward(const std::vector<std::string>& sentences) const {
  const text::BatchTensors t = text::to_tensors(tokenizer_.encode_batch(sentences));
  const BertOutput out = model_->forward(t.input_ids, t.attention_mask, t.token_type_ids);
  const Tensor pooled = pool(out.last_hidden_state, t.attention_mask, pooling_);
  return normalize_ ? l2_normalize(pooled) : pooled;
}

Tensor SentenceTransformer::encode(const std::vector<std::string>& sentences, int64_t batch_size) const {
  KILN_CHECK(batch_size >= 1, "SentenceTransformer::encode", "batch_size must be at least 1, got ", batch_size);
  const int64_t n = static_cast<int64_t>(sentences.size());
  if (n == 0) return zeros({0, dimension()});
  // Longest first, as sentence-transformers orders them (by characters).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return sentences[static_cast<size_t>(a)].size() > sentences[static_cast<size_t>(b)].size();
  });
  InferenceMode inference;
  std::vector<Tensor> parts;  // in sorted order
  for (int64_t s = 0; s < n; s += batch_size) {
    const int64_t e = std::min(n, s + batch_size);
    std::vector<std::string> batch;
    for (int64_t i = s; i < e; ++i) batch.push_back(sentences[static_cast<size_t>(order[static_cast<size_t>(i)])]);
    parts.push_back(forward(batch));
  }
  std::vector<int64_t> where_sorted(static_cast<size_t>(n));  // sentence i is row where_sorted[i]
  for (int64_t i = 0; i < n; ++i) where_sorted[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  return index_select(cat(parts, 0), 0, from_vector(where_sorted, {n}));
}

}  // namespace kiln::bert
