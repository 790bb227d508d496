#include "viz/png.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <png.h>
#include <zlib.h>

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
// zlib's, whose running forms have the same convention (start at 0 and 1).
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  return static_cast<uint32_t>(::crc32_z(crc, data, n));
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  return static_cast<uint32_t>(::adler32_z(adler, data, n));
}

// ---------------------------------------------------------------- encoding
std::vector<uint8_t> encode_png(const Image& img) {
  check_image_size("write_png", img.width, img.height);
  size_t expected = size_t(img.width) * size_t(img.height) * 3;
  KILN_CHECK(img.rgb.size() == expected, "write_png", "image is ", img.width, "x", img.height,
             " but has ", img.rgb.size(), " bytes of pixels (expected ", expected, ")");

  // libpng's simplified API: 8-bit RGB rows in, a whole PNG file out; it picks each
  // row's filter and deflates at zlib's default level.
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(img.width);
  image.height = static_cast<png_uint_32>(img.height);
  image.format = PNG_FORMAT_RGB;
  std::vector<uint8_t> out(PNG_IMAGE_PNG_SIZE_MAX(image));
  png_alloc_size_t size = out.size();
  const int ok = png_image_write_to_memory(&image, out.data(), &size, /*convert_to_8bit=*/0, img.rgb.data(),
                                           /*row_stride=*/0, /*colormap=*/nullptr);
  const std::string message = image.message;
  png_image_free(&image);
  KILN_CHECK(ok != 0 && size <= out.size(), "write_png", "libpng could not encode a ", img.width, "x",
             img.height, " image: ", message);
  out.resize(size);
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
