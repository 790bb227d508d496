#pragma once
// Turning a trained Seq2SeqTransformer into translations: greedy decoding and beam
// search, for a batch of sentences or for one, with cached keys and values by default
// (each new token costs one position, not the whole prefix).
#include <cstdint>
#include <vector>

#include "seq2seq.h"

namespace kiln::transformer {

struct DecodeOptions {
  int64_t max_len = 50;  // generated tokens, the end token included
  int64_t bos_id = 1;
  int64_t eos_id = 2;
  bool use_cache = true;
};

struct BeamOptions : DecodeOptions {
  int64_t beam_width = 4;
  // Hypotheses are ranked by log P / ((5 + length) / 6)^length_penalty (GNMT); 0 ranks
  // by log P alone, larger values favour longer outputs.
  double length_penalty = 0.6;
};

struct Hypothesis {
  std::vector<int64_t> tokens;  // generated ids, without bos and without the end token
  double log_prob = 0.0;        // sum of the tokens' log-probabilities (end token included)
  double score = 0.0;           // log_prob normalised by the length penalty
  bool finished = false;        // ended with the end token (not cut at max_len)
};

// src (N, S) int64 -> for each sentence the tokens before the end token. Runs under
// kiln::InferenceMode (eval behaviour, no graph) without writing the model, so several
// threads may decode with one model at once.
std::vector<std::vector<int64_t>> greedy_decode(Seq2SeqTransformer& model, const Tensor& src,
                                                const DecodeOptions& opts = {});

// src (N, S) int64, sentences padded with the model's pad_id -> for each sentence its
// best hypotheses, best first (at most beam_width each): what beam_search gives for each
// sentence alone (padding is masked, so a padded sentence decodes as unpadded), to
// rounding. The live beams of every unfinished sentence go through the decoder together,
// one step at a time; a sentence leaves the batch once it has beam_width finished
// hypotheses or no live beams. Runs under kiln::InferenceMode without writing the model,
// as greedy_decode.
std::vector<std::vector<Hypothesis>> beam_search_batch(Seq2SeqTransformer& model, const Tensor& src,
                                                       const BeamOptions& opts = {});

// src (1, S) -> the best hypotheses, best first (at most beam_width): beam_search_batch
// of one sentence.
std::vector<Hypothesis> beam_search(Seq2SeqTransformer& model, const Tensor& src, const BeamOptions& opts = {});

}  // namespace kiln::transformer
