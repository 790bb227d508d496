#pragma once
// The Unicode classes that llama.cpp's byte-level BPE pre-tokenizers ask of a code point
// (text/byte_bpe.h): the first letter of its general category and whether it is
// White_Space, as runs of code points (byte_bpe_unicode_tables.cpp, written by
// scripts/make_byte_bpe_unicode_tables.py from Unicode 15.1.0, llama.cpp's version).
#include <cstddef>
#include <cstdint>

namespace kiln::text::byte_bpe_tables {

// A code point's class: the low three bits are one of these, kWhitespace is added.
enum : uint8_t {
  kUnassigned = 0,   // Cn, and every value past U+10FFFF
  kLetter = 1,       // \p{L}
  kNumber = 2,       // \p{N}
  kPunctuation = 3,  // \p{P}
  kSymbol = 4,       // \p{S}
  kMark = 5,         // \p{M}
  kSeparator = 6,    // \p{Z}
  kOther = 7,        // \p{C} but Cn: controls, format, surrogates, private use
  kCategoryMask = 7,
  kWhitespace = 8,   // White_Space (\s)
};

struct CodeRun {
  char32_t first;  // the run lasts to the next run's first - 1
  uint8_t value;
};

extern const CodeRun kRuns[];
extern const size_t kRuns_size;

// The class of any 32-bit value (past U+10FFFF: kUnassigned).
uint8_t code_class(uint32_t c);

}  // namespace kiln::text::byte_bpe_tables
