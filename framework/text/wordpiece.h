#pragma once
// The WordPiece model of Hugging Face's tokenizer.json (BERT's subwords): a word becomes
// the longest vocabulary piece that starts it, then the longest "##"-prefixed piece that
// continues it, and so on; a word with no such split, or longer than
// max_input_chars_per_word characters, becomes the unknown token whole.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text {

struct WordPieceToken {
  int64_t id;
  size_t begin, end;  // bytes of the word it covers
};

class WordPiece {
 public:
  // vocab: piece -> id (ids need not be dense); unk_token must be in it.
  WordPiece(std::unordered_map<std::string, int64_t> vocab, std::string unk_token,
            std::string continuing_subword_prefix = "##", int64_t max_input_chars_per_word = 100);

  // The pieces of one word (non-empty, valid UTF-8), appended to out.
  void tokenize(std::string_view word, std::vector<WordPieceToken>& out) const;

  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }
  int64_t unk_id() const { return unk_id_; }
  const std::string& continuing_subword_prefix() const { return prefix_; }

 private:
  int64_t find(const std::string& piece) const;  // -1 when absent

  std::unordered_map<std::string, int64_t> vocab_;
  std::string unk_, prefix_;
  int64_t unk_id_ = -1, max_chars_ = 100;
};

}  // namespace kiln::text
