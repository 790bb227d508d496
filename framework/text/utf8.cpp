#include "text/utf8.h"

namespace kiln::text {

Utf8Char decode_utf8_at(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, i, 1};
  size_t size = 0;
  char32_t value = 0, least = 0;
  if ((b0 & 0xE0) == 0xC0) {
    size = 2, value = b0 & 0x1F, least = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    size = 3, value = b0 & 0x0F, least = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    size = 4, value = b0 & 0x07, least = 0x10000;
  } else {
    return {kNotUtf8, i, 1};  // a continuation byte first, or no UTF-8 lead at all
  }
  if (i + size > s.size()) return {kNotUtf8, i, 1};
  for (size_t k = 1; k < size; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {kNotUtf8, i, 1};
    value = (value << 6) | (b & 0x3F);
  }
  if (value < least || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return {kNotUtf8, i, 1};
  return {value, i, size};
}

std::vector<Utf8Char> decode_utf8(std::string_view s) {
  std::vector<Utf8Char> chars;
  chars.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    chars.push_back(decode_utf8_at(s, i));
    i += chars.back().size;
  }
  return chars;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = decode_utf8_at(s, i);
    if (c.value == kNotUtf8) return false;
    i += c.size;
  }
  return true;
}

}  // namespace kiln::text
