#include "viz/png.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace kiln::viz {

void check_image_size(const char* op, int64_t width, int64_t height) {
  KILN_CHECK(width >= 1 && height >= 1, op, "image size ", width, "x", height,
             " must be at least 1x1");
  KILN_CHECK(width <= kMaxImageSide && height <= kMaxImageSide && width * height <= kMaxImagePixels,
             op, "image size ", width, "x", height, " is too large (at most ", kMaxImageSide,
             " pixels a side and ", kMaxImagePixels, " pixels in all)");
}

// ---------------------------------------------------------------- Image
Image::Image(int w, int h, Rgb background) : width(w), height(h) {
  check_image_size("Image", w, h);
  rgb.resize(size_t(w) * size_t(h) * 3);
  for (size_t i = 0; i < rgb.size(); i += 3) {
    rgb[i] = background.r;
    rgb[i + 1] = background.g;
    rgb[i + 2] = background.b;
  }
}

void Image::set(int x, int y, Rgb c) {
  if (!contains(x, y)) return;
  uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

Rgb Image::at(int x, int y) const {
  KILN_CHECK(contains(x, y), "Image::at", "pixel (", x, ", ", y, ") outside a ", width, "x",
             height, " image");
  const uint8_t* p = &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  return {p[0], p[1], p[2]};
}

void Image::fill_rect(int x, int y, int w, int h, Rgb c) {
  int x0 = std::max(x, 0), y0 = std::max(y, 0);
  int x1 = int(std::min<int64_t>(int64_t(x) + w, width));
  int y1 = int(std::min<int64_t>(int64_t(y) + h, height));
  for (int yy = y0; yy < y1; ++yy)
    for (int xx = x0; xx < x1; ++xx) set(xx, yy, c);
}

void Image::blit(const Image& src, int x, int y) {
  for (int yy = 0; yy < src.height; ++yy)
    for (int xx = 0; xx < src.width; ++xx) set(x + xx, y + yy, src.at(xx, yy));
}

// ---------------------------------------------------------------- checksums
namespace {

// Table-driven CRC-32, reflected polynomial 0xEDB88320 (PNG spec, annex D).
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t n = 0; n < 256; ++n) {
    uint32_t c = n;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[n] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xFFFF, b = adler >> 16;
  // 5552 is the largest run for which b cannot overflow 32 bits before the modulo.
  while (n > 0) {
    size_t run = std::min<size_t>(n, 5552);
    n -= run;
    for (size_t i = 0; i < run; ++i) {
      a += *data++;
      b += a;
    }
    a %= kMod;
    b %= kMod;
  }
  return (b << 16) | a;
}

// ---------------------------------------------------------------- encoding
namespace {

void put_u32be(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(uint8_t(v >> 24));
  out.push_back(uint8_t(v >> 16));
  out.push_back(uint8_t(v >> 8));
  out.push_back(uint8_t(v));
}

// length, type, data, CRC over type and data.
void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32be(out, uint32_t(data.size()));
  size_t crc_start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32be(out, crc32(out.data() + crc_start, out.size() - crc_start));
}

// A zlib stream (RFC 1950) of stored deflate blocks (RFC 1951, BTYPE 00).
std::vector<uint8_t> zlib_stored(const std::vector<uint8_t>& raw) {
  constexpr size_t kMaxBlock = 65535;
  std::vector<uint8_t> z;
  z.reserve(raw.size() + raw.size() / kMaxBlock * 5 + 16);
  // CMF: deflate (8), 32K window (7); FLG: no dictionary, level 0, FCHECK making
  // CMF * 256 + FLG a multiple of 31: 0x7801.
  z.push_back(0x78);
  z.push_back(0x01);
  size_t pos = 0;
  do {
    size_t len = std::min(kMaxBlock, raw.size() - pos);
    bool final = pos + len == raw.size();
    z.push_back(final ? 0x01 : 0x00);  // BFINAL bit, BTYPE 00, then padding to the byte
    z.push_back(uint8_t(len & 0xFF));  // LEN and NLEN, little-endian
    z.push_back(uint8_t(len >> 8));
    z.push_back(uint8_t(~len & 0xFF));
    z.push_back(uint8_t((~len >> 8) & 0xFF));
    z.insert(z.end(), raw.begin() + std::ptrdiff_t(pos), raw.begin() + std::ptrdiff_t(pos + len));
    pos += len;
  } while (pos < raw.size());
  put_u32be(z, adler32(raw.data(), raw.size()));
  return z;
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& img) {
  check_image_size("write_png", img.width, img.height);
  size_t expected = size_t(img.width) * size_t(img.height) * 3;
  KILN_CHECK(img.rgb.size() == expected, "write_png", "image is ", img.width, "x", img.height,
             " but has ", img.rgb.size(), " bytes of pixels (expected ", expected, ")");

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

  std::vector<uint8_t> ihdr;
  put_u32be(ihdr, uint32_t(img.width));
  put_u32be(ihdr, uint32_t(img.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // depth 8, truecolour, deflate, filter 0, no interlace
  put_chunk(out, "IHDR", ihdr);

  // Each scanline: filter type 0 (none), then the row's bytes.
  size_t row = size_t(img.width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * size_t(img.height));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    auto begin = img.rgb.begin() + std::ptrdiff_t(row * size_t(y));
    raw.insert(raw.end(), begin, begin + std::ptrdiff_t(row));
  }
  put_chunk(out, "IDAT", zlib_stored(raw));
  put_chunk(out, "IEND", {});
  return out;
}

void write_png(const std::string& path, const Image& img) {
  std::vector<uint8_t> bytes = encode_png(img);

  // The temporary sits beside the target so that rename() stays within one filesystem.
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(counter.fetch_add(1));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  KILN_CHECK(f != nullptr, "write_png", "cannot open '", path, "': ", std::strerror(errno));

  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    KILN_FAIL("write_png", "cannot write '", path, "': ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    KILN_FAIL("write_png", "cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
}

}  // namespace kiln::viz
