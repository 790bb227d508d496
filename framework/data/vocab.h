#pragma once
// A word-level vocabulary: whitespace-separated tokens mapped to ids, with special tokens
// in four roles (pad, begin, end, unknown). Vocab() and build() put the specials first,
// ids 0-3 (the seed notebooks' pad "P" = 0, begin "S", end "E", then "<unk>"); a loaded
// file keeps its own order, its special tokens at whatever lines it has them:
//
//   // BERT's vocab.txt: [PAD] on line 0, [UNK] 100, [CLS] 101, [SEP] 102.
//   auto v = data::Vocab::load("vocab.txt", {.pad = "[PAD]", .bos = "[CLS]", .eos = "[SEP]", .unk = "[UNK]"});
//   v.unk_id();  // 100
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::data {

// The token of each role; an empty string: the vocabulary has none in that role (then
// asking for its id, e.g. bos_id(), is an error naming the role). Each token is one word
// without spaces; two roles cannot share a token.
struct SpecialTokens {
  std::string pad = "P";
  std::string bos = "S";
  std::string eos = "E";
  std::string unk = "<unk>";
};

class Vocab {
 public:
  // Only the special tokens, in the order pad, bos, eos, unk: ids 0-3 (the roles left
  // empty are skipped, the others keep that order).
  explicit Vocab(SpecialTokens specials = {});

  // The specials, then every word of the corpus in order of first appearance (so the
  // ids do not depend on hashing or sorting), keeping words seen at least min_freq times.
  static Vocab build(const std::vector<std::string>& corpus, int64_t min_freq = 1,
                     SpecialTokens specials = {});

  // Adds a word if new; returns its id.
  int64_t add(const std::string& word);

  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  bool contains(const std::string& word) const { return ids_.count(word) > 0; }
  // unk_id() for unknown words (an error naming the word when there is no unk token).
  int64_t id(const std::string& word) const;
  const std::string& word(int64_t id) const;  // throws for an id out of range

  // The special tokens' ids; each throws "[Vocab::bos_id] …" naming the role when the
  // vocabulary has no token in it (its SpecialTokens entry is empty).
  int64_t pad_id() const { return role_id(kPad); }
  int64_t bos_id() const { return role_id(kBos); }
  int64_t eos_id() const { return role_id(kEos); }
  int64_t unk_id() const { return role_id(kUnk); }
  bool has_pad() const { return role_ids_[kPad] >= 0; }
  bool has_bos() const { return role_ids_[kBos] >= 0; }
  bool has_eos() const { return role_ids_[kEos] >= 0; }
  bool has_unk() const { return role_ids_[kUnk] >= 0; }
  const SpecialTokens& specials() const { return specials_; }
  // Whether id is the id of a special token (of a role the vocabulary has).
  bool is_special(int64_t id) const;

  // Unknown words become unk_id(); bos/eos are added when asked.
  std::vector<int64_t> encode(const std::string& sentence, bool add_bos = false, bool add_eos = false) const;
  // As encode, but an unknown word is an error naming it (and any others).
  std::vector<int64_t> encode_strict(const std::string& sentence, bool add_bos = false,
                                     bool add_eos = false) const;
  // Words joined by spaces; specials (pad, bos, eos) are dropped when skip_special.
  // Decoding stops at the first eos when skip_special.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = true) const;

  // The words the sentence has that the vocabulary does not.
  std::vector<std::string> unknown_words(const std::string& sentence) const;

  // One word per line, in id order (a word's id is its line, counted from 0).
  void save(const std::string& path) const;
  // A file of one token a line (BERT's vocab.txt, or one save wrote): the token on line i
  // (from 0) gets id i, and each special token of `specials` (those not empty) must be
  // one of the lines, anywhere; its id is its line. Space around a token is dropped (a
  // "\r\n" ending too). Errors name the file and the line: an empty line, a line of two
  // words, a token given twice, a special token the file lacks, a file that cannot be read.
  static Vocab load(const std::string& path, SpecialTokens specials = {});

  const std::vector<std::string>& words() const { return words_; }

 private:
  enum Role { kPad, kBos, kEos, kUnk };
  struct Empty {};
  Vocab(Empty, SpecialTokens specials);  // no words yet; the roles are set by set_roles
  int64_t role_id(Role role) const;
  // Finds each special token among the words (an error naming `op` and `where` when one is missing).
  void set_roles(const char* op, const std::string& where);

  SpecialTokens specials_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, int64_t> ids_;
  std::array<int64_t, 4> role_ids_{-1, -1, -1, -1};  // -1: no token in that role
};

// Splits on runs of whitespace.
std::vector<std::string> split_words(const std::string& sentence);

}  // namespace kiln::data
