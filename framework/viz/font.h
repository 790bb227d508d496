#pragma once
// A 5x8 bitmap font for printable ASCII (32..126), drawn for Kiln. Rows 0..6 hold
// capitals and digits (the baseline is under row 6); row 7 is for descenders
// (g j p q y , ; _). Lowercase letters are 5 rows high (rows 2..6).
//
// Each glyph is written as its picture: up to 8 rows of 5 cells ('#' ink, '.' paper)
// separated by spaces; rows left out at the end are blank. The pictures are turned
// into bits at compile time, and a malformed picture does not compile.
#include <array>
#include <cstdint>

namespace kiln::viz::font {

constexpr int kGlyphWidth = 5;
constexpr int kGlyphHeight = 8;
constexpr int kFirst = 32;
constexpr int kLast = 126;

// clang-format off
constexpr const char* kPictures[kLast - kFirst + 1] = {
  /*   */ "",
  /* ! */ "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#..",
  /* " */ ".#.#. .#.#. .#.#.",
  /* # */ ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#.",
  /* $ */ "..#.. .#### #.#.. .###. ..#.# ####. ..#..",
  /* % */ "##... ##..# ...#. ..#.. .#... #..## ...##",
  /* & */ ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#",
  /* ' */ "..#.. ..#.. .#...",
  /* ( */ "...#. ..#.. .#... .#... .#... ..#.. ...#.",
  /* ) */ ".#... ..#.. ...#. ...#. ...#. ..#.. .#...",
  /* * */ "..... ..#.. #.#.# .###. #.#.# ..#.. .....",
  /* + */ "..... ..#.. ..#.. ##### ..#.. ..#.. .....",
  /* , */ "..... ..... ..... ..... ..... .##.. ..#.. .#...",
  /* - */ "..... ..... ..... ##### ..... ..... .....",
  /* . */ "..... ..... ..... ..... ..... .##.. .##..",
  /* / */ "..... ....# ...#. ..#.. .#... #.... .....",
  /* 0 */ ".###. #...# #..## #.#.# ##..# #...# .###.",
  /* 1 */ "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.",
  /* 2 */ ".###. #...# ....# ...#. ..#.. .#... #####",
  /* 3 */ "##### ...#. ..#.. ...#. ....# #...# .###.",
  /* 4 */ "...#. ..##. .#.#. #..#. ##### ...#. ...#.",
  /* 5 */ "##### #.... ####. ....# ....# #...# .###.",
  /* 6 */ "..##. .#... #.... ####. #...# #...# .###.",
  /* 7 */ "##### ....# ...#. ..#.. .#... .#... .#...",
  /* 8 */ ".###. #...# #...# .###. #...# #...# .###.",
  /* 9 */ ".###. #...# #...# .#### ....# ...#. .##..",
  /* : */ "..... .##.. .##.. ..... .##.. .##.. .....",
  /* ; */ "..... .##.. .##.. ..... .##.. ..#.. .#...",
  /* < */ "...#. ..#.. .#... #.... .#... ..#.. ...#.",
  /* = */ "..... ..... ##### ..... ##### ..... .....",
  /* > */ ".#... ..#.. ...#. ....# ...#. ..#.. .#...",
  /* ? */ ".###. #...# ....# ...#. ..#.. ..... ..#..",
  /* @ */ ".###. #...# ....# .##.# #.#.# #.#.# .###.",
  /* A */ ".###. #...# #...# ##### #...# #...# #...#",
  /* B */ "####. #...# #...# ####. #...# #...# ####.",
  /* C */ ".###. #...# #.... #.... #.... #...# .###.",
  /* D */ "###.. #..#. #...# #...# #...# #..#. ###..",
  /* E */ "##### #.... #.... ####. #.... #.... #####",
  /* F */ "##### #.... #.... ####. #.... #.... #....",
  /* G */ ".###. #...# #.... #.### #...# #...# .####",
  /* H */ "#...# #...# #...# ##### #...# #...# #...#",
  /* I */ ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
  /* J */ "..### ...#. ...#. ...#. ...#. #..#. .##..",
  /* K */ "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
  /* L */ "#.... #.... #.... #.... #.... #.... #####",
  /* M */ "#...# ##.## #.#.# #.#.# #...# #...# #...#",
  /* N */ "#...# #...# ##..# #.#.# #..## #...# #...#",
  /* O */ ".###. #...# #...# #...# #...# #...# .###.",
  /* P */ "####. #...# #...# ####. #.... #.... #....",
  /* Q */ ".###. #...# #...# #...# #.#.# #..#. .##.#",
  /* R */ "####. #...# #...# ####. #.#.. #..#. #...#",
  /* S */ ".#### #.... #.... .###. ....# ....# ####.",
  /* T */ "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
  /* U */ "#...# #...# #...# #...# #...# #...# .###.",
  /* V */ "#...# #...# #...# #...# #...# .#.#. ..#..",
  /* W */ "#...# #...# #...# #.#.# #.#.# #.#.# .#.#.",
  /* X */ "#...# #...# .#.#. ..#.. .#.#. #...# #...#",
  /* Y */ "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#..",
  /* Z */ "##### ....# ...#. ..#.. .#... #.... #####",
  /* [ */ ".###. .#... .#... .#... .#... .#... .###.",
  /* \ */ "..... #.... .#... ..#.. ...#. ....# .....",
  /* ] */ ".###. ...#. ...#. ...#. ...#. ...#. .###.",
  /* ^ */ "..#.. .#.#. #...#",
  /* _ */ "..... ..... ..... ..... ..... ..... ..... #####",
  /* ` */ ".#... ..#.. ...#.",
  /* a */ "..... ..... .###. ....# .#### #...# .####",
  /* b */ "#.... #.... #.##. ##..# #...# #...# ####.",
  /* c */ "..... ..... .###. #.... #.... #...# .###.",
  /* d */ "....# ....# .##.# #..## #...# #...# .####",
  /* e */ "..... ..... .###. #...# ##### #.... .###.",
  /* f */ "..##. .#..# .#... ###.. .#... .#... .#...",
  /* g */ "..... ..... .#### #...# #...# .#### ....# .###.",
  /* h */ "#.... #.... #.##. ##..# #...# #...# #...#",
  /* i */ "..#.. ..... .##.. ..#.. ..#.. ..#.. .###.",
  /* j */ "...#. ..... ..##. ...#. ...#. ...#. #..#. .##..",
  /* k */ "#.... #.... #..#. #.#.. ##... #.#.. #..#.",
  /* l */ ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
  /* m */ "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.#",
  /* n */ "..... ..... #.##. ##..# #...# #...# #...#",
  /* o */ "..... ..... .###. #...# #...# #...# .###.",
  /* p */ "..... ..... ####. #...# #...# ####. #.... #....",
  /* q */ "..... ..... .#### #...# #...# .#### ....# ....#",
  /* r */ "..... ..... #.##. ##..# #.... #.... #....",
  /* s */ "..... ..... .#### #.... .###. ....# ####.",
  /* t */ ".#... .#... ###.. .#... .#... .#..# ..##.",
  /* u */ "..... ..... #...# #...# #...# #..## .##.#",
  /* v */ "..... ..... #...# #...# #...# .#.#. ..#..",
  /* w */ "..... ..... #...# #...# #.#.# #.#.# .#.#.",
  /* x */ "..... ..... #...# .#.#. ..#.. .#.#. #...#",
  /* y */ "..... ..... #...# #...# #...# .#### ....# .###.",
  /* z */ "..... ..... ##### ...#. ..#.. .#... #####",
  /* { */ "...## ..#.. ..#.. .#... ..#.. ..#.. ...##",
  /* | */ "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
  /* } */ "##... ..#.. ..#.. ...#. ..#.. ..#.. ##...",
  /* ~ */ "..... ..... .#... #.#.# ...#. ..... .....",
};
// clang-format on

// Row r of a glyph: bit (4 - c) set when column c has ink.
using Glyph = std::array<uint8_t, kGlyphHeight>;

namespace detail {
// Not constexpr-evaluable when a picture is malformed, which stops the compile.
inline void malformed_picture() {}

constexpr Glyph parse(const char* s) {
  Glyph g{};
  int row = 0, col = 0;
  for (; *s; ++s) {
    if (*s == ' ') {
      if (col != kGlyphWidth) malformed_picture();
      ++row;
      col = 0;
      continue;
    }
    if ((*s != '#' && *s != '.') || col >= kGlyphWidth || row >= kGlyphHeight) malformed_picture();
    if (*s == '#') g[size_t(row)] = uint8_t(g[size_t(row)] | (1u << (kGlyphWidth - 1 - col)));
    ++col;
  }
  if (col != 0 && col != kGlyphWidth) malformed_picture();
  return g;
}

constexpr std::array<Glyph, kLast - kFirst + 1> parse_all() {
  std::array<Glyph, kLast - kFirst + 1> all{};
  for (size_t i = 0; i < all.size(); ++i) all[i] = parse(kPictures[i]);
  return all;
}
}  // namespace detail

constexpr std::array<Glyph, kLast - kFirst + 1> kGlyphs = detail::parse_all();

// ---- Latin-1 letters (U+00C0..U+00FF), for labels such as German or French tokens.
// Each is a base character and a mark, two characters per code point:
//   ` grave ' acute ^ circumflex ~ tilde : diaeresis o ring (rows 0-1, lowercase only:
//   capitals fill rows 0-6, so they keep their base letter, except the umlauts Ä Ö Ü,
//   drawn whole below), , cedilla (row 7), ' ' none; "ss" is ß; '?' has no glyph.
constexpr const char* kLatin1 =
    "A`A'A^A~A:Ao? C,E`E'E^E:I`I'I^I:D N~O`O'O^O~O:x 0 U`U'U^U:Y'? ss"
    "a`a'a^a~a:ao? c,e`e'e^e:i`i'i^i:? n~o`o'o^o~o:? o u`u'u^u:y'? y:";

constexpr const char* kUpperA = ".#.#. .###. #...# #...# ##### #...# #...#";  // Ä
constexpr const char* kUpperO = ".#.#. .###. #...# #...# #...# #...# .###.";  // Ö
constexpr const char* kUpperU = ".#.#. #...# #...# #...# #...# #...# .###.";  // Ü
constexpr const char* kSharpS = ".##.. #..#. #..#. #.##. #...# #...# #.##.";  // ß

namespace detail {
constexpr Glyph ascii(char c) { return kGlyphs[size_t(c - kFirst)]; }

constexpr Glyph latin1(size_t i) {
  char base = kLatin1[2 * i], mark = kLatin1[2 * i + 1];
  if (base == 's') return parse(kSharpS);
  if (mark == ':' && base == 'A') return parse(kUpperA);
  if (mark == ':' && base == 'O') return parse(kUpperO);
  if (mark == ':' && base == 'U') return parse(kUpperU);
  Glyph g = ascii(base);
  const char* top = mark == '`' ? ".#... ..#.."
                  : mark == '\'' ? "...#. ..#.."
                  : mark == '^' ? "..#.. .#.#."
                  : mark == '~' ? ".##.# #.##."
                  : mark == ':' ? ".#.#. ....."
                  : mark == 'o' ? ".##.. .##.."
                  : nullptr;
  if (top && base >= 'a' && base <= 'z') {
    Glyph t = parse(top);
    g[0] = t[0];
    g[1] = t[1];
  }
  if (mark == ',') g[7] = parse("..... ..... ..... ..... ..... ..... ..... ..##.")[7];
  return g;
}

constexpr std::array<Glyph, 64> latin1_all() {
  std::array<Glyph, 64> all{};
  for (size_t i = 0; i < all.size(); ++i) all[i] = latin1(i);
  return all;
}
}  // namespace detail

constexpr std::array<Glyph, 64> kLatin1Glyphs = detail::latin1_all();

// The glyph of a Unicode code point: printable ASCII, the Latin-1 letters above, and
// '?' for anything else.
constexpr const Glyph& glyph(uint32_t cp) {
  if (cp >= kFirst && cp <= kLast) return kGlyphs[cp - kFirst];
  if (cp >= 0xC0 && cp <= 0xFF) return kLatin1Glyphs[cp - 0xC0];
  return kGlyphs['?' - kFirst];
}

}  // namespace kiln::viz::font
