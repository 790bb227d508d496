#pragma once
// The corpus of translate_de_en as the model sees it: the Ding dictionary's sentence pairs
// (kiln::data::read_ding_corpus), a joint SentencePiece model trained on the training
// split's German and English sentences (and, with DatasetOptions::phrases, its word and
// phrase entries, which then join the training pairs), and each split's pairs as subword
// ids.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/kiln.h>

namespace translate_de_en {

struct EncodedSplit {
  std::vector<kiln::data::SentencePair> text;    // the sentences kept
  std::vector<kiln::data::TokenPair> ids;        // source subwords; target "bos … eos"
  int64_t skipped_long = 0;                      // pairs over the subword limit, left out
};

struct Dataset {
  kiln::data::ParallelCorpus corpus;
  kiln::text::SentencePieceTokenizer tokenizer;
  EncodedSplit train, valid, test;
};

struct DatasetOptions {
  std::string corpus_path;
  std::string spm_path;        // a .model to load; "" trains one and writes it to spm_out
  std::string spm_out;
  int64_t vocab_size = 4000;
  std::string spm_type = "bpe";
  int64_t max_subwords = 100;  // a side with more subwords leaves the pair out (counted)
  bool train_tokenizer = true; // false: load spm_out (written by another process)
  bool phrases = false;        // the dictionary's word and phrase entries join the training split
  int64_t max_phrases = 0;     // with phrases, at most this many (DingCorpusOptions::max_phrases; 0: all)
};

Dataset load_dataset(const DatasetOptions& options);

// Encodes pairs: sources without bos/eos, targets "bos … eos"; pairs with a side over
// max_subwords are left out and counted.
EncodedSplit encode_split(const std::vector<kiln::data::SentencePair>& pairs,
                          const kiln::text::SentencePieceTokenizer& tokenizer, int64_t max_subwords);

// Subword regularisation: the pairs of `split` segmented anew, the sources (and, with
// targets, the targets) drawn by SentencePieceTokenizer::sample_encode (BPE-dropout with
// probability alpha for a BPE model, sampling with smoothing alpha for a unigram one),
// the same for the same seed; a pair with a side past max_subwords so drawn keeps split's
// ids.
std::vector<kiln::data::TokenPair> sample_split(const EncodedSplit& split,
                                                const kiln::text::SentencePieceTokenizer& tokenizer, double alpha,
                                                bool targets, uint64_t seed, int64_t max_subwords);

// The files benchmarks/torch_translate.py reads (see its top): the ids of every split,
// the raw valid and test sentences, the training batches and each epoch's order of them.
void export_for_pytorch(const std::string& dir, const Dataset& data, const kiln::data::PairDataLoader& train,
                        int64_t epochs, const std::string& config_json);

}  // namespace translate_de_en
