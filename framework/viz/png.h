#pragma once
// An RGB image in memory and a PNG writer (through libpng, deflated by zlib).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::viz {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

// Largest image any function of viz makes or writes: 16384 pixels a side and
// 2^26 pixels (192 MiB of RGB) in all. Larger requests are a kiln::Error.
constexpr int kMaxImageSide = 16384;
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Throws "[op] image size WxH ..." unless 1 <= width, height <= kMaxImageSide and
// width * height <= kMaxImagePixels. Takes int64 so that overflowing sums are caught.
void check_image_size(const char* op, int64_t width, int64_t height);

// Row-major 8-bit RGB, top row first, 3 bytes a pixel. The fields are public (an Image
// is plain data); write_png checks that rgb.size() == 3 * width * height.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;

  Image() = default;
  // A width x height image filled with `background` (checked with check_image_size).
  Image(int width, int height, Rgb background = {255, 255, 255});

  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width && y < height; }
  // Drawing is clipped like on a canvas: a pixel outside the image is ignored.
  void set(int x, int y, Rgb c);
  void set(int x, int y, uint8_t r, uint8_t g, uint8_t b) { set(x, y, Rgb{r, g, b}); }
  // Throws "[Image::at] pixel (x, y) outside a WxH image".
  Rgb at(int x, int y) const;
  // Fills the rectangle [x, x + w) x [y, y + h), clipped.
  void fill_rect(int x, int y, int w, int h, Rgb c);
  // Copies `src` with its top-left corner at (x, y), clipped.
  void blit(const Image& src, int x, int y);
};

// Checksums as the formats define them (crc: ISO-HDLC / PNG polynomial 0xEDB88320,
// adler: RFC 1950), zlib's. Pass the previous result to continue a running checksum.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

// The bytes of a PNG file: 8-bit truecolour (colour type 2), no interlace, each row's
// filter chosen by libpng, deflated at zlib's default level.
// Throws "[write_png] image is WxH but has N bytes of pixels (expected M)".
std::vector<uint8_t> encode_png(const Image& img);

// Writes encode_png(img) to `path` atomically: to a temporary file beside it, then
// renamed over it, so a reader never sees half a file. Throws
// "[write_png] cannot open '<path>': <reason>" (or "cannot write" / "cannot rename").
void write_png(const std::string& path, const Image& img);

}  // namespace kiln::viz
