#pragma once
// Hugging Face's BertNormalizer and BertPreTokenizer (the text rules of BERT's
// tokenizer.json), character for character as PyPI's `tokenizers` applies them: the
// per-character facts come from tables read off that library (bert_unicode_tables.h).
//
//   AlignedText t = bert_normalize("Héllo WÖRLD", 0, {});  // "hello world", each byte
//   std::vector<TextSpan> words = bert_pre_tokenize(t.text); // knowing its source bytes
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

// A byte range [begin, end).
struct TextSpan {
  size_t begin = 0, end = 0;
};

// Text after normalization: origin[i] is the range of the input's bytes that byte i of
// text came from (every byte of one output character has its input character's range).
struct AlignedText {
  std::string text;
  std::vector<TextSpan> origin;
  void append(std::string_view bytes, TextSpan from);
};

struct BertNormalizerOptions {
  bool clean_text = true;            // drop control characters, whitespace -> ' '
  bool handle_chinese_chars = true;  // a space each side of a CJK ideograph
  bool strip_accents = true;         // NFD, then nonspacing marks dropped
  bool lowercase = true;
};

// `input` (valid UTF-8) normalized; origin ranges are offset by `base` (the input's
// position in a longer text).
AlignedText bert_normalize(std::string_view input, size_t base, const BertNormalizerOptions& options);

// The same text with nothing changed (a tokenizer.json without a normalizer).
AlignedText unnormalized(std::string_view input, size_t base);

// BertPreTokenizer: words split at whitespace (dropped) with each punctuation character a
// word of its own; byte ranges of text (valid UTF-8).
std::vector<TextSpan> bert_pre_tokenize(std::string_view text);

}  // namespace kiln::text
