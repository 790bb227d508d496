// libFuzzer target: text::Tokenizer on arbitrary bytes, two ways. An input that starts
// with '{' is a tokenizer.json: from_json must return a tokenizer or throw kiln::Error,
// and a tokenizer it returns must encode a few texts (or refuse them with kiln::Error).
// Any other input is text for a fixed BERT-style tokenizer with added tokens: encode
// must refuse it (not UTF-8) or give an encoding whose offsets lie inside the text, on
// character boundaries, in order, and whose ids decode. Anything else (another
// exception, a sanitizer report) is a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "text/tokenizer.h"

namespace {

void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_tokenizer: %s: %s\n", what, detail.c_str());
  std::abort();
}

const kiln::text::Tokenizer& fixed() {
  static const kiln::text::Tokenizer t = kiln::text::Tokenizer::from_json(R"({
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 12,
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[PAD]": 3, "a": 4, "##a": 5, "b": 6, "##b": 7,
                        "ab": 8, "##ab": 9, ".": 10, "ä": 11, "中": 12, "##c": 13}},
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "added_tokens": [{"id": 1, "content": "[CLS]", "special": true}, {"id": 2, "content": "[SEP]", "special": true},
                     {"id": 14, "content": "<x>", "lstrip": true, "rstrip": true, "normalized": false},
                     {"id": 15, "content": "zz", "single_word": true, "normalized": true}],
    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 1], "sep": ["[SEP]", 2]},
    "decoder": {"type": "WordPiece"},
    "truncation": {"max_length": 24, "strategy": "LongestFirst"},
    "padding": {"strategy": {"Fixed": 8}, "pad_id": 3, "pad_token": "[PAD]"}})");
  return t;
}

bool is_continuation(const std::string& s, size_t i) {
  return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
}

void check_text(const kiln::text::Tokenizer& t, const std::string& text) {
  kiln::text::Encoding e;
  try {
    e = t.encode(text);
  } catch (const kiln::Error&) {
    return;  // not UTF-8, or a truncation that cannot be met
  }
  const size_t n = e.size();
  if (e.type_ids.size() != n || e.tokens.size() != n || e.offsets.size() != n || e.attention_mask.size() != n ||
      e.special_tokens_mask.size() != n || e.sequence_ids.size() != n)
    fail("the encoding's fields differ in length", text.substr(0, 200));
  size_t last_begin = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto [b, end] = e.offsets[i];
    if (e.sequence_ids[i] < 0) continue;  // template and padding tokens: (0, 0)
    if (b > end || end > text.size()) fail("an offset lies outside the text", text.substr(0, 200));
    if (is_continuation(text, b) || is_continuation(text, end)) fail("an offset splits a character", text.substr(0, 200));
    if (b < last_begin) fail("offsets go backwards", text.substr(0, 200));
    last_begin = b;
    if (!t.id_to_token(e.ids[i])) fail("an id outside the vocabulary", text.substr(0, 200));
  }
  (void)t.decode(e.ids);
  (void)t.decode(e.ids, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    try {
      const kiln::text::Tokenizer t = kiln::text::Tokenizer::from_json(input, "<fuzz>");
      for (const char* text : {"", "a b", "Ab. ä 中 [CLS] x", "aaaaaaaaaaaaaaaaaaaaaaaaa"}) check_text(t, text);
    } catch (const kiln::Error&) {
    }
    return 0;
  }
  check_text(fixed(), input);
  return 0;
}
