#include "llama/layer_source.h"

namespace kiln::llama {

namespace {
constexpr double kInitStd = 0.02;  // LlamaConfig.initializer_range's default
}  // namespace

std::shared_ptr<nn::Linear> LayerSource::linear(const std::string&, int64_t in, int64_t out) {
  auto l = std::make_shared<nn::Linear>(in, out, false);
  nn::init::normal_(l->weight, 0.0, kInitStd);
  return l;
}

std::shared_ptr<nn::Embedding> LayerSource::embedding(const std::string&, int64_t num, int64_t dim) {
  auto e = std::make_shared<nn::Embedding>(num, dim);
  nn::init::normal_(e->weight, 0.0, kInitStd);
  return e;
}

std::shared_ptr<nn::RMSNorm> LayerSource::rms_norm(const std::string&, int64_t dim, double eps) {
  return std::make_shared<nn::RMSNorm>(dim, eps);
}

std::shared_ptr<nn::Linear> LayerSource::tied_head(const nn::Embedding& embed) {
  if (embed.is_quantized()) return std::make_shared<nn::Linear>(*embed.qweight);
  auto head = std::make_shared<nn::Linear>(0, 0, false);
  // The very tensor, so training updates both uses; named_parameters lists it once.
  head->in_features = embed.embedding_dim;
  head->out_features = embed.num_embeddings;
  head->weight = embed.weight;
  head->parameter_slot("weight") = embed.weight;
  return head;
}

}  // namespace kiln::llama
