// kiln::text's BLEU and chrF against PyPI sacreBLEU (tests/fixtures/text_metrics.txt,
// written by make_text_metrics_fixtures.py): corpus and sentence scores under each
// tokenizer, smoothing and option, the score lines, the 13a tokenizer and Python's
// str.lower() on tricky strings, and the errors of bad arguments.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"
#include "text/bleu.h"
#include "text/chrf.h"

using namespace kiln::text;

namespace {

// sacreBLEU's doubles are reproduced operation by operation, so only the last bits of
// exp and log may differ (they do not with the same libm).
constexpr double kTol = 1e-9;

std::string fixture_path(const std::string& name) {
  const char* dir = std::getenv("KILN_FIXTURES");
  return std::string(dir ? dir : "tests/fixtures") + "/" + name;
}

using kiln::testing::unescape_fixture_text;

struct BleuCase {
  BleuOptions options;
  double score, bp;
  int64_t sys_len, ref_len;
  std::vector<double> precisions, counts, totals;  // counts and totals as sacreBLEU shows them
};

struct ChrfCase {
  ChrfOptions options;
  double score;
};

struct Corpus {
  std::string name;
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  std::vector<BleuCase> bleu;
  std::vector<ChrfCase> chrf;
  std::vector<std::string> bleu_str, chrf_str;
  std::vector<double> sbleu, schrf;
};

struct Fixtures {
  std::vector<Corpus> corpora;
  std::vector<std::pair<std::string, std::string>> tok13a, lower;  // input, output
};

std::vector<double> numbers(std::istringstream& in, int n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) in >> x;
  return v;
}

BleuCase parse_bleu(std::istringstream& in) {
  BleuCase c;
  std::string value;
  int lc = 0, eff = 0;
  in >> c.options.tokenize >> lc >> c.options.smooth_method >> value >> eff >> c.score >> c.bp >> c.sys_len >>
      c.ref_len;
  c.options.lowercase = lc != 0;
  c.options.effective_order = eff != 0;
  if (value != "-") c.options.smooth_value = std::stod(value);
  c.precisions = numbers(in, 4);
  c.counts = numbers(in, 4);
  c.totals = numbers(in, 4);
  return c;
}

ChrfCase parse_chrf(std::istringstream& in) {
  ChrfCase c;
  int lc = 0, ws = 0, eps = 0;
  in >> c.options.char_order >> c.options.word_order >> c.options.beta >> lc >> ws >> eps >> c.score;
  c.options.lowercase = lc != 0;
  c.options.whitespace = ws != 0;
  c.options.eps_smoothing = eps != 0;
  return c;
}

// One line of a corpus ("hyp ...", "bleu ...", ...).
void parse_corpus_line(const std::string& key, const std::string& rest, Corpus& c) {
  std::istringstream in(rest);
  if (key == "hyp") {
    c.hyps.push_back(unescape_fixture_text(rest));
  } else if (key == "ref") {
    size_t k = 0;
    in >> k;
    if (c.refs.size() <= k) c.refs.resize(k + 1);
    const size_t space = rest.find(' ');
    c.refs[k].push_back(unescape_fixture_text(space == std::string::npos ? "" : rest.substr(space + 1)));
  } else if (key == "bleu") {
    c.bleu.push_back(parse_bleu(in));
  } else if (key == "chrf") {
    c.chrf.push_back(parse_chrf(in));
  } else if (key == "bleu_str") {
    c.bleu_str.push_back(rest);
  } else if (key == "chrf_str") {
    c.chrf_str.push_back(rest);
  } else if (key == "sbleu" || key == "schrf") {
    size_t i = 0;
    double score = 0;
    in >> i >> score;
    auto& v = key == "sbleu" ? c.sbleu : c.schrf;
    v.resize(std::max(v.size(), i + 1));
    v[i] = score;
  } else {
    FAIL("unknown fixture line '" << key << "'");
  }
}

Fixtures load() {
  Fixtures f;
  const std::string path = fixture_path("text_metrics.txt");
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path << "; rerun tests/fixtures/make_text_metrics_fixtures.py");
  std::vector<std::pair<std::string, std::string>>* pairs = nullptr;  // the list an "out" line ends
  bool in_corpus = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (key == "corpus") {
      f.corpora.push_back({});
      f.corpora.back().name = rest;
      in_corpus = true;
    } else if (key == "end") {
      in_corpus = false;
    } else if (in_corpus) {
      parse_corpus_line(key, rest, f.corpora.back());
    } else if (key == "tok13a" || key == "lower") {
      pairs = key == "tok13a" ? &f.tok13a : &f.lower;
      pairs->push_back({unescape_fixture_text(rest), ""});
    } else if (key == "out") {
      REQUIRE(pairs != nullptr);
      pairs->back().second = unescape_fixture_text(rest);
    } else {
      FAIL("unknown fixture line '" << key << "'");
    }
  }
  return f;
}

const Fixtures& fixtures() {
  static const Fixtures f = load();
  return f;
}

std::string describe(const BleuOptions& o) {
  return "tokenize=" + o.tokenize + " lowercase=" + std::to_string(o.lowercase) + " smooth=" + o.smooth_method +
         (o.smooth_value ? "[" + std::to_string(*o.smooth_value) + "]" : "") +
         " effective_order=" + std::to_string(o.effective_order);
}

std::string describe(const ChrfOptions& o) {
  return "char_order=" + std::to_string(o.char_order) + " word_order=" + std::to_string(o.word_order) +
         " beta=" + std::to_string(o.beta) + " lowercase=" + std::to_string(o.lowercase) +
         " whitespace=" + std::to_string(o.whitespace) + " eps_smoothing=" + std::to_string(o.eps_smoothing);
}

// The largest |Kiln - sacreBLEU| seen, for the log.
struct MaxDiff {
  double value = 0;
  void see(double got, double want) { value = std::max(value, std::abs(got - want)); }
};

void check_bleu(const BleuScore& got, const BleuCase& want, MaxDiff& diff) {
  diff.see(got.score, want.score);
  CHECK(std::abs(got.score - want.score) <= kTol);
  CHECK(std::abs(got.bp - want.bp) <= kTol);
  CHECK(got.sys_len == want.sys_len);
  CHECK(got.ref_len == want.ref_len);
  REQUIRE(got.precisions.size() == 4);
  // sacreBLEU shows add-k's counts with k added to orders 2 and up; Kiln the raw ones.
  const double k = want.options.smooth_method == "add-k" ? want.options.smooth_value.value_or(1.0) : 0.0;
  for (size_t n = 0; n < 4; ++n) {
    CAPTURE(n);
    CHECK(std::abs(got.precisions[n] - want.precisions[n]) <= kTol);
    const bool smoothed =
        n > 0 && k != 0 && !std::all_of(want.counts.begin(), want.counts.end(), [](double c) { return c == 0; });
    CHECK(static_cast<double>(got.counts[n]) + (smoothed ? k : 0) == want.counts[n]);
    CHECK(static_cast<double>(got.totals[n]) + (smoothed ? k : 0) == want.totals[n]);
  }
}

}  // namespace

TEST_CASE("corpus_bleu equals sacreBLEU's on the fixture corpora") {
  REQUIRE(fixtures().corpora.size() >= 10);
  MaxDiff diff;
  for (const Corpus& c : fixtures().corpora) {
    CAPTURE(c.name);
    for (const BleuCase& want : c.bleu) {
      INFO(describe(want.options));
      check_bleu(corpus_bleu(c.hyps, c.refs, want.options), want, diff);
      if (c.refs.size() == 1) check_bleu(corpus_bleu(c.hyps, c.refs[0], want.options), want, diff);
    }
  }
  MESSAGE("max |Kiln - sacreBLEU| of corpus BLEU: " << diff.value);
}

TEST_CASE("BleuScore::to_string is sacreBLEU's line") {
  for (const Corpus& c : fixtures().corpora) {
    CAPTURE(c.name);
    REQUIRE(c.bleu_str.size() == 1);
    CHECK(corpus_bleu(c.hyps, c.refs).to_string() == c.bleu_str[0]);
  }
}

namespace {

// Each segment's score from `score(hypothesis, its references)` against the fixture's
// (the member `want` of every corpus), within kTol.
template <class Score>
void check_sentence_scores(const char* what, std::vector<double> Corpus::*want, Score score) {
  MaxDiff diff;
  for (const Corpus& c : fixtures().corpora) {
    REQUIRE((c.*want).size() == c.hyps.size());
    for (size_t i = 0; i < c.hyps.size(); ++i) {
      CAPTURE(c.name);
      CAPTURE(i);
      std::vector<std::string> refs;
      for (const auto& stream : c.refs) refs.push_back(stream[i]);
      const double got = score(c.hyps[i], refs);
      diff.see(got, (c.*want)[i]);
      CHECK(std::abs(got - (c.*want)[i]) <= kTol);
    }
  }
  MESSAGE("max |Kiln - sacreBLEU| of " << what << ": " << diff.value);
}

}  // namespace

TEST_CASE("sentence_bleu equals sacreBLEU's") {
  check_sentence_scores("sentence BLEU", &Corpus::sbleu,
                        [](const std::string& hyp, const std::vector<std::string>& refs) {
                          return sentence_bleu(hyp, refs).score;
                        });
}

TEST_CASE("corpus_chrf equals sacreBLEU's on the fixture corpora") {
  MaxDiff diff;
  for (const Corpus& c : fixtures().corpora) {
    CAPTURE(c.name);
    for (const ChrfCase& want : c.chrf) {
      INFO(describe(want.options));
      const ChrfScore got = corpus_chrf(c.hyps, c.refs, want.options);
      diff.see(got.score, want.score);
      CHECK(std::abs(got.score - want.score) <= kTol);
      if (c.refs.size() == 1) CHECK(corpus_chrf(c.hyps, c.refs[0], want.options).score == got.score);
    }
    REQUIRE(c.chrf_str.size() == 2);
    CHECK(corpus_chrf(c.hyps, c.refs).to_string() == c.chrf_str[0]);
    CHECK(corpus_chrf(c.hyps, c.refs, {.word_order = 2}).to_string() == c.chrf_str[1]);
  }
  MESSAGE("max |Kiln - sacreBLEU| of corpus chrF: " << diff.value);
}

TEST_CASE("sentence_chrf equals sacreBLEU's") {
  check_sentence_scores("sentence chrF", &Corpus::schrf,
                        [](const std::string& hyp, const std::vector<std::string>& refs) {
                          return sentence_chrf(hyp, refs).score;
                        });
}

TEST_CASE("tokenize_13a equals sacreBLEU's 13a tokenizer") {
  REQUIRE(fixtures().tok13a.size() >= 20);
  for (const auto& pair : fixtures().tok13a) {
    CAPTURE(pair.first);
    CHECK(tokenize_13a(pair.first) == pair.second);
  }
}

TEST_CASE("lowercase equals Python's str.lower()") {
  REQUIRE(fixtures().lower.size() >= 5);
  for (const auto& pair : fixtures().lower) {
    CAPTURE(pair.first);
    CHECK(lowercase(pair.first) == pair.second);
  }
}

TEST_CASE("text that is not UTF-8 is scored, each bad byte a character") {
  const std::string bad = "ab\xff\xc3 \xe2\x82 c d";
  CHECK(lowercase("AB\xff\xc3") == "ab\xff\xc3");
  CHECK(split_characters(bad).size() == 11);
  CHECK(split_whitespace(bad) == std::vector<std::string>{"ab\xff\xc3", "\xe2\x82", "c", "d"});
  CHECK(corpus_bleu({bad}, std::vector<std::string>{bad}).score == doctest::Approx(100.0));
  CHECK(corpus_chrf({bad}, std::vector<std::string>{bad}).score == doctest::Approx(100.0));
}

TEST_CASE("the metrics' errors name the op and what was given") {
  const std::vector<std::string> hyps = {"a b c", "d e f", "g h i"};
  const std::vector<std::string> short_stream = {"a b c", "d e f"};
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu(hyps, std::vector<std::vector<std::string>>{hyps, short_stream}),
                     "reference stream 1 has 2 lines", "3 hypotheses");
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu(hyps, std::vector<std::vector<std::string>>{}),
                     "no reference streams");
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu({}, std::vector<std::string>{}), "no hypotheses");
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu(hyps, hyps, {.tokenize = "intl"}), "unknown tokenizer 'intl'", "13a");
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu(hyps, hyps, {.smooth_method = "add-one"}),
                     "unknown smooth_method 'add-one'", "exp");
  CHECK_ERROR_STARTS("[corpus_bleu]", corpus_bleu(hyps, hyps, {.max_ngram_order = 0}), "max_ngram_order", "got 0");
  CHECK_ERROR_STARTS("[sentence_bleu]", sentence_bleu("a", {}), "no references");
  CHECK_ERROR_STARTS("[corpus_chrf]", corpus_chrf(hyps, short_stream), "reference stream 0 has 2 lines",
                     "3 hypotheses");
  CHECK_ERROR_STARTS("[corpus_chrf]", corpus_chrf({}, std::vector<std::string>{}), "no hypotheses");
  CHECK_ERROR_STARTS("[corpus_chrf]", corpus_chrf(hyps, hyps, {.char_order = 0, .word_order = 0}), "char_order 0",
                     "word_order 0");
  CHECK_ERROR_STARTS("[corpus_chrf]", corpus_chrf(hyps, hyps, {.beta = -1}), "beta", "got -1");
  CHECK_ERROR_STARTS("[sentence_chrf]", sentence_chrf("a", {}), "no references");
}

TEST_CASE("the headers' examples") {
  const std::vector<std::string> hyps = {"The cat sat on the mat."};
  const std::vector<std::string> refs = {"The cat is on the mat."};
  CHECK(corpus_bleu(hyps, refs).to_string() ==
        "BLEU = 48.89 85.7/66.7/40.0/25.0 (BP = 1.000 ratio = 1.000 hyp_len = 7 ref_len = 7)");
  CHECK(corpus_chrf(hyps, refs).to_string() == "chrF2 = 67.17");
  CHECK(corpus_chrf(hyps, refs, {.word_order = 2}).to_string() == "chrF2++ = 69.44");
  CHECK(tokenize_13a("It's 1,000.5 dollars, e.g.") == "It's 1,000.5 dollars , e . g .");
}
