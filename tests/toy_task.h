#pragma once
// A toy translation task for the tests: vocabularies built from the pairs, the pairs
// encoded, and a small model's options. Shared by test_transformer and test_cuda.
#include <string>
#include <utility>
#include <vector>

#include "kiln.h"
#include "transformer/kiln_transformer.h"

namespace kiln::testing {

struct ToyTask {
  data::Vocab src_vocab, tgt_vocab;
  std::vector<data::TokenPair> pairs;
  std::vector<std::string> targets;
};

inline ToyTask toy_task(const std::vector<std::pair<std::string, std::string>>& sentences) {
  std::vector<std::string> de, en;
  for (const auto& p : sentences) de.push_back(p.first), en.push_back(p.second);
  ToyTask t{data::Vocab::build(de), data::Vocab::build(en), {}, en};
  for (const auto& p : sentences)
    t.pairs.push_back({t.src_vocab.encode_strict(p.first), t.tgt_vocab.encode_strict(p.second, true, true)});
  return t;
}

// A post-norm Seq2SeqTransformer of the given size for task t.
inline transformer::Seq2SeqOptions toy_model(const ToyTask& t, int64_t d_model, int64_t heads, int64_t layers,
                                             int64_t d_ff, double dropout, int64_t max_len = 32) {
  transformer::Seq2SeqOptions o;
  o.src_vocab_size = t.src_vocab.size();
  o.tgt_vocab_size = t.tgt_vocab.size();
  o.d_model = d_model;
  o.nhead = heads;
  o.num_encoder_layers = layers;
  o.num_decoder_layers = layers;
  o.dim_feedforward = d_ff;
  o.dropout = dropout;
  o.max_len = max_len;
  return o;
}

}  // namespace kiln::testing
