#include "text/wordpiece.h"

#include "core/error.h"
#include "text/utf8.h"

namespace kiln::text {

WordPiece::WordPiece(std::unordered_map<std::string, int64_t> vocab, std::string unk_token,
                     std::string continuing_subword_prefix, int64_t max_input_chars_per_word)
    : vocab_(std::move(vocab)), unk_(std::move(unk_token)), prefix_(std::move(continuing_subword_prefix)),
      max_chars_(max_input_chars_per_word) {
  auto it = vocab_.find(unk_);
  KILN_CHECK(it != vocab_.end(), "WordPiece", "the unknown token \"", unk_, "\" is not in the vocabulary (",
             vocab_.size(), " pieces)");
  KILN_CHECK(max_chars_ >= 0, "WordPiece", "max_input_chars_per_word must not be negative, got ", max_chars_);
  unk_id_ = it->second;
}

int64_t WordPiece::find(const std::string& piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

void WordPiece::tokenize(std::string_view word, std::vector<WordPieceToken>& out) const {
  // The character boundaries of the word: pieces start and end only there.
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size(); i += decode_utf8_at(word, i).size) bounds.push_back(i);
  bounds.push_back(word.size());
  const int64_t chars = static_cast<int64_t>(bounds.size()) - 1;
  const size_t first = out.size();
  if (chars > max_chars_) {
    out.push_back({unk_id_, 0, word.size()});
    return;
  }
  std::string candidate;
  size_t start = 0;  // index into bounds
  while (start + 1 < bounds.size()) {
    int64_t id = -1;
    size_t end = bounds.size() - 1;
    for (; end > start; --end) {
      candidate.assign(start > 0 ? prefix_ : std::string());
      candidate.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      id = find(candidate);
      if (id >= 0) break;
    }
    if (id < 0) {  // no piece continues the word here: the whole word is unknown
      out.resize(first);
      out.push_back({unk_id_, 0, word.size()});
      return;
    }
    out.push_back({id, bounds[start], bounds[end]});
    start = end;
  }
}

}  // namespace kiln::text
