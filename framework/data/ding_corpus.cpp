#include "data/ding_corpus.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "data/vocab.h"
#include "text/utf8.h"

namespace kiln::data {
namespace {

constexpr const char* kReadDingCorpus = "read_ding_corpus";

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Punctuation that may close a word after its last alternative ("deed." in "action/deed.").
bool is_closing_punct(char c) { return std::strchr(".,!?:\"')", c) != nullptr && c != '\0'; }

// The punctuation that ends a word ("." of "deed.", "" of "deed").
std::string closing_punct_of(const std::string& word) {
  size_t tail = word.size();
  while (tail > 0 && is_closing_punct(word[tail - 1])) --tail;
  return word.substr(tail);
}

// "went/swung" -> "went", "action/deed." -> "action."; a token with digits ("24/7") stays.
std::string first_slash_alternative(const std::string& token) {
  const size_t slash = token.find('/');
  if (slash == std::string::npos || slash == 0) return token;
  for (char c : token)
    if (is_digit(c)) return token;
  return token.substr(0, slash) + closing_punct_of(token.substr(slash));
}

// The UTF-8 closing quotes a sentence may end with after its . ! or ?.
const char* const kClosingQuotes[] = {"\xE2\x80\x9D" /* ” */, "\xE2\x80\x9C" /* “ */, "\xE2\x80\x99" /* ’ */,
                                      "\xE2\x80\x98" /* ‘ */, "\xC2\xBB" /* » */, "\xC2\xAB" /* « */, "\"", "'"};

bool ends_sentence(std::string s) {
  for (bool stripped = true; stripped && !s.empty();) {
    stripped = false;
    for (const char* q : kClosingQuotes) {
      const size_t n = std::strlen(q);
      if (s.size() > n && s.compare(s.size() - n, n, q) == 0) {
        s.resize(s.size() - n);
        stripped = true;
      }
    }
  }
  return !s.empty() && (s.back() == '.' || s.back() == '!' || s.back() == '?');
}

// "jdm.", "sth." and their kin stand for any object in phrase entries ("addiction to
// sth."): a side with one is a phrase, not a sentence.
bool has_placeholder(const std::vector<std::string>& words) {
  static const char* const kPlaceholders[] = {"etw.", "etw", "jd.", "jdm.", "jdn.", "jds.", "jdm", "jdn", "jds",
                                              "sth.", "sth", "sb.", "sb", "sb.'s", "sb's", "sb.’s", "sb’s"};
  for (const std::string& w : words) {
    std::string bare = w;
    while (!bare.empty() && (bare.back() == ',' || bare.back() == ';' || bare.back() == ':')) bare.pop_back();
    for (const char* p : kPlaceholders)
      if (bare == p) return true;
  }
  return false;
}

// Parentheses around optional words go, the words stay; unbalanced ones reject the side.
bool drop_parentheses(std::string& s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0) return false;
    } else {
      out += c;
    }
  }
  s = std::move(out);
  return depth == 0;
}

void check_options(const DingCorpusOptions& o) {
  KILN_CHECK(o.min_words >= 1 && o.max_words >= o.min_words, kReadDingCorpus, "need 1 <= min_words <= max_words, got min_words ",
             o.min_words, " and max_words ", o.max_words);
  KILN_CHECK(o.valid_per_mille >= 0 && o.test_per_mille >= 0 && o.valid_per_mille + o.test_per_mille < 1000, kReadDingCorpus,
             "valid_per_mille and test_per_mille must be >= 0 and leave some of every 1000 for training, got ",
             o.valid_per_mille, " and ", o.test_per_mille);
  KILN_CHECK(o.max_phrases >= 0, kReadDingCorpus, "max_phrases must be >= 0 (0: all), got ", o.max_phrases);
}

// What an aligned pair of sub-entries was: no sentence (maybe a phrase entry), a sentence
// for training or left out (length, repeat), or a valid or test sentence.
enum class Fate { NotSentence, Sentence, HeldOut };

// One aligned pair of sub-entries: counted, and kept in its split when both sides are
// sentences of the right length whose German side is new.
Fate add_sub_entry(const std::string& de_side, const std::string& en_side, const DingCorpusOptions& o,
                   std::unordered_set<std::string>& seen, ParallelCorpus& out) {
  CorpusCounts& n = out.counts;
  ++n.sub_entries;
  SentencePair p{clean_ding_sentence(de_side), clean_ding_sentence(en_side)};
  if (p.source.empty() || p.target.empty()) {
    ++n.not_sentences;
    return Fate::NotSentence;
  }
  const auto de_words = static_cast<int64_t>(split_words(p.source).size());
  const auto en_words = static_cast<int64_t>(split_words(p.target).size());
  if (de_words < o.min_words || en_words < o.min_words) {
    ++n.too_short;
    return Fate::Sentence;
  }
  if (de_words > o.max_words || en_words > o.max_words) {
    ++n.too_long;
    return Fate::Sentence;
  }
  if (!seen.insert(p.source).second) {
    ++n.duplicates;
    return Fate::Sentence;
  }
  switch (split_of(p.source, o)) {
    case Split::Train: ++n.train; out.train.push_back(std::move(p)); return Fate::Sentence;
    case Split::Valid: ++n.valid; out.valid.push_back(std::move(p)); return Fate::HeldOut;
    case Split::Test: ++n.test; out.test.push_back(std::move(p)); return Fate::HeldOut;
  }
  return Fate::Sentence;
}

// The word and phrase entries of one line (the sub-entries that are not sentences), for
// training, unless the line gave a valid or test sentence.
void add_phrases(const std::vector<std::string>& de, const std::vector<std::string>& en,
                 const std::vector<Fate>& fates, std::unordered_set<std::string>& seen, ParallelCorpus& out) {
  CorpusCounts& n = out.counts;
  bool held_out = false;
  for (Fate f : fates) held_out = held_out || f == Fate::HeldOut;
  for (size_t i = 0; i < fates.size(); ++i) {
    if (fates[i] != Fate::NotSentence) continue;
    SentencePair p{clean_ding_phrase(de[i]), clean_ding_phrase(en[i])};
    if (p.source.empty() || p.target.empty()) continue;  // counted among not_sentences
    if (held_out) {
      ++n.phrases_held_out;
    } else if (!seen.insert(p.source).second) {
      ++n.phrase_duplicates;
    } else {
      ++n.phrases;
      out.phrases.push_back(std::move(p));
    }
  }
}

// The first of every size / max entries, max of them in all, when there are more.
void keep_spread_phrases(ParallelCorpus& out, int64_t max) {
  const auto size = static_cast<int64_t>(out.phrases.size());
  if (max == 0 || size <= max) return;
  std::vector<SentencePair> kept;
  kept.reserve(static_cast<size_t>(max));
  for (int64_t i = 0; i < max; ++i) kept.push_back(std::move(out.phrases[static_cast<size_t>(i * size / max)]));
  out.phrases = std::move(kept);
  out.counts.phrases = max;
  out.counts.phrases_over_max = size - max;
}

// An annotated example sentence ("Das ist alles [ugs.].") is a phrase entry whose German
// side may be another line's valid or test sentence: such entries go too.
void drop_held_out_phrases(ParallelCorpus& out) {
  if (out.phrases.empty()) return;
  std::unordered_set<std::string> held_out;
  for (const auto* split : {&out.valid, &out.test})
    for (const SentencePair& p : *split) held_out.insert(p.source);
  const auto dropped = std::erase_if(out.phrases, [&](const SentencePair& p) { return held_out.count(p.source) > 0; });
  out.counts.phrases -= static_cast<int64_t>(dropped);
  out.counts.phrases_held_out += static_cast<int64_t>(dropped);
}

// {} and [] labels ("Haus {n} [arch.]") dropped with what they hold and the spaces
// before them ("schön [Dt.]." -> "schön."); false when they do not pair up.
bool drop_labels(std::string& s) {
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '{' || c == '[') {
      while (depth == 0 && !out.empty() && out.back() == ' ') out.pop_back();
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth < 0) return false;
    } else if (depth == 0) {
      out += c;
    }
  }
  s = std::move(out);
  return depth == 0;
}

// The words joined by single spaces, each slash alternative cut to its first.
std::string first_alternatives(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    // "students / seniors." -> "students.": the word after a spaced slash is an
    // alternative of the one before; so is a word glued to a slash ("understand
    // /recognise the"). Only its closing punctuation stays.
    if (words[i] == "/" && !out.empty() && i + 1 < words.size()) {
      out += closing_punct_of(words[++i]);
      continue;
    }
    if (words[i].size() > 1 && words[i][0] == '/' && !out.empty()) {
      out += closing_punct_of(words[i]);
      continue;
    }
    if (!out.empty()) out += ' ';
    out += first_slash_alternative(words[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> split_ding_fields(const std::string& s, const std::string& sep) {
  std::vector<std::string> parts;
  size_t at = 0;
  for (size_t hit; (hit = s.find(sep, at)) != std::string::npos; at = hit + sep.size())
    parts.push_back(s.substr(at, hit - at));
  parts.push_back(s.substr(at));
  return parts;
}

uint64_t ding_hash(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

std::string clean_ding_sentence(const std::string& side) {
  // The first of "a; b" alternatives (split_words below drops the spaces around it).
  std::string s = side.substr(0, side.find(';'));
  if (s.find_first_of("{}[]") != std::string::npos) return "";
  if (!drop_parentheses(s)) return "";
  const std::vector<std::string> words = split_words(s);
  // A sentence starts with a capital, a digit or punctuation, never a lower-case letter
  // (word and phrase entries do: "to go", "addiction to sth.").
  if (words.empty() || (words[0][0] >= 'a' && words[0][0] <= 'z') || has_placeholder(words)) return "";
  const std::string out = first_alternatives(words);
  return ends_sentence(out) ? out : "";
}

std::string clean_ding_phrase(const std::string& side) {
  std::string s = side;
  if (!drop_labels(s)) return "";
  s.resize(std::min(s.size(), s.find(';')));
  if (!drop_parentheses(s)) return "";
  return first_alternatives(split_words(s));
}

Split split_of(const std::string& source, const DingCorpusOptions& o) {
  const uint64_t bucket = ding_hash(source) % 1000;
  if (bucket < static_cast<uint64_t>(o.valid_per_mille)) return Split::Valid;
  if (bucket < static_cast<uint64_t>(o.valid_per_mille + o.test_per_mille)) return Split::Test;
  return Split::Train;
}

ParallelCorpus read_ding_corpus(const DingCorpusOptions& o) {
  check_options(o);
  std::ifstream in(o.path, std::ios::binary);
  KILN_CHECK(in.good(), kReadDingCorpus, "cannot open '", o.path,
             "': the Ding German-English dictionary comes with Debian's package trans-de-en "
             "(apt-get install trans-de-en, or scripts/install_deps.sh)");
  ParallelCorpus out;
  CorpusCounts& n = out.counts;
  std::unordered_set<std::string> seen, seen_phrases;
  std::vector<Fate> fates;
  for (std::string line; std::getline(in, line);) {
    ++n.lines;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r") == std::string::npos) { ++n.blank; continue; }
    if (line[0] == '#') { ++n.comments; continue; }
    if (!text::valid_utf8(line)) { ++n.invalid_utf8; continue; }
    const std::vector<std::string> sides = split_ding_fields(line, " :: ");
    if (sides.size() != 2) { ++n.malformed; continue; }
    const std::vector<std::string> de = split_ding_fields(sides[0], " | "), en = split_ding_fields(sides[1], " | ");
    if (de.size() != en.size()) { ++n.malformed; continue; }
    fates.clear();
    for (size_t i = 0; i < de.size(); ++i) fates.push_back(add_sub_entry(de[i], en[i], o, seen, out));
    if (o.phrases) add_phrases(de, en, fates, seen_phrases, out);
  }
  KILN_CHECK(!in.bad(), kReadDingCorpus, "reading '", o.path, "' failed after ", n.lines, " lines");
  drop_held_out_phrases(out);
  keep_spread_phrases(out, o.max_phrases);
  KILN_CHECK(n.train > 0, kReadDingCorpus, "'", o.path, "' gave no training pairs (", n.summary(),
             "): is it the Ding dictionary, lines of \"German :: English\"?");
  return out;
}

std::string CorpusCounts::summary() const {
  std::ostringstream os;
  os << lines << " lines (" << comments << " comments, " << blank << " blank, " << invalid_utf8 << " not UTF-8, "
     << malformed << " malformed); " << sub_entries << " aligned sub-entries: " << not_sentences
     << " not sentences, " << too_short << " too short, " << too_long << " too long, " << duplicates
     << " duplicates; kept " << (train + valid + test) << " = train " << train << " + valid " << valid << " + test "
     << test;
  if (phrases + phrases_held_out + phrase_duplicates > 0) {
    os << "; word and phrase entries for training " << phrases << " (" << phrases_held_out
       << " left out beside valid/test sentences, " << phrase_duplicates << " duplicates";
    if (phrases_over_max > 0) os << ", " << phrases_over_max << " over max_phrases";
    os << ")";
  }
  return os.str();
}

}  // namespace kiln::data
