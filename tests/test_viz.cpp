// viz: PNG files read back by an independent decoder written here, heatmaps and line
// plots checked pixel by pixel where their geometry is defined, and the errors.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"
#include "viz/plot.h"
#include "viz/png.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::ScratchDir;
namespace fs = std::filesystem;
using viz::Image;
using viz::Rect;
using viz::Rgb;

namespace {

// ---------------------------------------------------------------- a minimal PNG reader
// Independent of png.cpp and libpng: bitwise CRC, byte-at-a-time Adler, zlib's inflate and
// the PNG filters written out here.

uint32_t ref_crc32(const std::vector<uint8_t>& d, size_t begin, size_t end) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = begin; i < end; ++i) {
    c ^= d[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t ref_adler32(const std::vector<uint8_t>& d) {
  uint32_t a = 1, b = 0;
  for (uint8_t x : d) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

uint32_t be32(const std::vector<uint8_t>& d, size_t at) {
  if (at + 4 > d.size()) throw std::runtime_error("truncated at byte " + std::to_string(at));
  return uint32_t(d[at]) << 24 | uint32_t(d[at + 1]) << 16 | uint32_t(d[at + 2]) << 8 | d[at + 3];
}

struct Decoded {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::vector<std::string> chunks;  // types in file order
};

// Throws std::runtime_error naming what is wrong, so doctest shows it.
Decoded decode_png(const std::vector<uint8_t>& f) {
  auto fail = [](const std::string& why) { throw std::runtime_error("bad PNG: " + why); };
  const uint8_t sig[8] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};
  if (f.size() < 8 || std::memcmp(f.data(), sig, 8) != 0) fail("signature");

  Decoded out;
  std::vector<uint8_t> idat;
  size_t pos = 8;
  bool ended = false;
  while (pos < f.size()) {
    if (ended) fail("data after IEND");
    uint32_t len = be32(f, pos);
    if (pos + 12 + size_t(len) > f.size()) fail("chunk runs past the end");
    std::string type(f.begin() + long(pos) + 4, f.begin() + long(pos) + 8);
    size_t data = pos + 8;
    if (be32(f, data + len) != ref_crc32(f, pos + 4, data + len)) fail("CRC of " + type);
    if (out.chunks.empty() && type != "IHDR") fail("first chunk is " + type);
    out.chunks.push_back(type);
    if (type == "IHDR") {
      if (len != 13) fail("IHDR length");
      out.width = int(be32(f, data));
      out.height = int(be32(f, data + 4));
      if (f[data + 8] != 8 || f[data + 9] != 2 || f[data + 10] != 0 || f[data + 11] != 0 ||
          f[data + 12] != 0)
        fail("IHDR: not 8-bit RGB, deflate, filter 0, no interlace");
    } else if (type == "IDAT") {
      idat.insert(idat.end(), f.begin() + long(data), f.begin() + long(data + len));
    } else if (type == "IEND") {
      if (len != 0) fail("IEND has data");
      ended = true;
    }
    pos = data + len + 4;
  }
  if (!ended) fail("no IEND");

  // zlib header (RFC 1950): deflate, window <= 32K, no preset dictionary, FCHECK.
  if (idat.size() < 6) fail("zlib stream too short");
  uint8_t cmf = idat[0], flg = idat[1];
  if ((cmf & 0x0F) != 8 || (cmf >> 4) > 7) fail("zlib CMF");
  if ((cmf * 256 + flg) % 31 != 0) fail("zlib FCHECK");
  if (flg & 0x20) fail("zlib preset dictionary");

  // deflate (RFC 1951) through zlib's own inflate, which also checks the Adler-32.
  size_t row = size_t(out.width) * 3;
  std::vector<uint8_t> raw(size_t(out.height) * (row + 1) + 1);
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, idat.data(), idat.size()) != Z_OK) fail("zlib stream does not inflate");
  if (raw_size != raw.size() - 1) fail("inflated size");

  // Scanlines: a filter byte (0 none, 1 sub, 2 up, 3 average, 4 Paeth: PNG spec, 9.2)
  // and 3 bytes a pixel, each filtered against its left neighbour a, the pixel above b
  // and the one above-left c.
  out.rgb.assign(row * size_t(out.height), 0);
  for (int y = 0; y < out.height; ++y) {
    const uint8_t filter = raw[size_t(y) * (row + 1)];
    if (filter > 4) fail("filter type " + std::to_string(filter) + " on row " + std::to_string(y));
    const uint8_t* in = &raw[size_t(y) * (row + 1) + 1];
    uint8_t* cur = &out.rgb[size_t(y) * row];
    const uint8_t* up = y > 0 ? cur - row : nullptr;
    for (size_t i = 0; i < row; ++i) {
      const int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = up && i >= 3 ? up[i - 3] : 0;
      int predictor = 0;
      if (filter == 1) predictor = a;
      if (filter == 2) predictor = b;
      if (filter == 3) predictor = (a + b) / 2;
      if (filter == 4) {
        const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = uint8_t(in[i] + predictor);
    }
  }
  return out;
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}


Image random_image(int w, int h, uint32_t seed) {
  Image img(w, h);
  uint32_t s = seed;
  for (auto& b : img.rgb) {
    s = s * 1664525u + 1013904223u;
    b = uint8_t(s >> 24);
  }
  return img;
}

// Appends rather than `"literal" + std::string`, which draws a false -Wrestrict from GCC 12.
std::string cat(std::initializer_list<std::string> parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

std::string str(Rgb c) {
  return cat({"(", std::to_string(c.r), ",", std::to_string(c.g), ",", std::to_string(c.b), ")"});
}

// Every pixel of the rectangle has colour c (returns the first that does not, for messages).
std::string rect_all(const Image& img, int x, int y, int w, int h, Rgb c) {
  for (int yy = y; yy < y + h; ++yy)
    for (int xx = x; xx < x + w; ++xx)
      if (!(img.at(xx, yy) == c))
        return "pixel (" + std::to_string(xx) + "," + std::to_string(yy) + ") is " +
               str(img.at(xx, yy)) + ", expected " + str(c);
  return "";
}

int count_color(const Image& img, Rgb c, int x0 = 0, int y0 = 0, int x1 = -1, int y1 = -1) {
  if (x1 < 0) x1 = img.width;
  if (y1 < 0) y1 = img.height;
  int n = 0;
  for (int y = std::max(y0, 0); y < std::min(y1, img.height); ++y)
    for (int x = std::max(x0, 0); x < std::min(x1, img.width); ++x) n += img.at(x, y) == c;
  return n;
}

constexpr Rgb kInk{30, 30, 30};  // the text colour of plot.cpp
constexpr Rgb kWhite{255, 255, 255};

double luminance(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

}  // namespace

// ================================================================ checksums and PNG
TEST_CASE("crc32 and adler32 give the standard check values and match bitwise references") {
  const std::string check = "123456789";
  const auto* p = reinterpret_cast<const uint8_t*>(check.data());
  CHECK(viz::crc32(p, check.size()) == 0xCBF43926u);
  const std::string wiki = "Wikipedia";
  CHECK(viz::adler32(reinterpret_cast<const uint8_t*>(wiki.data()), wiki.size()) == 0x11E60398u);

  // Long inputs (adler32 folds its sums every 5552 bytes: all-0xFF is the worst case).
  std::vector<uint8_t> ff(100000, 0xFF);
  CHECK(viz::adler32(ff.data(), ff.size()) == ref_adler32(ff));
  Image r = random_image(300, 100, 7);
  CHECK(viz::crc32(r.rgb.data(), r.rgb.size()) == ref_crc32(r.rgb, 0, r.rgb.size()));
  CHECK(viz::adler32(r.rgb.data(), r.rgb.size()) == ref_adler32(r.rgb));

  // Running checksums continue across calls.
  size_t half = 12345;
  uint32_t c1 = viz::crc32(r.rgb.data(), half);
  CHECK(viz::crc32(r.rgb.data() + half, r.rgb.size() - half, c1) == viz::crc32(r.rgb.data(), r.rgb.size()));
  uint32_t a1 = viz::adler32(r.rgb.data(), half);
  CHECK(viz::adler32(r.rgb.data() + half, r.rgb.size() - half, a1) ==
        viz::adler32(r.rgb.data(), r.rgb.size()));
}

TEST_CASE("write_png round-trips pixels through an independent decoder") {
  ScratchDir dir("viz");
  // 1x1; odd sizes; larger ones, whose rows libpng filters in different ways.
  for (const auto& size : {std::tuple{1, 1}, {7, 5}, {3, 40}, {200, 150}, {400, 300}}) {
    const int w = std::get<0>(size), h = std::get<1>(size);
    CAPTURE(w);
    CAPTURE(h);
    Image img = random_image(w, h, uint32_t(w * 1000 + h));
    fs::path file = dir.path / ("img_" + std::to_string(w) + "x" + std::to_string(h) + ".png");
    viz::write_png(file.string(), img);
    std::vector<uint8_t> bytes = read_file(file);
    CHECK(bytes == viz::encode_png(img));
    Decoded d = decode_png(bytes);
    CHECK(d.width == w);
    CHECK(d.height == h);
    CHECK(d.rgb == img.rgb);
    CHECK(d.chunks.front() == "IHDR");
    CHECK(d.chunks.back() == "IEND");
  }
  // Nothing but the images is left behind (no temporary files).
  for (const auto& name : dir.entries()) CHECK(name.find(".tmp") == std::string::npos);
  CHECK(dir.entries().size() == 5);
}

TEST_CASE("write_png deflates: a drawing takes a fraction of its raw bytes, pixels intact") {
  // What the pictures of the examples are like: flat colour, a gradient, lines.
  Image img(640, 480);
  img.fill_rect(40, 40, 560, 400, {240, 240, 250});
  for (int x = 0; x < 640; ++x)
    for (int y = 300; y < 340; ++y) img.set(x, y, Rgb{uint8_t(x * 255 / 639), 80, uint8_t(255 - x * 255 / 639)});
  for (int i = 0; i < 400; ++i) img.set(40 + i, 440 - i, kInk);
  const std::vector<uint8_t> bytes = viz::encode_png(img);
  CHECK(bytes.size() * 20 < img.rgb.size());
  Decoded d = decode_png(bytes);
  CHECK(d.rgb == img.rgb);
}

TEST_CASE("write_png replaces an existing file") {
  ScratchDir dir("viz");
  std::string file = (dir.path / "x.png").string();
  viz::write_png(file, random_image(30, 20, 1));
  Image second = random_image(11, 13, 2);
  viz::write_png(file, second);
  Decoded d = decode_png(read_file(file));
  CHECK(d.width == 11);
  CHECK(d.rgb == second.rgb);
  CHECK(dir.entries() == std::vector<std::string>{"x.png"});
}

TEST_CASE("write_png and Image errors name the function and the values") {
  ScratchDir dir("viz");
  std::string missing = (dir.path / "no_such_dir" / "a.png").string();
  CHECK(error_of([&] { viz::write_png(missing, Image(2, 2)); }) ==
        "[write_png] cannot open '" + missing + "': No such file or directory");

  Image bad(2, 2);
  bad.rgb.resize(5);
  CHECK(error_of([&] { viz::write_png((dir.path / "b.png").string(), bad); }) ==
        "[write_png] image is 2x2 but has 5 bytes of pixels (expected 12)");
  Image empty;
  CHECK(error_of([&] { viz::encode_png(empty); }) ==
        "[write_png] image size 0x0 must be at least 1x1");
  CHECK(dir.entries().empty());

  CHECK(error_of([] { Image(20000, 10); }) ==
        "[Image] image size 20000x10 is too large (at most 16384 pixels a side and 67108864 "
        "pixels in all)");
  CHECK(error_of([] { Image(10000, 10000); }).find("[Image] image size 10000x10000 is too large") == 0);
  CHECK(error_of([] { Image(0, 5); }) == "[Image] image size 0x5 must be at least 1x1");
  CHECK(error_of([] { Image(3, 2).at(3, 0); }) == "[Image::at] pixel (3, 0) outside a 3x2 image");
}

TEST_CASE("Image drawing is clipped to the canvas") {
  Image img(4, 3, Rgb{1, 2, 3});
  CHECK(img.at(3, 2) == Rgb{1, 2, 3});
  img.set(-1, 0, 9, 9, 9);
  img.set(4, 0, 9, 9, 9);
  img.set(0, 3, 9, 9, 9);
  CHECK(count_color(img, Rgb{9, 9, 9}) == 0);
  img.set(2, 1, 200, 100, 50);
  CHECK(img.at(2, 1) == Rgb{200, 100, 50});
  CHECK(img.rgb[(1 * 4 + 2) * 3] == 200);  // row-major, 3 bytes a pixel

  img.fill_rect(-2, -2, 4, 4, Rgb{7, 7, 7});  // covers (0..1, 0..1) only
  CHECK(count_color(img, Rgb{7, 7, 7}) == 4);
  CHECK(rect_all(img, 0, 0, 2, 2, Rgb{7, 7, 7}) == "");

  Image dot(2, 2, Rgb{5, 5, 5});
  img.blit(dot, 3, 2);  // only its top-left pixel lands
  CHECK(count_color(img, Rgb{5, 5, 5}) == 1);
  CHECK(img.at(3, 2) == Rgb{5, 5, 5});

  Image canvas(20, 10);
  viz::draw_line(canvas, 2, 3, 15, 3, Rgb{0, 0, 0});
  CHECK(count_color(canvas, Rgb{0, 0, 0}) == 14);
  CHECK(rect_all(canvas, 2, 3, 14, 1, Rgb{0, 0, 0}) == "");
  Image diag(10, 10);
  viz::draw_line(diag, -5, -5, 20, 20, Rgb{0, 0, 0});  // clipped to the diagonal
  CHECK(count_color(diag, Rgb{0, 0, 0}) == 10);
  for (int i = 0; i < 10; ++i) CHECK(diag.at(i, i) == Rgb{0, 0, 0});
}

// ================================================================ colours and text
TEST_CASE("colormap: ends, clamping, rising luminance, a distinct non-finite colour") {
  CHECK(viz::colormap(0.0) == Rgb{20, 22, 64});
  CHECK(viz::colormap(1.0) == Rgb{250, 230, 60});
  CHECK(viz::colormap(-3.0) == viz::colormap(0.0));
  CHECK(viz::colormap(7.0) == viz::colormap(1.0));
  CHECK(viz::colormap(std::nan("")) == viz::kNonFiniteColor);
  double prev = -1;
  for (int i = 0; i <= 100; ++i) {
    Rgb c = viz::colormap(i / 100.0);
    CAPTURE(i);
    CHECK(luminance(c) > prev);  // ordered: brighter means larger
    prev = luminance(c);
    int dist = std::abs(c.r - viz::kNonFiniteColor.r) + std::abs(c.g - viz::kNonFiniteColor.g) +
               std::abs(c.b - viz::kNonFiniteColor.b);
    CHECK(dist > 150);
  }
}

TEST_CASE("font: every printable character is drawn and all differ") {
  std::set<uint64_t> seen;  // each glyph's 5x8 bitmap as 40 bits
  for (int c = 33; c <= 126; ++c) {
    std::string s(1, char(c));
    CAPTURE(s);
    Image img(8, 10);
    viz::draw_text(img, 1, 1, s, Rgb{0, 0, 0});
    int ink = count_color(img, Rgb{0, 0, 0});
    CHECK(ink > 0);
    // All ink inside the 5x8 glyph box.
    CHECK(count_color(img, Rgb{0, 0, 0}, 1, 1, 6, 9) == ink);
    uint64_t bits = 0;
    for (int y = 1; y < 9; ++y)
      for (int x = 1; x < 6; ++x) bits = bits << 1 | (img.at(x, y) == Rgb{0, 0, 0});
    CHECK(seen.insert(bits).second);
  }
  CHECK(seen.size() == 94);
  Image space(8, 10);
  viz::draw_text(space, 1, 1, " ", Rgb{0, 0, 0});
  CHECK(count_color(space, Rgb{0, 0, 0}) == 0);
}

TEST_CASE("text: width, bounding box, scale, rotation, non-ASCII") {
  CHECK(viz::text_width("") == 0);
  CHECK(viz::text_width("a") == 5);
  CHECK(viz::text_width("abc") == 17);
  CHECK(viz::text_width("abc", 2) == 34);
  CHECK(viz::text_width("f\xC3\xBCr") == 17);      // "für": ü is two bytes, one glyph
  CHECK(viz::text_width("\xE2\x82\xAC 5") == 17);  // "€ 5": € is three bytes, one glyph

  const std::string s = "Wq(9),_";
  const int tw = viz::text_width(s);
  Image h(60, 20);
  viz::draw_text(h, 3, 4, s, Rgb{0, 0, 0});
  int ink = count_color(h, Rgb{0, 0, 0});
  CHECK(ink > 20);
  CHECK(count_color(h, Rgb{0, 0, 0}, 3, 4, 3 + tw, 4 + viz::kCharHeight) == ink);

  // Scale 2 is the same picture with 2x2 blocks.
  Image h2(120, 40);
  viz::draw_text(h2, 0, 0, s, Rgb{0, 0, 0}, 2);
  CHECK(count_color(h2, Rgb{0, 0, 0}) == 4 * ink);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < tw; ++x) CHECK(h2.at(2 * x + 1, 2 * y + 1) == h.at(3 + x, 4 + y));

  // Vertical text is the horizontal one turned 90 degrees counter-clockwise:
  // text pixel (u, v) lands on (x + v, y - u).
  Image v(20, 60);
  const int vx = 5, vy = 50;
  viz::draw_text_vertical(v, vx, vy, s, Rgb{0, 0, 0});
  CHECK(count_color(v, Rgb{0, 0, 0}) == ink);
  for (int u = 0; u < tw; ++u)
    for (int vv = 0; vv < viz::kCharHeight; ++vv) CHECK(v.at(vx + vv, vy - u) == h.at(3 + u, 4 + vv));

  // A character without a glyph (here the euro sign) draws as one '?'.
  Image a(20, 10), b(20, 10);
  viz::draw_text(a, 0, 0, "\xE2\x82\xAC", Rgb{0, 0, 0});
  viz::draw_text(b, 0, 0, "?", Rgb{0, 0, 0});
  CHECK(a.rgb == b.rgb);
  CHECK(count_color(a, Rgb{0, 0, 0}) > 0);
}

TEST_CASE("text: Latin-1 letters are their base letter with the accent on top") {
  auto bitmap = [](const std::string& s) {
    Image img(6, 8);
    viz::draw_text(img, 0, 0, s, Rgb{0, 0, 0});
    std::vector<int> rows(8);
    for (int y = 0; y < 8; ++y)
      for (int x = 0; x < 5; ++x) rows[size_t(y)] = rows[size_t(y)] << 1 | (img.at(x, y) == Rgb{0, 0, 0});
    return rows;
  };
  // ü é à ñ ö ä: rows 2..7 are the plain letter's, rows 0..1 carry the accent.
  for (const auto& letters : {std::pair{"\xC3\xBC", "u"}, {"\xC3\xA9", "e"}, {"\xC3\xA0", "a"},
                               {"\xC3\xB1", "n"}, {"\xC3\xB6", "o"}, {"\xC3\xA4", "a"}}) {
    const char* accented = letters.first;
    const char* plain = letters.second;
    CAPTURE(plain);
    std::vector<int> g = bitmap(accented), base = bitmap(plain);
    CHECK(std::vector<int>(g.begin() + 2, g.end()) == std::vector<int>(base.begin() + 2, base.end()));
    CHECK(g[0] + g[1] > 0);
    CHECK(base[0] + base[1] == 0);
  }
  CHECK(bitmap("\xC3\xA9") != bitmap("\xC3\xA8"));  // é and è differ
  // ç: c with a cedilla in the descender row.
  std::vector<int> c = bitmap("\xC3\xA7"), plain_c = bitmap("c");
  CHECK(std::vector<int>(c.begin(), c.begin() + 7) == std::vector<int>(plain_c.begin(), plain_c.begin() + 7));
  CHECK(c[7] != 0);
  // ß, Ä, Ö, Ü have glyphs of their own, unlike any ASCII one and not '?'.
  for (const char* s : {"\xC3\x9F", "\xC3\x84", "\xC3\x96", "\xC3\x9C"}) {
    std::vector<int> g = bitmap(s);
    CHECK(g != bitmap("?"));
    for (int ch = 33; ch <= 126; ++ch) CHECK(g != bitmap(std::string(1, char(ch))));
  }
  CHECK(bitmap("\xC3\x89") == bitmap("E"));  // É: capitals have no room, the accent goes
}

TEST_CASE("format_number is compact") {
  CHECK(viz::format_number(0) == "0");
  CHECK(viz::format_number(-0.0) == "0");
  CHECK(viz::format_number(0.5) == "0.5");
  CHECK(viz::format_number(12) == "12");
  CHECK(viz::format_number(-3.25) == "-3.25");
  CHECK(viz::format_number(1234.5) == "1.23e3");
  CHECK(viz::format_number(0.00015) == "0.00015");
  CHECK(viz::format_number(1.5e-7) == "1.5e-7");
  CHECK(viz::format_number(3e6) == "3e6");
  CHECK(viz::format_number(std::nan("")) == "nan");
  CHECK(viz::format_number(-std::numeric_limits<double>::infinity()) == "-inf");
}

// ================================================================ heatmaps
namespace {
// Checks that cell (i, j) of `area` (cell pixels a side) is uniformly `c`.
std::string cell_is(const Image& img, const Rect& area, int cell, int i, int j, Rgb c) {
  return rect_all(img, area.x + j * cell, area.y + i * cell, cell, cell, c);
}
}  // namespace

TEST_CASE("heatmap: each cell a square of its colour, min -> colormap(0), max -> colormap(1)") {
  const std::vector<double> vals = {2.0, -1.0, 0.5, 7.0, 3.0, 1.0};
  Tensor m = from_vector(vals, {2, 3});
  for (bool decorated : {false, true}) {
    CAPTURE(decorated);
    viz::HeatmapOptions o;
    o.cell = 5;
    o.colorbar = decorated;
    o.index_ticks = decorated;
    if (decorated) {
      o.title = "values";
      o.row_labels = {"r0", "r1"};
      o.col_labels = {"a", "b", "c"};
      o.x_label = "col";
      o.y_label = "row";
    }
    Rect area;
    Image img = viz::heatmap(m, o, &area);
    CHECK(area.width == 15);
    CHECK(area.height == 10);
    REQUIRE(area.x >= 1);
    REQUIRE(area.y >= 1);
    REQUIRE(area.x + area.width < img.width);
    REQUIRE(area.y + area.height < img.height);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        double v = vals[size_t(i * 3 + j)];
        CHECK(cell_is(img, area, 5, i, j, viz::colormap((v + 1.0) / 8.0)) == "");
      }
    CHECK(cell_is(img, area, 5, 0, 1, viz::colormap(0.0)) == "");  // the min, -1
    CHECK(cell_is(img, area, 5, 1, 0, viz::colormap(1.0)) == "");  // the max, 7
    // The matrix is framed by background, not by more cells.
    CHECK(rect_all(img, area.x - 1, area.y, 1, area.height, kWhite) == "");
    CHECK(rect_all(img, area.x, area.y - 1, area.width, 1, kWhite) == "");
    CHECK(rect_all(img, area.x, area.y + area.height, area.width, 1, kWhite) == "");
    if (decorated) {
      CHECK(count_color(img, kInk) > 50);  // title and labels
      // The colour bar shows both ends of the ramp right of the matrix.
      CHECK(count_color(img, viz::colormap(1.0), area.x + area.width, 0) > 0);
      CHECK(count_color(img, viz::colormap(0.0), area.x + area.width, 0) > 0);
    } else {
      CHECK(count_color(img, kInk) == 0);
      CHECK(count_color(img, viz::colormap(1.0)) == 25);  // one cell, nothing else
    }
  }
}

TEST_CASE("heatmap: labels sit beside their rows and under their columns") {
  Tensor m = zeros({3, 4});
  viz::HeatmapOptions o;
  o.cell = 12;
  o.colorbar = false;
  o.row_labels = {"A", "", "C"};
  o.col_labels = {"x", "", "", "yy"};
  Rect area;
  Image img = viz::heatmap(m, o, &area);
  // Row labels: ink left of the matrix, in the bands of rows 0 and 2 only.
  for (int i = 0; i < 3; ++i) {
    int ink = count_color(img, kInk, 0, area.y + i * 12, area.x, area.y + (i + 1) * 12);
    CAPTURE(i);
    CHECK((ink > 0) == (i != 1));
  }
  CHECK(count_color(img, kInk, 0, 0, area.x, area.y) == 0);
  // Column labels: ink below the matrix, in the bands of columns 0 and 3 only.
  for (int j = 0; j < 4; ++j) {
    int ink = count_color(img, kInk, area.x + j * 12, area.y + area.height, area.x + (j + 1) * 12,
                          img.height);
    CAPTURE(j);
    CHECK((ink > 0) == (j == 0 || j == 3));
  }
  // "yy" is longer than "x": it reaches further down.
  auto lowest_ink = [&](int j) {
    int low = -1;
    for (int y = 0; y < img.height; ++y)
      for (int x = area.x + j * 12; x < area.x + (j + 1) * 12; ++x)
        if (img.at(x, y) == kInk) low = y;
    return low;
  };
  CHECK(lowest_ink(3) > lowest_ink(0));

  // Long labels are cut to max_label_chars, ending in '~'.
  o.row_labels = {"abcdefghijklmnopqrstuvwxyz", "b", "c"};
  o.max_label_chars = 5;
  Rect area2;
  Image cut = viz::heatmap(m, o, &area2);
  Image ref(100, 20);
  viz::draw_text(ref, 0, 0, "abcd~", kInk);
  int ref_ink = count_color(ref, kInk);
  CHECK(count_color(cut, kInk, 0, area2.y, area2.x, area2.y + 12) == ref_ink);
}

TEST_CASE("heatmap: given range clamps, constant matrices, int dtypes") {
  viz::HeatmapOptions o;
  o.cell = 3;
  o.colorbar = false;
  o.vmin = 0.0;
  o.vmax = 10.0;
  Rect area;
  Image img = viz::heatmap(tensor({{-5.0, 5.0, 20.0}}), o, &area);
  CHECK(cell_is(img, area, 3, 0, 0, viz::colormap(0.0)) == "");
  CHECK(cell_is(img, area, 3, 0, 1, viz::colormap(0.5)) == "");
  CHECK(cell_is(img, area, 3, 0, 2, viz::colormap(1.0)) == "");

  viz::HeatmapOptions c;
  c.cell = 2;
  c.colorbar = false;
  img = viz::heatmap(full({2, 2}, 4.0), c, &area);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) CHECK(cell_is(img, area, 2, i, j, viz::colormap(0.5)) == "");

  img = viz::heatmap(arange(6).reshape({2, 3}), c, &area);  // int64 0..5
  CHECK(cell_is(img, area, 2, 0, 0, viz::colormap(0.0)) == "");
  CHECK(cell_is(img, area, 2, 0, 2, viz::colormap(0.4)) == "");
  CHECK(cell_is(img, area, 2, 1, 2, viz::colormap(1.0)) == "");

  // A non-contiguous view is drawn as its logical matrix.
  img = viz::heatmap(arange(6).reshape({2, 3}).t(), c, &area);  // (3, 2): [[0,3],[1,4],[2,5]]
  CHECK(area.width == 4);
  CHECK(area.height == 6);
  CHECK(cell_is(img, area, 2, 0, 1, viz::colormap(0.6)) == "");
  CHECK(cell_is(img, area, 2, 2, 0, viz::colormap(0.4)) == "");
}

TEST_CASE("heatmap: a range wider than the largest double still spans the ramp") {
  viz::HeatmapOptions o{.cell = 2, .colorbar = true};
  Rect area;
  Image img = viz::heatmap(from_vector(std::vector<double>{-1e308, 0, 1e308}, {1, 3}), o, &area);
  CHECK(cell_is(img, area, 2, 0, 0, viz::colormap(0.0)) == "");
  CHECK(cell_is(img, area, 2, 0, 1, viz::colormap(0.5)) == "");
  CHECK(cell_is(img, area, 2, 0, 2, viz::colormap(1.0)) == "");
}

TEST_CASE("heatmap: bool masks render exactly two colours") {
  // A subsequence (causal) mask: true on and below the diagonal.
  Tensor mask = tensor({{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 1, 1, 0}, {1, 1, 1, 1}}, kBool);
  REQUIRE(mask.dtype() == kBool);
  viz::HeatmapOptions o;
  o.cell = 4;
  Rect area;
  Image img = viz::heatmap(mask, o, &area);
  std::set<std::tuple<int, int, int>> colours;
  for (int y = area.y; y < area.y + area.height; ++y)
    for (int x = area.x; x < area.x + area.width; ++x) {
      Rgb c = img.at(x, y);
      colours.insert({c.r, c.g, c.b});
    }
  CHECK(colours.size() == 2);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      CHECK(cell_is(img, area, 4, i, j, j <= i ? viz::colormap(1.0) : viz::colormap(0.0)) == "");
  // The legend says which is which, right of the matrix.
  CHECK(count_color(img, kInk, area.x + area.width + 8, 0) > 0);

  // An all-false padding mask is still colormap(0), not the middle of the ramp.
  Rect a2;
  Image none = viz::heatmap(zeros({2, 5}, kBool), o, &a2);
  CHECK(cell_is(none, a2, 4, 1, 4, viz::colormap(0.0)) == "");
}

TEST_CASE("heatmap: NaN and inf cells are magenta and do not stretch the range") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor m = from_vector(std::vector<double>{0.0, std::nan(""), 1.0, -inf, 0.5, inf}, {2, 3});
  viz::HeatmapOptions o;
  o.cell = 4;
  Rect area;
  Image img = viz::heatmap(m, o, &area);
  CHECK(cell_is(img, area, 4, 0, 0, viz::colormap(0.0)) == "");
  CHECK(cell_is(img, area, 4, 0, 1, viz::kNonFiniteColor) == "");
  CHECK(cell_is(img, area, 4, 0, 2, viz::colormap(1.0)) == "");
  CHECK(cell_is(img, area, 4, 1, 0, viz::kNonFiniteColor) == "");
  CHECK(cell_is(img, area, 4, 1, 1, viz::colormap(0.5)) == "");
  CHECK(cell_is(img, area, 4, 1, 2, viz::kNonFiniteColor) == "");
  // The colour bar explains the magenta with a swatch of its own.
  CHECK(count_color(img, viz::kNonFiniteColor, area.x + area.width, 0) > 0);
}

TEST_CASE("heatmap: auto cell size and sparse labels for many rows") {
  Rect area;
  Image img = viz::heatmap(zeros({50, 128}), {}, &area);
  CHECK(area.width == 128 * 4);  // 512 / 128
  CHECK(area.height == 50 * 4);

  viz::HeatmapOptions o;
  o.cell = 3;
  o.colorbar = false;
  o.index_ticks = false;
  for (int i = 0; i < 30; ++i) o.row_labels.push_back(cat({"r", std::to_string(i)}));
  img = viz::heatmap(zeros({30, 2}), o, &area);
  // Cells of 3 px and lines of 9: every 3rd label is drawn (r0, r3, ..., r27), so the
  // ink left of the matrix is exactly theirs, with no overlaps.
  int expected_ink = 0;
  for (int i = 0; i < 30; i += 3) {
    Image one(40, 10);
    viz::draw_text(one, 0, 0, cat({"r", std::to_string(i)}), kInk);
    expected_ink += count_color(one, kInk);
  }
  CHECK(count_color(img, kInk, 0, 0, area.x, img.height) == expected_ink);
  for (int i = 0; i < 30; i += 3)  // each drawn label crosses its row's band
    CHECK(count_color(img, kInk, 0, area.y + i * 3, area.x, area.y + i * 3 + 3) > 0);
}

TEST_CASE("heatmap: without labels, rows and columns are numbered at round steps") {
  viz::HeatmapOptions o;
  o.cell = 4;
  o.colorbar = false;
  Rect area;
  Image img = viz::heatmap(zeros({30, 40}), o, &area);
  // Rows: lines of 10 px need a step of 5 cells of 4 px: 0, 5, ..., 25.
  auto ink_left = [&](int y0, int y1) { return count_color(img, kInk, 0, y0, area.x, y1); };
  for (int i = 0; i < 30; i += 5) CHECK(ink_left(area.y + i * 4, area.y + i * 4 + 4) > 0);
  CHECK(ink_left(area.y + 2 * 4, area.y + 4 * 4) == 0);  // rows 2..3: between "0" and "5"
  // Columns: "39" and a gap need 17 px, a step of 5 columns: 0, 5, ..., 35.
  auto ink_below = [&](int x0, int x1) { return count_color(img, kInk, x0, area.y + area.height, x1, img.height); };
  for (int j = 0; j < 40; j += 5) CHECK(ink_below(area.x + j * 4, area.x + j * 4 + 4) > 0);
  CHECK(ink_below(area.x + 2 * 4, area.x + 4 * 4) == 0);
  // The numbers themselves: the row label of row 25 is "25".
  Image ref(20, 10);
  viz::draw_text(ref, 0, 0, "25", kInk);
  CHECK(ink_left(area.y + 25 * 4 - 2, area.y + 25 * 4 + 7) == count_color(ref, kInk));

  o.index_ticks = false;
  img = viz::heatmap(zeros({30, 40}), o, &area);
  CHECK(count_color(img, kInk) == 0);
}

TEST_CASE("heatmap_grid: panels in a grid with one shared colour range") {
  std::vector<Tensor> mats;
  for (int k = 0; k < 5; ++k) mats.push_back(full({3, 4}, double(k)));
  viz::HeatmapOptions o;
  o.cell = 6;
  o.colorbar = false;  // its ramp would hold the panels' colours too
  o.title = "attention";
  o.row_labels = {"a", "b", "c"};
  o.col_labels = {"w", "x", "y", "z"};
  Rect area;
  Image img = viz::heatmap_grid(mats, {"head 0", "head 1", "head 2", "head 3", "head 4"}, 2, o, &area);
  CHECK(area.width == 24);
  CHECK(area.height == 18);
  CHECK(rect_all(img, area.x, area.y, 24, 18, viz::colormap(0.0)) == "");
  // Panel k has the colour of k / 4 everywhere; find each by its colour.
  std::vector<std::pair<int, int>> corner;
  for (int k = 0; k < 5; ++k) {
    Rgb c = viz::colormap(k / 4.0);
    int cx = -1, cy = -1;
    for (int y = 0; y < img.height && cx < 0; ++y)
      for (int x = 0; x < img.width; ++x)
        if (img.at(x, y) == c) {
          cx = x, cy = y;
          break;
        }
    CAPTURE(k);
    REQUIRE(cx >= 0);
    CHECK(rect_all(img, cx, cy, 24, 18, c) == "");
    CHECK(count_color(img, c, 0, 0, img.width, img.height) >= 24 * 18);
    corner.push_back({cx, cy});
  }
  CHECK(corner[0] == std::pair{area.x, area.y});
  // Two columns: 1 right of 0, 2 under 0, 3 under 1, 4 under 2.
  CHECK(corner[1].second == corner[0].second);
  CHECK(corner[1].first > corner[0].first + 24);
  CHECK(corner[2].first == corner[0].first);
  CHECK(corner[2].second > corner[0].second + 18);
  CHECK(corner[3] == std::pair{corner[1].first, corner[2].second});
  CHECK(corner[4].first == corner[0].first);
  CHECK(corner[4].second > corner[2].second + 18);

  // The 3-D overload draws the same picture.
  Tensor stack = zeros({5, 3, 4});
  for (int k = 0; k < 5; ++k) stack.select(0, k).fill_(double(k));
  Image img3 = viz::heatmap_grid(stack, {"head 0", "head 1", "head 2", "head 3", "head 4"}, 2, o);
  CHECK(img3.width == img.width);
  CHECK(img3.height == img.height);
  CHECK(img3.rgb == img.rgb);
}

TEST_CASE("heatmap errors name the function and what was given") {
  CHECK(error_of([] { viz::heatmap(ones({3})); }) == "[heatmap] expected a 2-D tensor, got shape (3,)");
  CHECK(error_of([] { viz::heatmap(ones({2, 3, 4})); }) ==
        "[heatmap] expected a 2-D tensor, got shape (2, 3, 4)");
  CHECK(error_of([] { viz::heatmap(zeros({0, 3})); }) == "[heatmap] tensor of shape (0, 3) is empty");
  CHECK(error_of([] { viz::heatmap(Tensor()); }) == "[heatmap] tensor is undefined");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.row_labels = {"a", "b"}}); }) ==
        "[heatmap] 2 row_labels for 3 rows");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.col_labels = {"a", "b", "c"}}); }) ==
        "[heatmap] 3 col_labels for 2 columns");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.cell = 300}); }) ==
        "[heatmap] cell must be in 1..256 (0: auto), got 300");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.cell = -1}); }) ==
        "[heatmap] cell must be in 1..256 (0: auto), got -1");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.vmin = 2.0, .vmax = 1.0}); }) ==
        "[heatmap] vmin 2 is greater than vmax 1");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.vmin = std::nan("")}); }) ==
        "[heatmap] vmin must be finite, got nan");
  CHECK(error_of([] { viz::heatmap(ones({3, 2}), {.max_label_chars = 0}); }) ==
        "[heatmap] max_label_chars must be >= 1, got 0");
  CHECK(error_of([] { viz::heatmap(ones({1, 20000}), {.cell = 1}); })
            .find("[heatmap] image size 20000x1 is too large") == 0);
  CHECK(error_of([] { viz::heatmap(ones({1000, 1000}), {.cell = 100}); })
            .find("[heatmap] image size 100000x100000 is too large") == 0);

  CHECK(error_of([] { viz::heatmap_grid(std::vector<Tensor>{}); }) == "[heatmap_grid] no matrices to draw");
  CHECK(error_of([] { viz::heatmap_grid({ones({2, 2}), ones({2, 3})}); }) ==
        "[heatmap_grid] matrix 1 has shape (2, 3) but matrix 0 has (2, 2)");
  CHECK(error_of([] { viz::heatmap_grid({ones({2, 2}), ones({2})}); }) ==
        "[heatmap_grid] matrix 1: expected a 2-D tensor, got shape (2,)");
  CHECK(error_of([] { viz::heatmap_grid({ones({2, 2}), ones({2, 2})}, {"only one"}); }) ==
        "[heatmap_grid] 1 titles for 2 matrices");
  CHECK(error_of([] { viz::heatmap_grid({ones({2, 2}), ones({2, 2})}, {}, -1); }) ==
        "[heatmap_grid] cols must be >= 0 (0: auto), got -1");
  CHECK(error_of([] { viz::heatmap_grid(ones({2, 2, 2, 2})); }) ==
        "[heatmap_grid] expected a 3-D tensor (N, rows, cols), got shape (2, 2, 2, 2)");
}

// ================================================================ line plots
namespace {
struct Column {
  int n = 0;
  double mean_y = 0;
};
// Per column of the area: how many pixels of colour c and their mean row.
std::vector<Column> columns_of(const Image& img, const Rect& a, Rgb c) {
  std::vector<Column> cols(size_t(a.width));
  for (int x = a.x; x < a.x + a.width; ++x) {
    Column& col = cols[size_t(x - a.x)];
    for (int y = a.y; y < a.y + a.height; ++y)
      if (img.at(x, y) == c) {
        ++col.n;
        col.mean_y += y;
      }
    if (col.n) col.mean_y /= col.n;
  }
  return cols;
}
}  // namespace

TEST_CASE("line_plot: a decreasing series is drawn going down, across the whole axes") {
  std::vector<double> ys;
  for (int i = 0; i < 200; ++i) ys.push_back(3.0 * std::exp(-i / 40.0) + 0.1);
  const Rgb red{255, 0, 0};
  viz::LinePlotOptions o;
  o.title = "training loss";
  Rect a;
  Image img = viz::line_plot({viz::Series("", ys, {}, red)}, o, &a);
  CHECK(img.width == 640);
  CHECK(img.height == 400);
  REQUIRE(a.width > 300);
  REQUIRE(a.height > 200);

  // Everything red lies inside the axes box.
  int red_total = count_color(img, red);
  CHECK(red_total > 200);
  CHECK(count_color(img, red, a.x, a.y, a.x + a.width, a.y + a.height) == red_total);

  std::vector<Column> cols = columns_of(img, a, red);
  int first = -1, last = -1;
  double prev = -1;
  bool monotone = true;
  for (int i = 0; i < a.width; ++i) {
    if (!cols[size_t(i)].n) continue;
    if (first < 0) first = i;
    last = i;
    if (cols[size_t(i)].mean_y < prev - 1.0) monotone = false;  // a 2-px brush jitters by < 1
    prev = std::max(prev, cols[size_t(i)].mean_y);
  }
  CHECK(monotone);
  CHECK(first <= 1);  // x range is the data's: the first point is on the left edge
  CHECK(last >= a.width - 2);
  // The y range is the data's padded by 5%: first point near the top, last near the bottom.
  double span = (ys.front() - ys.back()) * 1.1;
  double top_expected = a.y + 0.05 * (ys.front() - ys.back()) / span * (a.height - 1);
  CHECK(std::abs(cols[size_t(first)].mean_y - top_expected) < 2.5);
  CHECK(std::abs(cols[size_t(last)].mean_y - (a.y + a.height - 1 - (top_expected - a.y))) < 2.5);

  // Ticks, labels, title: there is text, and more than two colours.
  CHECK(count_color(img, kInk) > 100);
  CHECK(count_color(img, kInk, 0, 0, a.x, img.height) > 20);  // y tick labels
  CHECK(count_color(img, kInk, 0, a.y + a.height + 1, img.width, img.height) > 20);  // x ticks
}

TEST_CASE("line_plot: values map linearly (and logarithmically) onto the given y range") {
  const Rgb c{255, 0, 0};
  viz::LinePlotOptions o;
  o.y_min = 0.0;
  o.y_max = 10.0;
  o.line_width = 1;
  Rect a;
  Image img = viz::line_plot({viz::Series("", {5, 5, 5}, {}, c)}, o, &a);
  int mid = int(std::lround(a.y + 0.5 * (a.height - 1)));
  // A horizontal line at mid: every column of the box holds it.
  for (int x = a.x; x < a.x + a.width; ++x) CHECK(img.at(x, mid) == c);

  // log_y: 1, 10, 100, 1000 on [1, 1000] are evenly spaced (markers: few points).
  o.log_y = true;
  o.y_min = 1.0;
  o.y_max = 1000.0;
  img = viz::line_plot({viz::Series("", {1, 10, 100, 1000}, {}, c)}, o, &a);
  for (int i = 0; i < 4; ++i) {
    int x = int(std::lround(a.x + i / 3.0 * (a.width - 1)));
    int y = int(std::lround(a.y + (1.0 - i / 3.0) * (a.height - 1)));
    CAPTURE(i);
    CHECK(img.at(x, y) == c);
  }
  // A point outside the given range is clipped, never drawn outside the box.
  o.y_max = 100.0;
  img = viz::line_plot({viz::Series("", {1, 10, 1e6}, {}, c)}, o, &a);
  CHECK(count_color(img, c) == count_color(img, c, a.x, a.y, a.x + a.width, a.y + a.height));
  CHECK(count_color(img, c) > 0);
}

TEST_CASE("line_plot: several series with xs, a legend and gaps at NaN") {
  std::vector<double> train, valid, valid_x;
  for (int i = 0; i < 100; ++i) train.push_back(2.0 / (1 + i * 0.1));
  for (int i = 0; i < 100; i += 20) {
    valid.push_back(2.2 / (1 + i * 0.1));
    valid_x.push_back(i);
  }
  Rect a;
  Image img = viz::line_plot({{"train", train}, {"valid", valid, valid_x}}, {}, &a);
  const Rgb blue{0, 114, 178}, orange{230, 97, 0};  // the first two colours of the palette
  CHECK(count_color(img, blue) > 100);
  CHECK(count_color(img, orange) > 50);
  // Markers (5 points <= 40) at the predicted places: x = 0..99 over the width.
  double ylo = 1e9, yhi = -1e9;
  for (double v : train) ylo = std::min(ylo, v), yhi = std::max(yhi, v);
  for (double v : valid) ylo = std::min(ylo, v), yhi = std::max(yhi, v);
  double pad = 0.05 * (yhi - ylo);
  ylo -= pad, yhi += pad;
  for (size_t i = 0; i < valid.size(); ++i) {
    int x = int(std::lround(a.x + valid_x[i] / 99.0 * (a.width - 1)));
    int y = int(std::lround(a.y + (yhi - valid[i]) / (yhi - ylo) * (a.height - 1)));
    CAPTURE(i);
    CHECK(img.at(x, y) == orange);
  }
  // The legend (top right, inside the box) has both swatches and the labels.
  int lx = a.x + a.width / 2, ly = a.y, rx = a.x + a.width, ry = a.y + 50;
  CHECK(count_color(img, kInk, lx, ly, rx, ry) > 20);
  CHECK(count_color(img, blue, lx, ly, rx, ry) >= 18);
  CHECK(count_color(img, orange, lx, ly, rx, ry) >= 18);

  // Without labels there is no legend: no text inside the box.
  Image plain = viz::line_plot(train, {}, &a);
  CHECK(count_color(plain, kInk, a.x, a.y, a.x + a.width, a.y + a.height) == 0);

  // NaN breaks the line: nothing drawn halfway between the points around it.
  const Rgb c{255, 0, 0};
  viz::LinePlotOptions o;
  o.line_width = 1;
  Image gap = viz::line_plot({viz::Series("", {1, 2, std::nan(""), 4, 5}, {}, c)}, o, &a);
  std::vector<Column> cols = columns_of(gap, a, c);
  auto col_at = [&](double x) { return size_t(std::lround(x / 4.0 * (a.width - 1))); };
  CHECK(cols[col_at(0.5)].n > 0);  // the segment 0-1 is there
  CHECK(cols[col_at(2.0)].n == 0);  // the gap
  CHECK(cols[col_at(3.5)].n > 0);
}

TEST_CASE("line_plot: a single point, and values near the largest double") {
  Rect a;
  Image img = viz::line_plot(std::vector<double>{5.0}, {}, &a);
  const Rgb blue{0, 114, 178};
  CHECK(img.at(a.x + (a.width - 1) / 2, a.y + (a.height - 1) / 2) == blue);  // centred marker
  CHECK(count_color(img, blue) > 0);
  CHECK(count_color(img, blue) < 50);

  img = viz::line_plot(std::vector<double>{1e307, -1e307, 1e307}, {}, &a);
  CHECK(count_color(img, blue) > 100);
}

TEST_CASE("line_plot errors name the function and what was given") {
  CHECK(error_of([] { viz::line_plot({-1e308, 1e308}); }) ==
        "[line_plot] y values span [-1e+308, 1e+308], too wide to plot");
  CHECK(error_of([] { viz::line_plot({{"", {1, 2}, {-1e308, 1e308}}}); }) ==
        "[line_plot] x values span [-1e+308, 1e+308], too wide to plot");
  CHECK(error_of([] { viz::line_plot(std::vector<viz::Series>{}); }) == "[line_plot] no series to plot");
  CHECK(error_of([] { viz::line_plot(std::vector<double>{}); }) ==
        "[line_plot] nothing to plot: no series has a finite y value");
  CHECK(error_of([] { viz::line_plot({std::nan(""), std::nan("")}); }) ==
        "[line_plot] nothing to plot: no series has a finite y value");
  CHECK(error_of([] { viz::line_plot({-1.0, 0.0}, {.log_y = true}); }) ==
        "[line_plot] nothing to plot: no series has a finite, positive y value");
  CHECK(error_of([] { viz::line_plot({{"train", {1, 2, 3}, {0, 1}}}); }) ==
        "[line_plot] series 0 ('train') has 2 xs for 3 ys");
  CHECK(error_of([] { viz::line_plot({{"a", {1}}, {"b", {1, 2}, {0, std::nan("")}}}); }) ==
        "[line_plot] xs of series 1 ('b') must be finite, got nan at index 1");
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.width = 100, .height = 50}); }) ==
        "[line_plot] size 100x50 is too small (at least 160x120)");
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.width = 100000}); })
            .find("[line_plot] image size 100000x400 is too large") == 0);
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.line_width = 0}); }) ==
        "[line_plot] line_width must be in 1..8, got 0");
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.y_min = 3.0, .y_max = 1.0}); }) ==
        "[line_plot] y_min 3 must be less than y_max 1");
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.log_y = true, .y_min = -1.0}); }) ==
        "[line_plot] log_y needs y_min > 0, got -1");
  CHECK(error_of([] { viz::line_plot({1.0, 2.0}, {.y_max = std::nan("")}); }) ==
        "[line_plot] y_max must be finite, got nan");
}

// ================================================================ files
TEST_CASE("save_heatmap, save_heatmap_grid and save_line_plot write what the plots draw") {
  ScratchDir dir("viz");
  Tensor m = from_vector(std::vector<double>{0, 1, 2, 3, 4, 5}, {2, 3});
  viz::HeatmapOptions o{.title = "m", .cell = 4};

  std::string f1 = (dir.path / "h.png").string();
  viz::save_heatmap(f1, m, o);
  Image h = viz::heatmap(m, o);
  Decoded d = decode_png(read_file(f1));
  CHECK(d.width == h.width);
  CHECK(d.height == h.height);
  CHECK(d.rgb == h.rgb);

  std::string f2 = (dir.path / "g.png").string();
  viz::save_heatmap_grid(f2, {m, m * 2.0}, {"a", "b"}, 0, o);
  Image g = viz::heatmap_grid({m, m * 2.0}, {"a", "b"}, 0, o);
  CHECK(decode_png(read_file(f2)).rgb == g.rgb);

  std::string f3 = (dir.path / "l.png").string();
  viz::save_line_plot(f3, {{"train", {3, 2, 1.5}}, {"valid", {3.1, 2.5}, {0, 2}}}, {.title = "loss"});
  Image l = viz::line_plot({{"train", {3, 2, 1.5}}, {"valid", {3.1, 2.5}, {0, 2}}}, {.title = "loss"});
  CHECK(decode_png(read_file(f3)).rgb == l.rgb);

  std::string f4 = (dir.path / "l1.png").string();
  viz::save_line_plot(f4, std::vector<double>{1, 2, 3});
  CHECK(decode_png(read_file(f4)).rgb == viz::line_plot(std::vector<double>{1, 2, 3}).rgb);
  CHECK(dir.entries().size() == 4);

  std::string bad = (dir.path / "nope" / "x.png").string();
  CHECK(error_of([&] { viz::save_heatmap(bad, m); }) ==
        "[write_png] cannot open '" + bad + "': No such file or directory");
}
