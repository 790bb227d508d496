#pragma once
// Translating many sentences with a trained Seq2SeqTransformer and scoring them: batches
// of similar lengths through greedy decoding or batched beam search, subwords back to
// text, corpus BLEU (sacreBLEU's default) and chrF against the references.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

namespace translate_de_en {

struct TranslateOptions {
  int64_t beam = 0;              // 0: greedy
  double length_penalty = 0.6;   // beam search's GNMT alpha
  // Output length limit, the end token included: max_len_a · source length + max_len_b.
  double max_len_a = 1.5;
  int64_t max_len_b = 10;
  int64_t batch_sentences = 64;  // sentences decoded together
};

// sources: subword ids without bos/eos -> the translations' subword ids (no bos/eos), in order.
std::vector<std::vector<int64_t>> translate_ids(kiln::transformer::Seq2SeqTransformer& model,
                                                const std::vector<std::vector<int64_t>>& sources, int64_t bos_id,
                                                int64_t eos_id, const TranslateOptions& options);

struct Scored {
  std::vector<std::string> hypotheses;
  kiln::text::BleuScore bleu;
  double chrf = 0;
};

// Translates the sources and scores the detokenised output against the references.
Scored translate_and_score(kiln::transformer::Seq2SeqTransformer& model,
                           const kiln::text::SentencePieceTokenizer& tokenizer,
                           const std::vector<std::vector<int64_t>>& sources, const std::vector<std::string>& references,
                           const TranslateOptions& options);

}  // namespace translate_de_en
