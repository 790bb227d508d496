#pragma once
// Sentence embeddings as sentence-transformers makes them: a folder it saved (its
// modules.json: Transformer, Pooling, optionally Normalize) run as tokenizer, BERT,
// pooling over the tokens and L2 normalisation.
//
//   auto st = bert::SentenceTransformer::from_directory("all-MiniLM-L6-v2");
//   Tensor e = st.encode({"A man is eating food.", "Someone eats."});  // (2, 384) float32
//   Tensor cos = matmul(e, e.t());                                      // normalised: cosines
#include <memory>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "bert.h"

namespace kiln::bert {

// sentence-transformers' pooling modes (1_Pooling/config.json's pooling_mode_* flag).
enum class Pooling { Mean, Cls, Max, MeanSqrtLen };
// "mean", "cls", "max", "mean_sqrt_len" (sentence-transformers' names for them).
const char* pooling_name(Pooling mode);

// hidden (B, T, H), attention_mask (B, T) (1 at tokens, 0 at padding) -> (B, H):
// Mean: the mean over the tokens; Cls: the first token; Max: the largest value of each
// feature over the tokens; MeanSqrtLen: the sum over the tokens / sqrt(their count).
Tensor pool(const Tensor& hidden, const Tensor& attention_mask, Pooling mode);

// x (B, H) / max(||x||, 1e-12) row by row, as torch.nn.functional.normalize.
Tensor l2_normalize(const Tensor& x);

// sentence-transformers' cos_sim: a (N, H), b (M, H) -> (N, M) cosines.
Tensor cos_sim(const Tensor& a, const Tensor& b);

// sentence-transformers' MultipleNegativesRankingLoss: anchors (B, H) and positives
// (B, H); row i's positive is positives[i] and every other row's positive is one of its
// negatives: cross_entropy(cos_sim(anchors, positives) * scale, [0, 1, ..., B-1]).
Tensor multiple_negatives_ranking_loss(const Tensor& anchors, const Tensor& positives, double scale = 20.0);

class SentenceTransformer {
 public:
  // Reads modules.json, config.json, model.safetensors, tokenizer.json,
  // sentence_bert_config.json (max_seq_length) and the pooling module's config.json.
  // A module type it does not run (say a Dense layer) is an error naming it.
  static SentenceTransformer from_directory(const std::string& directory);

  // The sentences' embeddings (N, H) float32 in their order, batch_size at a time (the
  // sentences sorted by length first, as sentence-transformers does, so that a batch pads
  // little). Runs in inference mode.
  Tensor encode(const std::vector<std::string>& sentences, int64_t batch_size = 32) const;
  // One padded batch through the model and pooling: the embeddings (B, H), with
  // gradients when grad mode is on (for fine-tuning).
  Tensor forward(const std::vector<std::string>& sentences) const;

  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  BertModel& model() const { return *model_; }
  std::shared_ptr<BertModel> model_ptr() const { return model_; }
  int64_t max_seq_length() const { return max_seq_length_; }
  Pooling pooling() const { return pooling_; }
  bool normalizes() const { return normalize_; }
  int64_t dimension() const { return model_->config.hidden_size; }

 private:
  text::Tokenizer tokenizer_;
  std::shared_ptr<BertModel> model_;
  Pooling pooling_ = Pooling::Mean;
  bool normalize_ = false;
  int64_t max_seq_length_ = 512;
};

}  // namespace kiln::bert
