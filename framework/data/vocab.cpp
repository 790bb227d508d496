#include "data/vocab.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kiln::data {

std::vector<std::string> split_words(const std::string& sentence) {
  std::istringstream in(sentence);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

Vocab::Vocab(SpecialTokens specials) : specials_(std::move(specials)) {
  for (const std::string* s : {&specials_.pad, &specials_.bos, &specials_.eos, &specials_.unk}) {
    KILN_CHECK(!s->empty() && split_words(*s).size() == 1, "Vocab",
               "special tokens must be single non-empty words, got '", *s, "'");
    KILN_CHECK(!contains(*s), "Vocab", "special token '", *s, "' given twice");
    add(*s);
  }
}

Vocab Vocab::build(const std::vector<std::string>& corpus, int64_t min_freq, SpecialTokens specials) {
  KILN_CHECK(min_freq >= 1, "Vocab::build", "min_freq must be at least 1, got ", min_freq);
  std::vector<std::string> order;
  std::unordered_map<std::string, int64_t> counts;
  for (const std::string& sentence : corpus) {
    for (const std::string& w : split_words(sentence)) {
      if (counts[w]++ == 0) order.push_back(w);
    }
  }
  Vocab v(std::move(specials));
  for (const std::string& w : order) {
    if (counts[w] >= min_freq) v.add(w);
  }
  return v;
}

int64_t Vocab::add(const std::string& word) {
  KILN_CHECK(!word.empty() && split_words(word).size() == 1, "Vocab::add",
             "a token must be one word without spaces, got '", word, "'");
  auto it = ids_.find(word);
  if (it != ids_.end()) return it->second;
  int64_t id = size();
  words_.push_back(word);
  ids_.emplace(word, id);
  return id;
}

int64_t Vocab::id(const std::string& word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? unk_id() : it->second;
}

const std::string& Vocab::word(int64_t id) const {
  KILN_CHECK(id >= 0 && id < size(), "Vocab::word", "id ", id, " is out of range for a vocabulary of ",
             size(), " words");
  return words_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const std::string& sentence, bool add_bos, bool add_eos) const {
  std::vector<int64_t> ids;
  if (add_bos) ids.push_back(bos_id());
  for (const std::string& w : split_words(sentence)) ids.push_back(id(w));
  if (add_eos) ids.push_back(eos_id());
  return ids;
}

std::vector<std::string> Vocab::unknown_words(const std::string& sentence) const {
  std::vector<std::string> unknown;
  for (const std::string& w : split_words(sentence)) {
    if (!contains(w)) unknown.push_back(w);
  }
  return unknown;
}

std::vector<int64_t> Vocab::encode_strict(const std::string& sentence, bool add_bos, bool add_eos) const {
  std::vector<std::string> unknown = unknown_words(sentence);
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& w : unknown) list += (list.empty() ? "'" : ", '") + w + "'";
    KILN_FAIL("Vocab::encode", "unknown word", unknown.size() > 1 ? "s " : " ", list, " (the vocabulary has ",
              size(), " words)");
  }
  return encode(sentence, add_bos, add_eos);
}

std::string Vocab::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string out;
  for (int64_t id : ids) {
    if (skip_special && id == eos_id()) break;
    if (skip_special && (id == pad_id() || id == bos_id())) continue;
    if (!out.empty()) out += ' ';
    out += word(id);
  }
  return out;
}

void Vocab::save(const std::string& path) const {
  std::ofstream out(path);
  KILN_CHECK(out.good(), "Vocab::save", "cannot open '", path, "' for writing");
  for (const std::string& w : words_) out << w << '\n';
  out.flush();
  KILN_CHECK(out.good(), "Vocab::save", "writing '", path, "' failed");
}

Vocab Vocab::load(const std::string& path, SpecialTokens specials) {
  std::ifstream in(path);
  KILN_CHECK(in.good(), "Vocab::load", "cannot open '", path, "'");
  Vocab v(std::move(specials));
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> words = split_words(line);
    KILN_CHECK(words.size() == 1, "Vocab::load", "'", path, "' line ", line_no + 1,
               ": expected one word, got '", line, "'");
    if (line_no < 4) {
      KILN_CHECK(words[0] == v.words_[static_cast<size_t>(line_no)], "Vocab::load", "'", path, "' line ",
                 line_no + 1, ": expected the special token '", v.words_[static_cast<size_t>(line_no)],
                 "', got '", words[0], "'");
    } else {
      KILN_CHECK(!v.contains(words[0]), "Vocab::load", "'", path, "' line ", line_no + 1, ": '", words[0],
                 "' appears twice");
      v.add(words[0]);
    }
    ++line_no;
  }
  KILN_CHECK(line_no >= 4, "Vocab::load", "'", path, "' has ", line_no, " lines, fewer than the 4 special tokens");
  return v;
}

}  // namespace kiln::data
