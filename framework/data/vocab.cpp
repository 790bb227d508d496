#include "data/vocab.h"

#include <filesystem>
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

namespace {

const char* const kRoleNames[] = {"pad", "bos", "eos", "unk"};
const char* const kRoleOps[] = {"Vocab::pad_id", "Vocab::bos_id", "Vocab::eos_id", "Vocab::unk_id"};

std::array<const std::string*, 4> tokens_of(const SpecialTokens& s) { return {&s.pad, &s.bos, &s.eos, &s.unk}; }

// One word: not empty, no whitespace in it or around it.
bool is_one_token(const std::string& s) {
  std::vector<std::string> w = split_words(s);
  return w.size() == 1 && w[0] == s;
}

// A token or a line of a file as a message shows it (not std::quoted, which ADL would
// find for a std::string): in single quotes, control bytes as \xNN, cut after
// 80 bytes (a file may hold anything).
std::string shown(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += s.size() > 80 ? "'... (" + std::to_string(s.size()) + " bytes)" : "'";
  return out;
}

// The special tokens: each one word, no two roles with the same one.
void check_specials(const SpecialTokens& specials, const char* op) {
  const auto tokens = tokens_of(specials);
  for (size_t r = 0; r < tokens.size(); ++r) {
    if (tokens[r]->empty()) continue;  // no token in this role
    KILN_CHECK(is_one_token(*tokens[r]), op, "the ", kRoleNames[r], " token must be one word without spaces, got ",
               shown(*tokens[r]));
    for (size_t q = 0; q < r; ++q) {
      KILN_CHECK(*tokens[q] != *tokens[r], op, shown(*tokens[r]), " is given as both the ", kRoleNames[q],
                 " and the ", kRoleNames[r], " token");
    }
  }
}

}  // namespace

Vocab::Vocab(SpecialTokens specials) : specials_(std::move(specials)) {
  check_specials(specials_, "Vocab");
  for (const std::string* s : tokens_of(specials_)) {
    if (!s->empty()) add(*s);
  }
  set_roles("Vocab", "");
}

Vocab::Vocab(Empty, SpecialTokens specials) : specials_(std::move(specials)) {}

void Vocab::set_roles(const char* op, const std::string& where) {
  const auto tokens = tokens_of(specials_);
  for (size_t r = 0; r < tokens.size(); ++r) {
    role_ids_[r] = -1;
    if (tokens[r]->empty()) continue;
    auto it = ids_.find(*tokens[r]);
    KILN_CHECK(it != ids_.end(), op, "'", where, "' has no line ", shown(*tokens[r]), " (the ", kRoleNames[r],
               " token; the file has ", size(), " tokens)");
    role_ids_[r] = it->second;
  }
}

int64_t Vocab::role_id(Role role) const {
  KILN_CHECK(role_ids_[role] >= 0, kRoleOps[role], "the vocabulary has no ", kRoleNames[role],
             " token (SpecialTokens::", kRoleNames[role], " is empty)");
  return role_ids_[role];
}

bool Vocab::is_special(int64_t id) const {
  if (id < 0) return false;
  for (int64_t r : role_ids_) {
    if (r == id) return true;
  }
  return false;
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
  KILN_CHECK(is_one_token(word), "Vocab::add", "a token must be one word without spaces, got ", shown(word));
  auto it = ids_.find(word);
  if (it != ids_.end()) return it->second;
  int64_t id = size();
  words_.push_back(word);
  ids_.emplace(word, id);
  return id;
}

int64_t Vocab::id(const std::string& word) const {
  auto it = ids_.find(word);
  if (it != ids_.end()) return it->second;
  KILN_CHECK(has_unk(), "Vocab::id", shown(word), " is not in the vocabulary, which has no unk token");
  return unk_id();
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
  auto is = [&](int64_t id, Role role) { return role_ids_[role] >= 0 && id == role_ids_[role]; };
  for (int64_t id : ids) {
    if (skip_special && is(id, kEos)) break;
    if (skip_special && (is(id, kPad) || is(id, kBos))) continue;
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
  check_specials(specials, "Vocab::load");
  std::error_code ec;
  KILN_CHECK(!std::filesystem::is_directory(path, ec), "Vocab::load", "'", path, "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.is_open(), "Vocab::load", "cannot open '", path, "'");
  Vocab v(Empty{}, std::move(specials));
  int64_t line_no = 0;  // counted from 1 in messages; a token's id is its line from 0
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    std::vector<std::string> words = split_words(line);
    KILN_CHECK(!words.empty(), "Vocab::load", "'", path, "' line ", line_no, " is empty (one token a line)");
    KILN_CHECK(words.size() == 1, "Vocab::load", "'", path, "' line ", line_no, ": expected one token, got ",
               words.size(), " words in ", shown(line));
    auto it = v.ids_.find(words[0]);
    KILN_CHECK(it == v.ids_.end(), "Vocab::load", "'", path, "' line ", line_no, ": ", shown(words[0]),
               " appears twice (first on line ", it == v.ids_.end() ? 0 : it->second + 1, ")");
    v.ids_.emplace(words[0], v.size());
    v.words_.push_back(std::move(words[0]));
  }
  KILN_CHECK(!in.bad(), "Vocab::load", "reading '", path, "' failed after line ", line_no);
  KILN_CHECK(line_no > 0, "Vocab::load", "'", path, "' is empty");
  v.set_roles("Vocab::load", path);
  return v;
}

}  // namespace kiln::data
