#pragma once
// A word-level vocabulary: whitespace-separated tokens mapped to ids, with the special
// tokens of the seed notebooks (pad "P" = 0, begin "S", end "E") and an unknown token.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::data {

struct SpecialTokens {
  std::string pad = "P";
  std::string bos = "S";
  std::string eos = "E";
  std::string unk = "<unk>";
};

class Vocab {
 public:
  // Only the special tokens: pad = 0, bos = 1, eos = 2, unk = 3.
  explicit Vocab(SpecialTokens specials = {});

  // The specials, then every word of the corpus in order of first appearance (so the
  // ids do not depend on hashing or sorting), keeping words seen at least min_freq times.
  static Vocab build(const std::vector<std::string>& corpus, int64_t min_freq = 1,
                     SpecialTokens specials = {});

  // Adds a word if new; returns its id.
  int64_t add(const std::string& word);

  int64_t size() const { return static_cast<int64_t>(words_.size()); }
  bool contains(const std::string& word) const { return ids_.count(word) > 0; }
  int64_t id(const std::string& word) const;  // unk_id() for unknown words
  const std::string& word(int64_t id) const;  // throws for an id out of range

  int64_t pad_id() const { return 0; }
  int64_t bos_id() const { return 1; }
  int64_t eos_id() const { return 2; }
  int64_t unk_id() const { return 3; }
  const SpecialTokens& specials() const { return specials_; }
  bool is_special(int64_t id) const { return id >= 0 && id < 4; }

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

  // One word per line, in id order; load checks that the specials come first.
  void save(const std::string& path) const;
  static Vocab load(const std::string& path, SpecialTokens specials = {});

  const std::vector<std::string>& words() const { return words_; }

 private:
  SpecialTokens specials_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, int64_t> ids_;
};

// Splits on runs of whitespace.
std::vector<std::string> split_words(const std::string& sentence);

}  // namespace kiln::data
