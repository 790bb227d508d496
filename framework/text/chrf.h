#pragma once
// chrF (Popović 2015) and chrF++ (2017) as sacreBLEU 2.x computes them: an F-score of
// character n-grams (orders 1-6, whitespace removed) and, for chrF++, word n-grams
// (orders 1-2), recall weighted beta = 2 times precision. It needs no tokenizer, which
// makes it fairer than BLEU across languages and to morphology. The statistics and the
// double arithmetic follow sacreBLEU's, so the scores agree with PyPI sacrebleu to the last
// bits.
//
//   std::vector<std::string> hyps = {"The cat sat on the mat."};
//   std::vector<std::string> refs = {"The cat is on the mat."};
//   kiln::text::corpus_chrf(hyps, refs).score;                      // 67.17...
//   kiln::text::corpus_chrf(hyps, refs, {.word_order = 2}).to_string();  // "chrF2++ = 69.44"
//
// Text is UTF-8 and n-grams count characters (code points), not bytes; whitespace is
// Unicode's, as in Python (see split_whitespace in bleu.h).
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::text {

struct ChrfOptions {
  int char_order = 6;
  int word_order = 0;       // 2: chrF++
  int beta = 2;             // recall counts beta times as much as precision
  bool lowercase = false;   // Python's str.lower() (kiln::text::lowercase) of both sides
  bool whitespace = false;  // keep whitespace in the character n-grams
  // The average F-score over all orders, an order without n-grams counting a tiny epsilon
  // (chrF++.py, Moses and NLTK). By default, as sacreBLEU, the F-score of the precisions
  // and recalls averaged over the orders that both sides have n-grams of.
  bool eps_smoothing = false;
};

struct ChrfScore {
  double score = 0;  // 0..100
  int char_order = 6, word_order = 0, beta = 2;

  std::string name() const;       // "chrF2", "chrF2++" (one + per word order)
  std::string to_string() const;  // "chrF2 = 55.12"
};

// chrF of a corpus against one reference a segment: the statistics of each segment are
// summed over the corpus, then one F-score is taken.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      const ChrfOptions& options = {});
// Against several: references[k][i] is the k-th reference of hypotheses[i]; each stream is
// as long as hypotheses. Each segment counts with its best-scoring reference.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& options = {});

// chrF of one segment against its references (the best of them).
ChrfScore sentence_chrf(const std::string& hypothesis, const std::vector<std::string>& references,
                        const ChrfOptions& options = {});

}  // namespace kiln::text
