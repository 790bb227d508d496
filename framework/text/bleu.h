#pragma once
// Corpus BLEU as sacreBLEU 2.x computes it, so that a score printed by a Kiln program can
// be compared with published ones: the same tokenizer (13a, mteval-v13a's, by default),
// the same n-gram statistics (clipped counts summed over the corpus, the reference length
// closest to each hypothesis), the same smoothing and the same double arithmetic, so the
// scores agree with PyPI sacrebleu to the last bits, not merely to the printed digits.
//
//   std::vector<std::string> hyps = {"The cat sat on the mat."};
//   std::vector<std::string> refs = {"The cat is on the mat."};
//   kiln::text::BleuScore s = kiln::text::corpus_bleu(hyps, refs);
//   s.score;        // 0..100
//   s.to_string();  // "BLEU = 48.89 85.7/66.7/40.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)"
//   // several references per segment: one stream per reference, each as long as hyps
//   kiln::text::corpus_bleu(hyps, std::vector<std::vector<std::string>>{refs, other_refs});
//
// Text is UTF-8. Like Python's str methods that sacreBLEU relies on, splitting into words
// treats every Unicode whitespace as a separator (no-break and thin spaces, U+3000, ...),
// and lowercasing is Unicode's (with Python's special cases, see lowercase()). Bytes that
// are not valid UTF-8 pass through unchanged, each one character.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::text {

struct BleuOptions {
  // "13a" (mteval-v13a, sacreBLEU's default), "char" (every character a word) or "none"
  // (split on whitespace only).
  std::string tokenize = "13a";
  // Case-insensitive BLEU: both sides lowercased (lowercase()) before tokenizing.
  bool lowercase = false;
  // What an order with no matched n-gram contributes: "exp" (sacreBLEU's default, mteval's
  // 1/2, 1/4, ... of a match), "floor" (smooth_value matches, default 0.1), "add-k"
  // (smooth_value added to the matched and total counts of orders 2 and up, default 1) or
  // "none" (nothing: the score is 0).
  std::string smooth_method = "exp";
  std::optional<double> smooth_value = std::nullopt;
  int max_ngram_order = 4;
  // Average only over the orders the hypotheses have n-grams of (sentence-level BLEU).
  bool effective_order = false;
};

struct BleuScore {
  double score = 0;                // 0..100
  std::vector<double> precisions;  // per order 1..max_ngram_order, in percent
  // Matched (clipped) and hypothesis n-grams per order, over the corpus, before any
  // add-k smoothing (sacreBLEU's BLEUScore shows them after it).
  std::vector<int64_t> counts, totals;
  double bp = 0;                     // brevity penalty
  double ratio = 0;                  // sys_len / ref_len, 0 when ref_len is 0
  int64_t sys_len = 0, ref_len = 0;  // tokens of the hypotheses, of the closest references

  // sacreBLEU's line: "BLEU = 34.12 65.2/40.1/27.3/19.1 (BP = 0.981 ratio = 0.981
  // hyp_len = 1234 ref_len = 1258)".
  std::string to_string() const;
};

// BLEU of a corpus against one reference a segment.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      const BleuOptions& options = {});
// Against several: references[k][i] is the k-th reference of hypotheses[i]. A hypothesis
// n-gram matches up to the most times any one of its references has it. Streams of
// another length than hypotheses are an error (sacreBLEU would silently drop the lines
// past the shortest), as is an empty corpus. A braced list of braced lists would fit
// both overloads: name the type, as in the example above.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const BleuOptions& options = {});

// BLEU of one segment against its references, with sacreBLEU's sentence_bleu defaults
// (exp smoothing over the effective order). BLEU is meant for corpora: a corpus score is
// not the mean of sentence scores.
BleuScore sentence_bleu(const std::string& hypothesis, const std::vector<std::string>& references,
                        const BleuOptions& options = {.effective_order = true});

// mteval-v13a's tokenization, as sacreBLEU's "13a": drops "<skipped>", joins words
// hyphenated across a line break ("-\n"), unescapes &quot; &amp; &lt; &gt;, puts spaces
// around punctuation (periods and commas only when not between digits, dashes only after
// a digit), and leaves single spaces between tokens.
//   tokenize_13a("It's 1,000.5 dollars, e.g.")  // "It's 1,000.5 dollars , e . g ."
std::string tokenize_13a(const std::string& line);

// The words of a line as Python's str.split() finds them: runs of Unicode whitespace
// separate them.
std::vector<std::string> split_whitespace(const std::string& line);

// The characters (code points) of a line, each as its UTF-8 bytes: Python's list(str).
std::vector<std::string> split_characters(const std::string& line);

// Python's str.lower(): Unicode's lowercase mapping of each character, "İ" (U+0130) to
// "i̇" (i and U+0307), and a capital sigma to the final "ς" at the end of a word.
std::string lowercase(const std::string& line);

namespace detail {
// The checks of a corpus metric's arguments (shared with chrf.cpp): at least one
// hypothesis and one reference stream, each stream as long as the hypotheses.
void check_corpus(const char* op, const std::vector<std::string>& hypotheses,
                  const std::vector<const std::vector<std::string>*>& streams);
// Pointers to each element, in order: reference streams or one segment's references as
// the metrics walk them, without copying the strings.
template <class T>
std::vector<const T*> pointers_to(const std::vector<T>& items) {
  std::vector<const T*> out;
  out.reserve(items.size());
  for (const T& item : items) out.push_back(&item);
  return out;
}
}  // namespace detail

}  // namespace kiln::text
