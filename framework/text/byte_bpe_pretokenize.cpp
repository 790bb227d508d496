// The pre-tokenizers of text::BytePairTokenizer: code points as llama.cpp decodes them,
// GPT-2's bytes-to-characters map, and the word splits of byte_bpe_vocab.h's PreSplit.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/byte_bpe_unicode_tables.h"
#include "text/byte_bpe_vocab.h"

namespace kiln::text {

namespace byte_bpe_tables {

uint8_t code_class(uint32_t c) {
  // The Basic Multilingual Plane from a flat table (built once, thread-safe as a static),
  // the rest by binary search over the runs.
  static const std::vector<uint8_t> bmp = [] {
    std::vector<uint8_t> t(0x10000);
    for (size_t i = 0; i < kRuns_size && kRuns[i].first < 0x10000; ++i) {
      const char32_t end = i + 1 < kRuns_size ? std::min<char32_t>(kRuns[i + 1].first, 0x10000) : 0x10000;
      std::fill(t.begin() + kRuns[i].first, t.begin() + end, kRuns[i].value);
    }
    return t;
  }();
  if (c < 0x10000) return bmp[c];
  if (c > 0x10FFFF) return kUnassigned;
  const CodeRun* end = kRuns + kRuns_size;
  const CodeRun* it = std::upper_bound(kRuns, end, c, [](uint32_t v, const CodeRun& r) { return v < r.first; });
  return (it - 1)->value;
}

}  // namespace byte_bpe_tables

namespace detail {

using namespace byte_bpe_tables;

namespace {

// GPT-2's bytes that stand for themselves: ! to ~, ¡ to ¬, ® to ÿ.
bool byte_is_printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

struct ByteCharTables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 256 + 68> from_char{};
  ByteCharTables() {
    uint32_t next = 256;  // the others, in byte order, from U+0100
    from_char.fill(-1);
    for (unsigned b = 0; b < 256; ++b) {
      to_char[b] = byte_is_printable(b) ? b : next++;
      from_char[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteCharTables kByteChars;

}  // namespace

uint32_t byte_to_char(uint8_t b) { return kByteChars.to_char[b]; }

int byte_of_char(uint32_t c) { return c < kByteChars.from_char.size() ? kByteChars.from_char[c] : -1; }

uint32_t decode_code_point_at(std::string_view s, size_t i, size_t& len, bool& past_max) {
  const size_t n = s.size();
  auto cont = [&](size_t k) { return k < n && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80; };
  auto low = [&](size_t k) { return static_cast<uint32_t>(s[k] & 0x3F); };
  const unsigned b = static_cast<unsigned char>(s[i]);
  past_max = false;
  len = 1;
  if (b < 0x80) return b;
  if (b >= 0xC0 && b < 0xE0 && cont(i + 1)) {
    len = 2;
    return ((b & 0x1F) << 6) | low(i + 1);
  }
  if (b >= 0xE0 && b < 0xF0 && cont(i + 1) && cont(i + 2)) {
    len = 3;
    return ((b & 0x0F) << 12) | (low(i + 1) << 6) | low(i + 2);
  }
  if (b >= 0xF0 && b < 0xF8 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
    const uint32_t c = ((b & 0x07) << 18) | (low(i + 1) << 12) | (low(i + 2) << 6) | low(i + 3);
    if (c <= 0x10FFFF) {
      len = 4;
      return c;
    }
    past_max = true;  // where llama.cpp throws (byte_bpe.h)
  }
  return 0xFFFD;
}

void decode_code_points(std::string_view s, std::vector<uint32_t>& out) {
  out.clear();
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    bool past_max = false;
    out.push_back(decode_code_point_at(s, i, len, past_max));
    i += len;
  }
}

namespace {

// llama.cpp runs the pre-tokenizers' simple patterns (\p{N}, [\p{P}$+<=>^~|]+, ...) with
// std::regex over a copy of the text where each code point past ASCII is one byte
// standing for its class, and whitespace for none. So past ASCII a code point is a
// number or punctuation for those patterns only where it is not White_Space.
bool wide_is(uint32_t c, uint8_t category) {
  const uint8_t k = code_class(c);
  return !(k & kWhitespace) && (k & kCategoryMask) == category;
}
bool pattern_number(uint32_t c) { return c < 0x80 ? (c >= '0' && c <= '9') : wide_is(c, kNumber); }
bool pattern_punctuation(uint32_t c) {
  // \p{P} in ASCII as llama.cpp's pattern spells it (all of ASCII's punctuation), plus
  // the symbols the "default" pattern names: $ + < = > ^ ~ |. Not the backtick.
  constexpr std::string_view ascii = "!\"#$%&'()*+,-./:;<=>?@[\\]^_{|}~";
  if (c < 0x80) return c > 0x20 && c < 0x7F && ascii.find(static_cast<char>(c)) != std::string_view::npos;
  return wide_is(c, kPunctuation);
}
bool ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

// Splits each word of `ends` further: every match of `match_len` (the length
// of a match starting at i, 0 for none) becomes a word, and so does each stretch between.
template <class MatchLen>
void split_matches(std::vector<size_t>& ends, MatchLen match_len) {
  std::vector<size_t> out;
  out.reserve(ends.size() * 2);
  size_t begin = 0;
  for (size_t end : ends) {
    size_t last = begin;  // the end of the last word emitted
    for (size_t i = begin; i < end;) {
      const size_t m = match_len(i, end);
      if (m == 0) {
        ++i;
        continue;
      }
      if (i > last) out.push_back(i);
      out.push_back(i + m);
      i += m;
      last = i;
    }
    if (last < end) out.push_back(end);
    begin = end;
  }
  ends.swap(out);
}

template <class Pred>
size_t run_of(const std::vector<uint32_t>& cps, size_t i, size_t end, Pred pred) {
  size_t j = i;
  while (j < end && pred(cps[j])) ++j;
  return j - i;
}

// GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over each word of `ends`, as llama.cpp's hand-written matcher takes it (the
// contractions are case-sensitive; a word's end is the end of the text for the pattern).
void split_gpt2(const std::vector<uint32_t>& cps, std::vector<size_t>& ends) {
  std::vector<size_t> out;
  out.reserve(cps.size() / 2 + ends.size());
  size_t begin = 0;
  for (size_t end : ends) {
    // The class of position p, or 0xFF past the word: none of letter, number or space.
    auto cls = [&](size_t p) -> uint8_t { return p < end ? code_class(cps[p]) : 0xFF; };
    auto is = [](uint8_t k, uint8_t category) { return k != 0xFF && (k & kCategoryMask) == category; };
    auto space = [](uint8_t k) { return k != 0xFF && (k & kWhitespace); };
    auto other = [&](uint8_t k) { return k != 0xFF && !space(k) && !is(k, kLetter) && !is(k, kNumber); };
    size_t pos = begin;
    while (pos < end) {
      const uint32_t c = cps[pos];
      size_t next = pos;
      if (c == '\'' && pos + 1 < end) {
        const uint32_t c1 = cps[pos + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
          next = pos + 2;
        } else if (pos + 2 < end) {
          const uint32_t c2 = cps[pos + 2];
          if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) next = pos + 3;
        }
      }
      if (next == pos) {
        const size_t first = c == ' ' ? pos + 1 : pos;  // an optional space, then the run
        const uint8_t k = cls(first);
        if (is(k, kLetter) || is(k, kNumber) || other(k)) {
          next = first;
          if (is(k, kLetter)) {
            while (is(cls(next), kLetter)) ++next;
          } else if (is(k, kNumber)) {
            while (is(cls(next), kNumber)) ++next;
          } else {
            while (other(cls(next))) ++next;
          }
        } else {
          size_t spaces = 0;
          while (space(cls(pos + spaces))) ++spaces;
          if (spaces > 1 && pos + spaces < end) {
            next = pos + spaces - 1;  // \s+(?!\S): the last space goes with what follows
          } else if (spaces > 0) {
            next = pos + spaces;
          } else {
            next = pos + 1;
          }
        }
      }
      out.push_back(next);
      pos = next;
    }
    begin = end;
  }
  ends.swap(out);
}

}  // namespace

void split_words(PreSplit split, const std::vector<uint32_t>& cps, std::vector<size_t>& ends) {
  ends.assign(1, cps.size());
  if (cps.empty()) {
    ends.clear();
    return;
  }
  switch (split) {
    case PreSplit::DigitsThenGpt2:
      split_matches(ends, [&](size_t i, size_t) -> size_t { return pattern_number(cps[i]) ? 1 : 0; });
      split_gpt2(cps, ends);
      break;
    case PreSplit::Gpt2:
      split_gpt2(cps, ends);
      break;
    case PreSplit::Default:
      split_matches(ends, [&](size_t i, size_t end) { return run_of(cps, i, end, pattern_punctuation); });
      split_gpt2(cps, ends);
      split_matches(ends, [&](size_t i, size_t end) { return run_of(cps, i, end, pattern_number); });
      split_matches(ends, [&](size_t i, size_t end) -> size_t {
        return i + 3 <= end && ascii_digit(cps[i]) && ascii_digit(cps[i + 1]) && ascii_digit(cps[i + 2]) ? 3 : 0;
      });
      break;
  }
}

}  // namespace detail
}  // namespace kiln::text
