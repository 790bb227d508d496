#pragma once
// What Hugging Face's BertNormalizer and BertPreTokenizer do to each code point, as
// tables read off PyPI's `tokenizers` (bert_unicode_tables.cpp, written by
// scripts/make_bert_unicode_tables.py, which says what each table holds).
#include <cstddef>

namespace kiln::text::bert_tables {

struct CodeRange {
  char32_t first, last;  // inclusive
};
struct CodeMapping {
  char32_t code;
  const char* text;  // UTF-8
};

extern const CodeRange kRemoved[];
extern const size_t kRemoved_size;
extern const CodeRange kToSpace[];
extern const size_t kToSpace_size;
extern const CodeRange kCjk[];
extern const size_t kCjk_size;
extern const CodeRange kSplitSpace[];
extern const size_t kSplitSpace_size;
extern const CodeRange kPunctuation[];
extern const size_t kPunctuation_size;
extern const CodeMapping kStrip[];
extern const size_t kStrip_size;
extern const CodeMapping kLower[];
extern const size_t kLower_size;

// Whether c lies in one of the sorted ranges.
bool contains(const CodeRange* ranges, size_t n, char32_t c);
// The text c maps to in a table sorted by code, or nullptr where it maps to itself.
const char* lookup(const CodeMapping* table, size_t n, char32_t c);

}  // namespace kiln::text::bert_tables
