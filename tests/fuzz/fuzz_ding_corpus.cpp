// libFuzzer target: data::read_ding_corpus on arbitrary bytes, with the default options
// and with a third of the sentences in each split and the word and phrase entries. Each read must return a corpus or
// throw kiln::Error; anything else (another exception, a sanitizer report) is a crash. A
// corpus it returns must be what its counts say: every line counted once, the splits as
// long as their counts, each pair in the split its German side hashes to, no German
// sentence twice, every side valid UTF-8 with a word count within the options; phrase
// entries valid UTF-8, non-empty, their German sides distinct. The same bytes also go to
// data::read_ding_paraphrases: every set two or more valid sentences within the word
// limits, no sentence in two sets, the lines counted once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/error.h"
#include "data/ding_corpus.h"
#include "data/ding_paraphrases.h"
#include "data/vocab.h"
#include "scratch_file.h"
#include "text/utf8.h"

namespace {

using kiln::data::DingCorpusOptions;
using kiln::data::ParallelCorpus;
using kiln::data::SentencePair;
using kiln::data::Split;

const kiln::fuzz::ScratchFile& in_file() {
  static const kiln::fuzz::ScratchFile file("de-en");
  return file;
}

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_ding_corpus: %s: %s\n", what, detail.c_str());
  std::abort();
}

// What std::getline counts: the pieces between '\n's, a last one without '\n' included.
int64_t lines_of(const std::string& input) {
  int64_t n = 0;
  for (char c : input) n += c == '\n';
  return n + (!input.empty() && input.back() != '\n');
}

void check_side(const std::string& side, const DingCorpusOptions& o) {
  if (!kiln::text::valid_utf8(side)) fail("a kept side is not UTF-8", side);
  const auto words = static_cast<int64_t>(kiln::data::split_words(side).size());
  if (words < o.min_words || words > o.max_words) fail("a kept side's word count is out of range", side);
}

void check(const std::string& input, const DingCorpusOptions& o) {
  ParallelCorpus c;
  try {
    c = kiln::data::read_ding_corpus(o);
  } catch (const kiln::Error&) {
    return;  // refused with Kiln's error (no pairs at all, say): fine
  }
  const kiln::data::CorpusCounts& n = c.counts;
  if (n.lines != lines_of(input)) fail("lines miscounted", std::to_string(n.lines));
  if (n.train != static_cast<int64_t>(c.train.size()) || n.valid != static_cast<int64_t>(c.valid.size()) ||
      n.test != static_cast<int64_t>(c.test.size()))
    fail("a split's count differs from its size", n.summary());
  const int64_t kept = n.train + n.valid + n.test;
  if (n.not_sentences + n.too_short + n.too_long + n.duplicates + kept != n.sub_entries)
    fail("sub-entries do not add up", n.summary());
  std::set<std::string> sources;
  for (const auto& [split, pairs] : {std::pair{Split::Train, &c.train}, std::pair{Split::Valid, &c.valid},
                                     std::pair{Split::Test, &c.test}}) {
    for (const SentencePair& p : *pairs) {
      check_side(p.source, o);
      check_side(p.target, o);
      if (kiln::data::split_of(p.source, o) != split) fail("a pair is in another split than its hash", p.source);
      if (!sources.insert(p.source).second) fail("a German sentence is kept twice", p.source);
    }
  }
  if (!o.phrases && !c.phrases.empty()) fail("phrases without DingCorpusOptions::phrases", n.summary());
  if (n.phrases != static_cast<int64_t>(c.phrases.size())) fail("phrases miscounted", n.summary());
  std::set<std::string> phrase_sources;
  for (const SentencePair& p : c.phrases) {
    for (const std::string* side : {&p.source, &p.target})
      if (side->empty() || !kiln::text::valid_utf8(*side)) fail("a phrase side is empty or not UTF-8", *side);
    if (!phrase_sources.insert(p.source).second) fail("a German phrase is kept twice", p.source);
  }
}

void check_paraphrases(const std::string& input, const std::string& path, int64_t max_words) {
  kiln::data::DingParaphraseOptions o;
  o.path = path;
  o.max_words = max_words;
  kiln::data::ParaphraseSets p;
  try {
    p = kiln::data::read_ding_paraphrases(o);
  } catch (const kiln::Error&) {
    return;
  }
  if (p.lines != lines_of(input)) fail("paraphrases: lines miscounted", std::to_string(p.lines));
  std::set<std::string> seen;
  for (const auto* split : {&p.train, &p.test})
    for (const std::vector<std::string>& set : *split) {
      if (set.size() < 2) fail("paraphrases: a set of fewer than two", p.summary());
      for (const std::string& s : set) {
        if (!kiln::text::valid_utf8(s)) fail("paraphrases: a sentence is not UTF-8", s);
        const auto words = static_cast<int64_t>(kiln::data::split_words(s).size());
        if (words < o.min_words || words > o.max_words) fail("paraphrases: a sentence's length is out of range", s);
        if (!seen.insert(s).second) fail("paraphrases: a sentence in two sets", s);
      }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  in_file().write(data, size);
  DingCorpusOptions o;
  o.path = in_file().path();
  check(input, o);
  o.valid_per_mille = 333;
  o.test_per_mille = 333;
  o.min_words = 1;
  o.max_words = 5;
  o.phrases = true;
  check(input, o);
  check_paraphrases(input, o.path, 40);
  check_paraphrases(input, o.path, 4);
  return 0;
}
