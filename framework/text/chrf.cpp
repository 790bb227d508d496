#include "text/chrf.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "text/bleu.h"

namespace kiln::text {
namespace {

struct ChrfSettings {
  size_t char_order, word_order;
  double factor;  // beta squared
  bool lowercase, whitespace, eps_smoothing;
  size_t orders() const { return char_order + word_order; }
};

ChrfSettings resolve(const ChrfOptions& o, const char* op) {
  KILN_CHECK(o.char_order >= 0 && o.word_order >= 0 && o.char_order + o.word_order >= 1, op,
             "char_order and word_order must be at least 0 and one of them at least 1, got char_order ", o.char_order,
             " and word_order ", o.word_order);
  KILN_CHECK(o.beta >= 0, op, "beta must be at least 0, got ", o.beta);
  ChrfSettings s{};
  s.char_order = static_cast<size_t>(o.char_order);
  s.word_order = static_cast<size_t>(o.word_order);
  s.factor = static_cast<double>(o.beta * o.beta);
  s.lowercase = o.lowercase;
  s.whitespace = o.whitespace;
  s.eps_smoothing = o.eps_smoothing;
  return s;
}

// The n-grams of one order and how often each occurs. A segment has one per order: the
// character orders first, then the word orders.
using Counter = std::unordered_map<std::string, int64_t>;

std::string without_whitespace(const std::string& line) {
  std::string text;
  for (const std::string& w : split_whitespace(line)) text += w;
  return text;
}

// Character n-grams of orders 1..char_order: runs of that many code points.
void add_char_ngrams(const std::string& line, const ChrfSettings& s, std::vector<Counter>& counts) {
  const std::string text = s.whitespace ? line : without_whitespace(line);
  std::vector<size_t> offsets{0};  // of each character in text, and its end
  for (const std::string& c : split_characters(text)) offsets.push_back(offsets.back() + c.size());
  const size_t length = offsets.size() - 1;
  for (size_t n = 1; n <= s.char_order; ++n) {
    Counter& c = counts[n - 1];
    for (size_t i = 0; i + n <= length; ++i) ++c[text.substr(offsets[i], offsets[i + n] - offsets[i])];
  }
}

bool is_ascii_punctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

// chrF++'s words: whitespace-separated, with one punctuation character split off the end
// of a word or else off its start ("(hi)" gives "(hi" and ")", as in sacreBLEU). Testing
// bytes is enough: the punctuation is ASCII, and a word of one multi-byte character has
// no ASCII byte to split off.
std::vector<std::string> chrf_words(const std::string& line) {
  std::vector<std::string> words;
  for (std::string& w : split_whitespace(line)) {
    if (w.size() > 1 && is_ascii_punctuation(w.back())) {
      words.push_back(w.substr(0, w.size() - 1));
      words.push_back(w.substr(w.size() - 1));
    } else if (w.size() > 1 && is_ascii_punctuation(w.front())) {
      words.push_back(w.substr(0, 1));
      words.push_back(w.substr(1));
    } else {
      words.push_back(std::move(w));
    }
  }
  return words;
}

void add_word_ngrams(const std::string& line, const ChrfSettings& s, std::vector<Counter>& counts) {
  const std::vector<std::string> words = chrf_words(line);
  for (size_t n = 1; n <= s.word_order; ++n) {
    Counter& c = counts[s.char_order + n - 1];
    for (size_t i = 0; i + n <= words.size(); ++i) {
      std::string key = words[i];
      for (size_t k = i + 1; k < i + n; ++k) key += ' ' + words[k];
      ++c[key];
    }
  }
}

std::vector<Counter> ngrams(const std::string& segment, const ChrfSettings& s) {
  const std::string line = s.lowercase ? lowercase(segment) : segment;
  std::vector<Counter> counts(s.orders());
  add_char_ngrams(line, s, counts);
  add_word_ngrams(line, s, counts);
  return counts;
}

// Per order: the hypothesis's n-grams (0 when the reference has none of that order), the
// reference's, and the matched ones (clipped to the reference's count).
std::vector<int64_t> match_stats(const std::vector<Counter>& hyp, const std::vector<Counter>& ref) {
  std::vector<int64_t> stats;
  for (size_t i = 0; i < hyp.size(); ++i) {
    int64_t hyp_count = 0, ref_count = 0, matched = 0;
    for (const auto& [ngram, count] : hyp[i]) {
      hyp_count += count;
      auto it = ref[i].find(ngram);
      if (it != ref[i].end()) matched += std::min(count, it->second);
    }
    for (const auto& entry : ref[i]) ref_count += entry.second;
    stats.insert(stats.end(), {ref[i].empty() ? 0 : hyp_count, ref_count, matched});
  }
  return stats;
}

// The F-score from [hyp, ref, match] triples, in sacreBLEU's order of operations.
double f_score(const std::vector<int64_t>& stats, const ChrfSettings& s) {
  const double eps = 1e-16;
  double eps_score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
  int effective_order = 0;
  for (size_t i = 0; i < s.orders(); ++i) {
    const int64_t n_hyp = stats[3 * i], n_ref = stats[3 * i + 1], n_match = stats[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / static_cast<double>(n_hyp) : eps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / static_cast<double>(n_ref) : eps;
    const double denom = s.factor * prec + rec;
    eps_score += denom > 0 ? (1 + s.factor) * prec * rec / denom : eps;
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (s.eps_smoothing) return 100 * eps_score / static_cast<double>(s.orders());
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0) return 0.0;
  double score = (1 + s.factor) * avg_prec * avg_rec;
  score /= s.factor * avg_prec + avg_rec;
  return 100 * score;
}

// The statistics of the reference the segment scores best against (the first of equals).
std::vector<int64_t> best_stats(const std::string& hyp, const std::vector<const std::string*>& refs,
                                const ChrfSettings& s) {
  const std::vector<Counter> hyp_ngrams = ngrams(hyp, s);
  std::vector<int64_t> best;
  double best_f = -1.0;
  for (const std::string* ref : refs) {
    std::vector<int64_t> stats = match_stats(hyp_ngrams, ngrams(*ref, s));
    const double f = f_score(stats, s);
    if (f > best_f) {
      best_f = f;
      best = std::move(stats);
    }
  }
  return best;
}

ChrfScore make_score(double score, const ChrfOptions& o) { return {score, o.char_order, o.word_order, o.beta}; }

ChrfScore score_corpus(const char* op, const std::vector<std::string>& hypotheses,
                       const std::vector<const std::vector<std::string>*>& streams, const ChrfOptions& options) {
  const ChrfSettings s = resolve(options, op);
  detail::check_corpus(op, hypotheses, streams);
  std::vector<int64_t> totals(3 * s.orders(), 0);
  std::vector<const std::string*> refs(streams.size());
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    for (size_t k = 0; k < streams.size(); ++k) refs[k] = &(*streams[k])[i];
    const std::vector<int64_t> stats = best_stats(hypotheses[i], refs, s);
    for (size_t j = 0; j < totals.size(); ++j) totals[j] += stats[j];
  }
  return make_score(f_score(totals, s), options);
}

}  // namespace

std::string ChrfScore::name() const { return "chrF" + std::to_string(beta) + std::string(word_order, '+'); }

std::string ChrfScore::to_string() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", score);
  return name() + " = " + buf;
}

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                      const ChrfOptions& options) {
  return score_corpus("corpus_chrf", hypotheses, {&references}, options);
}

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, const ChrfOptions& options) {
  return score_corpus("corpus_chrf", hypotheses, detail::pointers_to(references), options);
}

ChrfScore sentence_chrf(const std::string& hypothesis, const std::vector<std::string>& references,
                        const ChrfOptions& options) {
  const ChrfSettings s = resolve(options, "sentence_chrf");
  KILN_CHECK(!references.empty(), "sentence_chrf", "no references given");
  return make_score(f_score(best_stats(hypothesis, detail::pointers_to(references), s), s), options);
}

}  // namespace kiln::text
