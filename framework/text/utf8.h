#pragma once
// UTF-8 as the text tools read it: code points with their byte spans, and validity.
// Overlong forms, UTF-16 surrogates, values past U+10FFFF and cut-short sequences are not
// UTF-8; decode() makes each such lead byte a character of its own (kNotUtf8), so that a
// metric or tokenizer can go on where a strict reader (valid_utf8) refuses.
//
//   for (const text::Utf8Char& c : text::decode_utf8("Grüße")) { c.value; c.begin; c.size; }
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

// The value of a byte that starts no valid UTF-8 sequence.
constexpr char32_t kNotUtf8 = 0xFFFFFFFF;

struct Utf8Char {
  char32_t value;  // the code point, or kNotUtf8
  size_t begin;    // its first byte in the string
  size_t size;     // its bytes (1 for kNotUtf8)
};

// The character that starts at byte i (i < s.size()).
Utf8Char decode_utf8_at(std::string_view s, size_t i);
// Every character of s, in order.
std::vector<Utf8Char> decode_utf8(std::string_view s);
// Appends code point c as UTF-8 (surrogates too, as 3 bytes; values past U+10FFFF in 4
// bytes, as the lenient decoders that produce them wrote them).
void append_utf8(std::string& out, char32_t c);
// Whether s is valid UTF-8 throughout.
bool valid_utf8(std::string_view s);

}  // namespace kiln::text
