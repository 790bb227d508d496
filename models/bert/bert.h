#pragma once
// BERT encoders (Devlin et al., 2019) with Hugging Face's module and parameter names, so a
// BertModel's model.safetensors loads as it is: embeddings.word_embeddings.weight,
// encoder.layer.0.attention.self.query.weight, ..., pooler.dense.weight.
//
//   auto model = bert::BertModel::from_pretrained("all-MiniLM-L6-v2");  // config.json +
//   model->eval();                                                       // model.safetensors
//   bert::BertOutput out = model->forward(ids, mask);  // ids, mask (B, T) int64
//   out.last_hidden_state;                              // (B, T, hidden_size)
#include <memory>
#include <string>

#include <kiln/kiln.h>

#include "config.h"

namespace kiln::bert {

// Word, position and token-type embeddings, summed, then LayerNorm and dropout.
class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& c);
  // input_ids, token_type_ids (B, T) int64 -> (B, T, hidden_size)
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);

  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

// The query, key and value projections and the attention itself.
class BertSelfAttention : public nn::Module {
 public:
  explicit BertSelfAttention(const BertConfig& c);
  // x (B, T, H), may_attend (B, 1, 1, T) bool or undefined -> (B, T, H), the heads' contexts
  Tensor forward(const Tensor& x, const Tensor& may_attend);

  std::shared_ptr<nn::Linear> query, key, value;
  int64_t num_heads;
  double attention_dropout;
};

// dense, dropout, then LayerNorm of that plus the block's input (post-norm).
class BertResidualOutput : public nn::Module {
 public:
  // type_name: "BertSelfOutput" after attention, "BertOutput" after the feed-forward.
  BertResidualOutput(const char* type_name, int64_t in_features, const BertConfig& c);
  // h (B, T, in_features), residual (B, T, H) -> (B, T, H)
  Tensor forward(const Tensor& h, const Tensor& residual);

  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

class BertAttention : public nn::Module {
 public:
  explicit BertAttention(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& may_attend);

  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

// dense then the activation: the feed-forward block's first half.
class BertIntermediate : public nn::Module {
 public:
  explicit BertIntermediate(const BertConfig& c);
  Tensor forward(const Tensor& x);  // (B, T, H) -> (B, T, intermediate_size)

  std::shared_ptr<nn::Linear> dense;
  std::string activation;
};

class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& may_attend);  // (B, T, H) -> (B, T, H)

  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

class BertEncoder : public nn::Module {
 public:
  explicit BertEncoder(const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& may_attend);

  std::shared_ptr<nn::ModuleList<BertLayer>> layer;
};

// tanh(dense(the first token's state)): BERT's sentence vector for classification heads.
class BertPooler : public nn::Module {
 public:
  explicit BertPooler(const BertConfig& c);
  Tensor forward(const Tensor& hidden);  // (B, T, H) -> (B, H)

  std::shared_ptr<nn::Linear> dense;
};

struct BertOutput {
  Tensor last_hidden_state;  // (B, T, hidden_size)
  Tensor pooler_output;      // (B, hidden_size); undefined without a pooler
};

class BertModel : public nn::Module {
 public:
  explicit BertModel(const BertConfig& config, bool add_pooling_layer = true);

  // input_ids (B, T) int64, T <= max_position_embeddings; attention_mask (B, T), 1 at
  // tokens and 0 at padding (int64, bool or float; undefined: all 1); token_type_ids
  // (B, T) int64 (undefined: all 0). Padded positions' outputs are computed but
  // meaningless, as in transformers.
  BertOutput forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor(),
                     const Tensor& token_type_ids = Tensor());

  // A folder as Hugging Face saves a BertModel: config.json and model.safetensors, whose
  // names load strictly (a "bert." prefix, as task models save it, is taken off; the
  // position_ids buffer some files carry is checked and dropped, as transformers does).
  static std::shared_ptr<BertModel> from_pretrained(const std::string& directory, bool add_pooling_layer = true);
  // The same from a state dict already read.
  void load_hf_state_dict(io::TensorMap state);

  BertConfig config;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;  // null without the pooling layer
};

}  // namespace kiln::bert
