#include "text/bert_normalizer.h"

#include "text/bert_unicode_tables.h"
#include "text/utf8.h"

namespace kiln::text {
namespace tables = bert_tables;

void AlignedText::append(std::string_view bytes, TextSpan from) {
  text.append(bytes);
  origin.insert(origin.end(), bytes.size(), from);
}

namespace {

constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

// A Hangul syllable's canonical decomposition into its two or three jamo (Unicode's
// arithmetic; none of them is a nonspacing mark, so stripping accents keeps them all).
std::string hangul_jamo(char32_t c) {
  const char32_t s = c - kHangulFirst;
  std::string out;
  append_utf8(out, 0x1100 + s / 588);
  append_utf8(out, 0x1161 + (s % 588) / 28);
  if (s % 28 != 0) append_utf8(out, 0x11A7 + s % 28);
  return out;
}

// Appends c lowercased (or as is) to out.
void append_lower(std::string& out, char32_t c, bool lowercase) {
  const char* low = lowercase ? tables::lookup(tables::kLower, tables::kLower_size, c) : nullptr;
  if (low) out += low;
  else append_utf8(out, c);
}

}  // namespace

AlignedText bert_normalize(std::string_view input, size_t base, const BertNormalizerOptions& o) {
  AlignedText out;
  out.text.reserve(input.size());
  out.origin.reserve(input.size());
  std::string piece;
  for (size_t i = 0; i < input.size();) {
    const Utf8Char ch = decode_utf8_at(input, i);
    i += ch.size;
    char32_t c = ch.value;
    const TextSpan from{base + ch.begin, base + ch.begin + ch.size};
    if (o.clean_text) {
      if (tables::contains(tables::kRemoved, tables::kRemoved_size, c)) continue;
      if (tables::contains(tables::kToSpace, tables::kToSpace_size, c)) c = U' ';
    }
    const bool cjk = o.handle_chinese_chars && tables::contains(tables::kCjk, tables::kCjk_size, c);
    // The character after stripping accents (one or more code points), then lowercased
    // code point by code point, as the library applies its steps in that order.
    std::string stripped;
    if (o.strip_accents && c >= kHangulFirst && c <= kHangulLast) stripped = hangul_jamo(c);
    else if (const char* s = o.strip_accents ? tables::lookup(tables::kStrip, tables::kStrip_size, c) : nullptr)
      stripped = s;
    else append_utf8(stripped, c);
    piece.clear();
    for (const Utf8Char& sc : decode_utf8(stripped)) append_lower(piece, sc.value, o.lowercase);
    if (cjk) out.append(" ", from);
    out.append(piece, from);
    if (cjk) out.append(" ", from);
  }
  return out;
}

AlignedText unnormalized(std::string_view input, size_t base) {
  AlignedText out;
  for (size_t i = 0; i < input.size();) {
    const Utf8Char ch = decode_utf8_at(input, i);
    out.append(input.substr(i, ch.size), {base + i, base + i + ch.size});
    i += ch.size;
  }
  return out;
}

std::vector<TextSpan> bert_pre_tokenize(std::string_view text) {
  std::vector<TextSpan> words;
  size_t start = 0;
  bool in_word = false;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char ch = decode_utf8_at(text, i);
    const size_t next = i + ch.size;
    const bool space = tables::contains(tables::kSplitSpace, tables::kSplitSpace_size, ch.value);
    const bool punct = !space && tables::contains(tables::kPunctuation, tables::kPunctuation_size, ch.value);
    if (space || punct) {
      if (in_word) words.push_back({start, i});
      in_word = false;
      if (punct) words.push_back({i, next});
    } else if (!in_word) {
      in_word = true;
      start = i;
    }
    i = next;
  }
  if (in_word) words.push_back({start, text.size()});
  return words;
}

namespace bert_tables {

bool contains(const CodeRange* ranges, size_t n, char32_t c) {
  size_t lo = 0, hi = n;  // the first range whose last >= c
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (ranges[mid].last < c) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && ranges[lo].first <= c;
}

const char* lookup(const CodeMapping* table, size_t n, char32_t c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (table[mid].code < c) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && table[lo].code == c ? table[lo].text : nullptr;
}

}  // namespace bert_tables
}  // namespace kiln::text
