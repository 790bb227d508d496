#include "viz/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "viz/font.h"

namespace kiln::viz {

namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kInk{30, 30, 30};          // text
constexpr Rgb kAxis{70, 70, 70};         // frames and ticks
constexpr Rgb kGrid{226, 226, 226};      // grid lines
constexpr int kMargin = 10;

bool is_continuation(unsigned char c) { return c >= 0x80 && c < 0xC0; }

// The character starting at byte i: its code point and its length in bytes. Two-byte
// UTF-8 is decoded (it covers Latin-1); anything longer or malformed is one character
// per lead byte and its continuation bytes, drawn as '?'.
std::pair<uint32_t, size_t> next_char(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1};
  size_t len = 1;
  while (i + len < s.size() && is_continuation(static_cast<unsigned char>(s[i + len]))) ++len;
  if (len == 2 && (c & 0xE0) == 0xC0)
    return {uint32_t(c & 0x1F) << 6 | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu), 2};
  return {0xFFFD, len};
}

// Calls f(glyph) once per character.
template <class F>
void for_each_glyph(std::string_view s, F&& f) {
  for (size_t i = 0; i < s.size();) {
    auto [cp, len] = next_char(s, i);
    f(font::glyph(cp));
    i += len;
  }
}

int char_count(std::string_view s) {
  int n = 0;
  for (size_t i = 0; i < s.size(); i += next_char(s, i).second) ++n;
  return n;
}

// At most max_chars characters; a longer text keeps max_chars - 1 and ends in '~'.
std::string truncate(std::string_view s, int max_chars) {
  if (char_count(s) <= max_chars) return std::string(s);
  size_t end = 0;
  for (int kept = 0; kept < max_chars - 1; ++kept) end += next_char(s, end).second;
  return std::string(s.substr(0, end)) + "~";
}

// "1.5e+03" -> "1.5e3", "1e-05" -> "1e-5".
std::string tidy_exponent(std::string s) {
  size_t e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  bool neg = !exp.empty() && exp[0] == '-';
  if (!exp.empty() && (exp[0] == '-' || exp[0] == '+')) exp.erase(0, 1);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return mant + "e" + (neg ? "-" : "") + exp;
}

std::string printf_str(const char* fmt, int prec, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, prec, v);
  return buf;
}

// ---------------------------------------------------------------- ticks
// A round step (1, 2 or 5 times a power of ten) giving about `target` intervals.
double nice_step(double span, int target) {
  double raw = span / std::max(target, 1);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double n = raw / mag;
  double f = n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10;
  return f * mag;
}

// Multiples of step inside [lo, hi].
std::vector<double> multiples_in(double lo, double hi, double step) {
  std::vector<double> out;
  double k0 = std::ceil(lo / step - 1e-9), k1 = std::floor(hi / step + 1e-9);
  for (double k = k0; k <= k1 && out.size() < 1000; k += 1) {
    double v = k * step;
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

// Labels for ticks `step` apart, precise enough to tell neighbours apart, in one style
// for the whole axis: fixed-point (0.25, 1500) unless the largest is under 1e-3 or
// 1e6 and over, then with an exponent (2e-4, 1.5e6).
std::vector<std::string> tick_labels(const std::vector<double>& values, double step) {
  double big = 0;
  for (double v : values) big = std::max(big, std::abs(v));
  const bool sci = big > 0 && (big < 1e-3 || big >= 1e6);
  const int step_exp = int(std::floor(std::log10(step) + 1e-9));
  std::vector<std::string> out;
  for (double v : values) {
    if (v == 0) {
      out.push_back("0");
    } else if (!sci) {
      out.push_back(printf_str("%.*f", std::clamp(-step_exp, 0, 15), v));
    } else {
      int digits = int(std::floor(std::log10(std::abs(v)) + 1e-9)) - step_exp + 1;
      out.push_back(tidy_exponent(printf_str("%.*e", std::clamp(digits - 1, 0, 14), v)));
    }
  }
  return out;
}

struct Axis {
  double lo, hi;
  bool log = false;
  std::vector<double> ticks = {};  // positions, in axis units (log10 when log)
  std::vector<std::string> labels = {};
};

// Ticks of a log10 axis spanning [lo, hi] (exponents).
void log_ticks(Axis& a, int target) {
  double decades = a.hi - a.lo;
  std::vector<double> values;
  if (decades <= 1.2) {  // linear round numbers, placed on the log scale
    double vlo = std::pow(10.0, a.lo), vhi = std::pow(10.0, a.hi);
    double step = nice_step(vhi - vlo, target);
    for (double v : multiples_in(vlo, vhi, step))
      if (v > 0) values.push_back(v);
    for (double v : values) a.ticks.push_back(std::log10(v));
    a.labels = tick_labels(values, step);
    return;
  }
  if (decades <= 3) {
    for (double e = std::floor(a.lo); e <= std::ceil(a.hi); e += 1)
      for (double m : {1.0, 2.0, 5.0}) {
        double t = e + std::log10(m);
        if (t >= a.lo - 1e-9 && t <= a.hi + 1e-9) {
          a.ticks.push_back(t);
          a.labels.push_back(format_number(m * std::pow(10.0, e)));
        }
      }
    return;
  }
  for (double e : multiples_in(a.lo, a.hi, std::max(1.0, std::round(nice_step(decades, target))))) {
    a.ticks.push_back(e);
    a.labels.push_back(format_number(std::pow(10.0, e)));
  }
}

void linear_ticks(Axis& a, int target, double min_step = 0) {
  if (!(a.hi > a.lo) || !std::isfinite(a.hi - a.lo)) {  // degenerate or past DBL_MAX: the ends
    a.ticks = {a.lo, a.hi};
    a.labels = {format_number(a.lo), format_number(a.hi)};
    return;
  }
  double step = std::max(nice_step(a.hi - a.lo, target), min_step);
  a.ticks = multiples_in(a.lo, a.hi, step);
  a.labels = tick_labels(a.ticks, step);
}

// ---------------------------------------------------------------- lines
// Liang-Barsky: clips the segment to [x0, x1] x [y0, y1]; false when nothing is left.
bool clip_segment(double& ax, double& ay, double& bx, double& by, double x0, double y0, double x1,
                  double y1) {
  double t0 = 0, t1 = 1, dx = bx - ax, dy = by - ay;
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {ax - x0, x1 - ax, ay - y0, y1 - ay};
  for (int i = 0; i < 4; ++i) {
    if (p[i] == 0) {
      if (q[i] < 0) return false;
      continue;
    }
    double r = q[i] / p[i];
    if (p[i] < 0) t0 = std::max(t0, r);
    else t1 = std::min(t1, r);
    if (t0 > t1) return false;
  }
  bx = ax + t1 * dx;
  by = ay + t1 * dy;
  ax = ax + t0 * dx;
  ay = ay + t0 * dy;
  return true;
}

// Bresenham with a square brush of `width` pixels, every pixel kept inside `clip`.
void raster_line(Image& img, int x0, int y0, int x1, int y1, Rgb c, int width, const Rect& clip) {
  auto brush = [&](int x, int y) {
    for (int dy = -(width - 1) / 2; dy <= width / 2; ++dy)
      for (int dx = -(width - 1) / 2; dx <= width / 2; ++dx) {
        int px = x + dx, py = y + dy;
        if (px >= clip.x && py >= clip.y && px < clip.x + clip.width && py < clip.y + clip.height)
          img.set(px, py, c);
      }
  };
  int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
  int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    brush(x0, y0);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) {
      err += dy;
      x0 += sx;
    }
    if (e2 <= dx) {
      err += dx;
      y0 += sy;
    }
  }
}

void draw_segment(Image& img, double ax, double ay, double bx, double by, Rgb c, int width,
                  const Rect& clip) {
  if (!std::isfinite(ax) || !std::isfinite(ay) || !std::isfinite(bx) || !std::isfinite(by)) return;
  if (!clip_segment(ax, ay, bx, by, clip.x, clip.y, clip.x + clip.width - 1,
                    clip.y + clip.height - 1))
    return;
  raster_line(img, int(std::lround(ax)), int(std::lround(ay)), int(std::lround(bx)),
              int(std::lround(by)), c, width, clip);
}

void draw_text_centered(Image& img, int cx, int y, std::string_view s, Rgb c, int scale = 1) {
  draw_text(img, cx - text_width(s, scale) / 2, y, s, c, scale);
}

}  // namespace

// ---------------------------------------------------------------- colours
Rgb colormap(double t) {
  if (std::isnan(t)) return kNonFiniteColor;
  static constexpr std::array<std::array<double, 3>, 5> kStops = {{
      {20, 22, 64},     // navy
      {38, 76, 150},    // blue
      {28, 140, 140},   // teal
      {112, 196, 84},   // green
      {250, 230, 60},   // yellow
  }};
  t = std::clamp(t, 0.0, 1.0) * double(kStops.size() - 1);
  size_t i = std::min(size_t(t), kStops.size() - 2);
  double f = t - double(i);
  auto mix = [&](int k) {
    return uint8_t(std::lround(kStops[i][size_t(k)] * (1 - f) + kStops[i + 1][size_t(k)] * f));
  };
  return {mix(0), mix(1), mix(2)};
}

// ---------------------------------------------------------------- text
int text_width(std::string_view text, int scale) {
  int n = char_count(text);
  return n == 0 ? 0 : (n * kCharAdvance - 1) * scale;
}

void draw_text(Image& img, int x, int y, std::string_view text, Rgb color, int scale) {
  for_each_glyph(text, [&](const font::Glyph& g) {
    for (int r = 0; r < font::kGlyphHeight; ++r)
      for (int col = 0; col < font::kGlyphWidth; ++col)
        if (g[size_t(r)] & (1u << (font::kGlyphWidth - 1 - col)))
          img.fill_rect(x + col * scale, y + r * scale, scale, scale, color);
    x += kCharAdvance * scale;
  });
}

void draw_text_vertical(Image& img, int x, int y, std::string_view text, Rgb color, int scale) {
  // Text pixel (u along the text, v down the glyph) goes to (x + v, y - u).
  int u0 = 0;
  for_each_glyph(text, [&](const font::Glyph& g) {
    for (int r = 0; r < font::kGlyphHeight; ++r)
      for (int col = 0; col < font::kGlyphWidth; ++col)
        if (g[size_t(r)] & (1u << (font::kGlyphWidth - 1 - col)))
          img.fill_rect(x + r * scale, y - (u0 + col * scale) - (scale - 1), scale, scale, color);
    u0 += kCharAdvance * scale;
  });
}

void draw_line(Image& img, int x0, int y0, int x1, int y1, Rgb color, int width) {
  draw_segment(img, x0, y0, x1, y1, color, std::max(width, 1), Rect{0, 0, img.width, img.height});
}

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  return tidy_exponent(printf_str("%.*g", 3, v));
}

// ---------------------------------------------------------------- heatmaps
namespace {

struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;  // row-major
  bool is_bool = false;
};

// Shape checks only; the values are read once the image size is known to be sane.
void check_matrix(const char* op, const Tensor& t, size_t index, bool many) {
  std::string who = many ? "matrix " + std::to_string(index) + ": " : "";
  KILN_CHECK(t.defined(), op, who, "tensor is undefined");
  KILN_CHECK(t.dim() == 2, op, who, "expected a 2-D tensor, got shape ", shape_str(t.shape()));
  KILN_CHECK(t.numel() > 0, op, who, "tensor of shape ", shape_str(t.shape()), " is empty");
}

Matrix read_matrix(const Tensor& t) {
  Matrix m;
  m.rows = t.size(0);
  m.cols = t.size(1);
  m.is_bool = t.dtype() == kBool;
  m.v = t.detach().to_vector<double>();
  return m;
}

Image heatmap_impl(const char* op, const std::vector<Tensor>& tensors,
                   const std::vector<std::string>& titles, int grid_cols,
                   const HeatmapOptions& opts, Rect* area) {
  KILN_CHECK(!tensors.empty(), op, "no matrices to draw");
  KILN_CHECK(titles.empty() || titles.size() == tensors.size(), op, titles.size(),
             " titles for ", tensors.size(), " matrices");
  KILN_CHECK(grid_cols >= 0, op, "cols must be >= 0 (0: auto), got ", grid_cols);
  KILN_CHECK(opts.cell >= 0 && opts.cell <= 256, op, "cell must be in 1..256 (0: auto), got ",
             opts.cell);
  KILN_CHECK(opts.max_label_chars >= 1, op, "max_label_chars must be >= 1, got ",
             opts.max_label_chars);

  const bool many = tensors.size() > 1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_matrix(op, tensors[i], i, many);
    KILN_CHECK(tensors[i].shape() == tensors[0].shape(), op, "matrix ", i, " has shape ",
               shape_str(tensors[i].shape()), " but matrix 0 has ", shape_str(tensors[0].shape()));
  }
  const int64_t R = tensors[0].size(0), C = tensors[0].size(1);
  KILN_CHECK(opts.row_labels.empty() || int64_t(opts.row_labels.size()) == R, op,
             opts.row_labels.size(), " row_labels for ", R, " rows");
  KILN_CHECK(opts.col_labels.empty() || int64_t(opts.col_labels.size()) == C, op,
             opts.col_labels.size(), " col_labels for ", C, " columns");
  for (const auto* bound : {&opts.vmin, &opts.vmax})
    KILN_CHECK(!*bound || std::isfinite(**bound), op, (bound == &opts.vmin ? "vmin" : "vmax"),
               " must be finite, got ", **bound);
  // ---- geometry
  const bool row_labels = !opts.row_labels.empty(), col_labels = !opts.col_labels.empty();
  int64_t cell = opts.cell;
  if (cell == 0) {
    int64_t target = many ? 256 : 512;
    cell = std::clamp<int64_t>(target / std::max(R, C), 1, 32);
    if (row_labels || col_labels) cell = std::max<int64_t>(cell, 10);
  }
  const int64_t n = int64_t(tensors.size());
  const int64_t gcols = grid_cols == 0 ? int64_t(std::ceil(std::sqrt(double(n) - 1e-9)))
                                       : std::min<int64_t>(grid_cols, n);
  const int64_t grows = (n + gcols - 1) / gcols;
  const int64_t mat_w = C * cell, mat_h = R * cell;
  // Checked before anything is sized from them, so that huge matrices fail cleanly.
  check_image_size(op, mat_w, mat_h);
  check_image_size(op, mat_w * gcols, mat_h * grows);

  std::vector<Matrix> mats;
  for (const Tensor& t : tensors) mats.push_back(read_matrix(t));
  const bool all_bool = std::all_of(mats.begin(), mats.end(), [](const Matrix& m) { return m.is_bool; });

  // The value range: bool is always [0, 1]; otherwise the finite extremes unless given.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  bool any_nonfinite = false;
  for (const Matrix& m : mats)
    for (double v : m.v) {
      if (!std::isfinite(v)) {
        any_nonfinite = true;
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (lo > hi) lo = 0, hi = 1;  // nothing finite: every cell is kNonFiniteColor
  double vmin = all_bool ? 0.0 : opts.vmin.value_or(lo);
  double vmax = all_bool ? 1.0 : opts.vmax.value_or(hi);
  if (!all_bool && opts.vmin && !opts.vmax) vmax = std::max(vmax, vmin);
  if (!all_bool && opts.vmax && !opts.vmin) vmin = std::min(vmin, vmax);
  KILN_CHECK(vmin <= vmax, op, "vmin ", vmin, " is greater than vmax ", vmax);
  auto color_of = [&](double v) {
    if (!std::isfinite(v)) return kNonFiniteColor;
    // Halved first so that a range wider than the largest double does not overflow.
    if (vmax > vmin) return colormap((0.5 * v - 0.5 * vmin) / (0.5 * vmax - 0.5 * vmin));
    return colormap(v < vmin ? 0.0 : v > vmax ? 1.0 : 0.5);
  };

  // Draw every k-th label when the cells are smaller than a line of text.
  const int64_t label_every = (cell >= 9) ? 1 : (9 + cell - 1) / cell;

  std::vector<std::string> rlab, clab;
  int rlab_w = 0, clab_h = 0;
  for (const auto& s : opts.row_labels) {
    rlab.push_back(truncate(s, opts.max_label_chars));
    rlab_w = std::max(rlab_w, text_width(rlab.back()));
  }
  for (const auto& s : opts.col_labels) {
    clab.push_back(truncate(s, opts.max_label_chars));
    clab_h = std::max(clab_h, text_width(clab.back()));
  }
  if (row_labels) rlab_w += 4;
  if (col_labels) clab_h += 4;

  // Without labels, rows and columns are numbered every round step (1, 2, 5, 10, ...)
  // that leaves a line of text (rows) or the widest number (columns) room, beside a
  // 3-pixel tick mark.
  const bool row_index = !row_labels && opts.index_ticks;
  const bool col_index = !col_labels && opts.index_ticks;
  auto round_step = [](double at_least) {
    for (int64_t mag = 1;; mag *= 10)
      for (int64_t f : {1, 2, 5})
        if (double(f * mag) >= at_least) return f * mag;
  };
  const int64_t row_step = round_step(10.0 / double(cell));
  const int64_t col_step =
      round_step(double(text_width(std::to_string(C - 1)) + 6) / double(cell));
  if (row_index) rlab_w = text_width(std::to_string((R - 1) / row_step * row_step)) + 6;
  if (col_index) clab_h = kCharHeight + 5;

  const int title_scale = 2;
  const int title_h = opts.title.empty() ? 0 : kCharHeight * title_scale + 8;
  const int panel_title_h = titles.empty() ? 0 : kCharHeight + 4;
  const int ylab_w = opts.y_label.empty() ? 0 : kCharHeight + 6;
  const int xlab_h = opts.x_label.empty() ? 0 : kCharHeight + 6;
  const int64_t gap_x = 14, gap_y = 10;

  // Colour bar (continuous) or legend (bool), right of the panels.
  const int64_t cb_gap = 14, cb_w = 14;
  const int64_t cb_h = std::max<int64_t>(mat_h, 64);
  Axis cb_axis{.lo = vmin, .hi = vmax};
  if (all_bool) {
    cb_axis.ticks = {0.0, 1.0};
    cb_axis.labels = {"False", "True"};
  } else if (vmax > vmin) {
    linear_ticks(cb_axis, int(std::clamp<int64_t>(cb_h / 20, 2, 8)));
  } else {
    cb_axis.ticks = {vmin};
    cb_axis.labels = {format_number(vmin)};
  }
  int cb_label_w = 0;
  for (const auto& s : cb_axis.labels) cb_label_w = std::max(cb_label_w, text_width(s));
  if (any_nonfinite) cb_label_w = std::max(cb_label_w, text_width("nan/inf"));
  const int64_t cb_total_w = opts.colorbar ? cb_gap + cb_w + 6 + cb_label_w : 0;
  const int64_t cb_total_h = opts.colorbar ? cb_h + (any_nonfinite ? 8 + 10 : 0) : 0;

  const int64_t panels_w = gcols * mat_w + (gcols - 1) * gap_x;
  const int64_t panels_h = grows * (panel_title_h + mat_h) + (grows - 1) * gap_y;
  int64_t content_w = ylab_w + rlab_w + panels_w + cb_total_w;
  int64_t width = std::max<int64_t>(content_w, text_width(opts.title, title_scale)) + 2 * kMargin;
  int64_t below = std::max<int64_t>(clab_h + xlab_h, cb_total_h - (panels_h - panel_title_h));
  int64_t height = kMargin + title_h + panels_h + std::max<int64_t>(below, 0) + kMargin;
  check_image_size(op, width, height);

  Image img(int(width), int(height), kWhite);
  const int ox = int((width - content_w) / 2);  // centres the content under a wide title
  const int px0 = ox + ylab_w + rlab_w;          // left edge of the first panel column
  const int py0 = kMargin + title_h;             // top of the first panel row (its title)

  if (!opts.title.empty())
    draw_text_centered(img, int(width / 2), kMargin, opts.title, kInk, title_scale);

  for (int64_t k = 0; k < n; ++k) {
    const Matrix& m = mats[size_t(k)];
    const int64_t gr = k / gcols, gc = k % gcols;
    const int mx = int(px0 + gc * (mat_w + gap_x));
    const int my = int(py0 + gr * (panel_title_h + mat_h + gap_y) + panel_title_h);
    if (k == 0 && area) *area = Rect{mx, my, int(mat_w), int(mat_h)};

    if (!titles.empty()) {
      int max_chars = int(std::max<int64_t>(1, (mat_w + gap_x - 2) / kCharAdvance));
      draw_text_centered(img, int(mx + mat_w / 2), my - panel_title_h,
                         truncate(titles[size_t(k)], max_chars), kInk);
    }
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j)
        img.fill_rect(int(mx + j * cell), int(my + i * cell), int(cell), int(cell),
                      color_of(m.v[size_t(i * C + j)]));

    // Glyph rows 0..6 carry capitals and digits: centre those on the cell.
    const int text_off = int((cell - 7) / 2);
    const int64_t half = cell / 2;
    if (row_index && gc == 0)
      for (int64_t i = 0; i < R; i += row_step) {
        std::string s = std::to_string(i);
        img.fill_rect(mx - 3, int(my + i * cell + half), 3, 1, kAxis);
        draw_text(img, mx - 5 - text_width(s), int(my + i * cell + text_off), s, kInk);
      }
    if (row_labels && gc == 0)
      for (int64_t i = 0; i < R; i += label_every) {
        const std::string& s = rlab[size_t(i)];
        draw_text(img, mx - 4 - text_width(s), int(my + i * cell + text_off), s, kInk);
      }
    const bool last_in_column = k + gcols >= n;
    if (col_index && last_in_column)
      for (int64_t j = 0; j < C; j += col_step) {
        img.fill_rect(int(mx + j * cell + half), int(my + mat_h), 1, 3, kAxis);
        draw_text_centered(img, int(mx + j * cell + half), int(my + mat_h + 5), std::to_string(j),
                           kInk);
      }
    if (col_labels && last_in_column)
      for (int64_t j = 0; j < C; j += label_every) {
        const std::string& s = clab[size_t(j)];
        draw_text_vertical(img, int(mx + j * cell + text_off), int(my + mat_h + 4 + text_width(s) - 1),
                           s, kInk);
      }
  }

  if (!opts.y_label.empty()) {
    int label = std::min<int>(text_width(opts.y_label), int(panels_h));
    draw_text_vertical(img, ox, int(py0 + panels_h / 2 + label / 2), opts.y_label, kInk);
  }
  if (!opts.x_label.empty())
    draw_text_centered(img, int(px0 + panels_w / 2), int(py0 + panels_h + clab_h + 6),
                       opts.x_label, kInk);

  if (opts.colorbar) {
    const int bx = int(px0 + panels_w + cb_gap), by = py0 + panel_title_h;
    const int bh = int(cb_h);
    if (all_bool) {
      img.fill_rect(bx, by, int(cb_w), bh / 2, colormap(1.0));
      img.fill_rect(bx, by + bh / 2, int(cb_w), bh - bh / 2, colormap(0.0));
      draw_text(img, bx + int(cb_w) + 6, by + bh / 4 - 3, "True", kInk);
      draw_text(img, bx + int(cb_w) + 6, by + bh / 2 + bh / 4 - 3, "False", kInk);
    } else {
      for (int y = 0; y < bh; ++y)
        img.fill_rect(bx, by + y, int(cb_w), 1, colormap(1.0 - double(y) / std::max(bh - 1, 1)));
      for (size_t t = 0; t < cb_axis.ticks.size(); ++t) {
        double f = vmax > vmin ? (0.5 * cb_axis.ticks[t] - 0.5 * vmin) / (0.5 * vmax - 0.5 * vmin) : 0.5;
        int y = by + int(std::lround((1.0 - f) * (bh - 1)));
        img.fill_rect(bx + int(cb_w), y, 3, 1, kAxis);
        draw_text(img, bx + int(cb_w) + 6, y - 3, cb_axis.labels[t], kInk);
      }
    }
    // A frame just outside the bar.
    img.fill_rect(bx - 1, by - 1, int(cb_w) + 2, 1, kAxis);
    img.fill_rect(bx - 1, by + bh, int(cb_w) + 2, 1, kAxis);
    img.fill_rect(bx - 1, by - 1, 1, bh + 2, kAxis);
    img.fill_rect(bx + int(cb_w), by - 1, 1, bh + 2, kAxis);
    if (any_nonfinite) {
      img.fill_rect(bx, by + bh + 8, int(cb_w), 10, kNonFiniteColor);
      draw_text(img, bx + int(cb_w) + 6, by + bh + 9, "nan/inf", kInk);
    }
  }
  return img;
}

}  // namespace

Image heatmap(const Tensor& m, const HeatmapOptions& opts, Rect* area) {
  return heatmap_impl("heatmap", {m}, {}, 1, opts, area);
}

Image heatmap_grid(const std::vector<Tensor>& mats, const std::vector<std::string>& titles,
                   int cols, const HeatmapOptions& opts, Rect* area) {
  return heatmap_impl("heatmap_grid", mats, titles, cols, opts, area);
}

Image heatmap_grid(const Tensor& stack, const std::vector<std::string>& titles, int cols,
                   const HeatmapOptions& opts, Rect* area) {
  KILN_CHECK(stack.defined(), "heatmap_grid", "tensor is undefined");
  if (stack.dim() == 2) return heatmap_impl("heatmap_grid", {stack}, titles, cols, opts, area);
  KILN_CHECK(stack.dim() == 3, "heatmap_grid", "expected a 3-D tensor (N, rows, cols), got shape ",
             shape_str(stack.shape()));
  std::vector<Tensor> mats;
  for (int64_t i = 0; i < stack.size(0); ++i) mats.push_back(stack.select(0, i));
  return heatmap_impl("heatmap_grid", mats, titles, cols, opts, area);
}

// ---------------------------------------------------------------- line plots
namespace {

// Distinct, colour-blind-friendly hues, in the order series take them.
constexpr std::array<Rgb, 8> kPalette = {{
    {0, 114, 178},    // blue
    {230, 97, 0},     // orange
    {0, 158, 115},    // green
    {204, 37, 41},    // red
    {117, 80, 180},   // purple
    {140, 86, 75},    // brown
    {220, 50, 160},   // pink
    {100, 100, 100},  // grey
}};

}  // namespace

Image line_plot(const std::vector<Series>& series, const LinePlotOptions& opts, Rect* area) {
  const char* op = "line_plot";
  KILN_CHECK(!series.empty(), op, "no series to plot");
  KILN_CHECK(opts.width >= 160 && opts.height >= 120, op, "size ", opts.width, "x", opts.height,
             " is too small (at least 160x120)");
  check_image_size(op, opts.width, opts.height);
  KILN_CHECK(opts.line_width >= 1 && opts.line_width <= 8, op, "line_width must be in 1..8, got ",
             opts.line_width);
  for (const auto* bound : {&opts.y_min, &opts.y_max}) {
    const char* name = bound == &opts.y_min ? "y_min" : "y_max";
    KILN_CHECK(!*bound || std::isfinite(**bound), op, name, " must be finite, got ", **bound);
    KILN_CHECK(!*bound || !opts.log_y || **bound > 0, op, "log_y needs ", name, " > 0, got ",
               **bound);
  }
  KILN_CHECK(!(opts.y_min && opts.y_max) || *opts.y_min < *opts.y_max, op, "y_min ", *opts.y_min,
             " must be less than y_max ", *opts.y_max);

  // Points in axis units (y as log10 with log_y); NaN marks a gap.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::vector<std::pair<double, double>>> pts(series.size());
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  bool integral_x = true;
  for (size_t s = 0; s < series.size(); ++s) {
    const Series& sr = series[s];
    KILN_CHECK(sr.xs.empty() || sr.xs.size() == sr.ys.size(), op, "series ", s, " ('", sr.label,
               "') has ", sr.xs.size(), " xs for ", sr.ys.size(), " ys");
    for (size_t i = 0; i < sr.ys.size(); ++i) {
      double x = sr.xs.empty() ? double(i) : sr.xs[i];
      KILN_CHECK(std::isfinite(x), op, "xs of series ", s, " ('", sr.label,
                 "') must be finite, got ", x, " at index ", i);
      double y = sr.ys[i];
      if (opts.log_y) y = y > 0 ? std::log10(y) : nan;
      if (!std::isfinite(y)) {
        pts[s].push_back({x, nan});
        continue;
      }
      pts[s].push_back({x, y});
      xlo = std::min(xlo, x);
      xhi = std::max(xhi, x);
      ylo = std::min(ylo, y);
      yhi = std::max(yhi, y);
      integral_x = integral_x && x == std::floor(x);
    }
  }
  KILN_CHECK(xlo <= xhi, op, "nothing to plot: no series has a finite",
             (opts.log_y ? ", positive" : ""), " y value");

  // ---- value ranges
  KILN_CHECK(std::isfinite(xhi - xlo), op, "x values span [", xlo, ", ", xhi, "], too wide to plot");
  KILN_CHECK(std::isfinite(yhi - ylo), op, "y values span [", ylo, ", ", yhi, "], too wide to plot");
  if (xlo == xhi) {
    double d = std::max(1.0, 0.05 * std::abs(xlo));
    xlo -= d;
    xhi += d;
  }
  {
    double pad = yhi > ylo ? 0.05 * (yhi - ylo) : (ylo != 0 ? 0.1 * std::abs(ylo) : 1.0);
    if (opts.log_y && !(yhi > ylo)) pad = 0.5;  // half a decade either side
    ylo -= pad;
    yhi += pad;
  }
  auto to_axis = [&](double v) { return opts.log_y ? std::log10(v) : v; };
  if (opts.y_min) ylo = to_axis(*opts.y_min);
  if (opts.y_max) yhi = to_axis(*opts.y_max);
  KILN_CHECK(std::isfinite(yhi - ylo), op, "y range [", ylo, ", ", yhi, "] is too wide to plot");
  KILN_CHECK(ylo < yhi, op, "y range [", opts.log_y ? std::pow(10.0, ylo) : ylo, ", ",
             opts.log_y ? std::pow(10.0, yhi) : yhi, "] is empty (y_min is above the data?)");

  // ---- layout
  const int W = opts.width, H = opts.height;
  int title_scale = text_width(opts.title, 2) <= W - 2 * kMargin ? 2 : 1;
  const int title_h = opts.title.empty() ? 0 : kCharHeight * title_scale + 10;
  const int ylab_w = opts.y_label.empty() ? 0 : kCharHeight + 8;
  const int xlab_h = opts.x_label.empty() ? 0 : kCharHeight + 6;
  const int xtick_h = kCharHeight + 8;

  const int top = kMargin + title_h;
  const int bottom = H - kMargin - xlab_h - xtick_h;  // last row inside the box
  Axis ya{.lo = ylo, .hi = yhi, .log = opts.log_y};
  const int y_target = std::clamp((bottom - top) / 45, 2, 8);
  if (opts.log_y) log_ticks(ya, y_target);
  else linear_ticks(ya, y_target);
  int ytick_w = 0;
  for (const auto& s : ya.labels) ytick_w = std::max(ytick_w, text_width(s));
  const int left = kMargin + ylab_w + ytick_w + 8;

  Axis xa{.lo = xlo, .hi = xhi};
  // Tick labels want ~60 px each; a right pad keeps the last one inside the image.
  int right = W - kMargin - 12;
  linear_ticks(xa, std::clamp((right - left) / 70, 2, 10), integral_x ? 1.0 : 0.0);
  KILN_CHECK(right - left >= 40 && bottom - top >= 30, op, "size ", W, "x", H,
             " leaves no room for the axes beside the labels");
  const Rect box{left, top, right - left + 1, bottom - top + 1};
  if (area) *area = box;

  auto px = [&](double x) { return box.x + (x - xlo) / (xhi - xlo) * (box.width - 1); };
  auto py = [&](double y) { return box.y + (yhi - y) / (yhi - ylo) * (box.height - 1); };

  Image img(W, H, kWhite);

  // Grid lines and ticks.
  for (size_t t = 0; t < ya.ticks.size(); ++t) {
    int y = int(std::lround(py(ya.ticks[t])));
    img.fill_rect(box.x, y, box.width, 1, kGrid);
    img.fill_rect(box.x - 4, y, 4, 1, kAxis);
    draw_text(img, box.x - 7 - text_width(ya.labels[t]), y - 3, ya.labels[t], kInk);
  }
  for (size_t t = 0; t < xa.ticks.size(); ++t) {
    int x = int(std::lround(px(xa.ticks[t])));
    img.fill_rect(x, box.y, 1, box.height, kGrid);
    img.fill_rect(x, box.y + box.height, 1, 4, kAxis);
    int w = text_width(xa.labels[t]);
    int tx = std::max(0, std::min(x - w / 2, W - w));
    draw_text(img, tx, box.y + box.height + 7, xa.labels[t], kInk);
  }

  // The series, clipped to the box.
  std::vector<Rgb> colors;
  for (size_t s = 0; s < series.size(); ++s) {
    Rgb c = series[s].color.value_or(kPalette[s % kPalette.size()]);
    colors.push_back(c);
    const auto& p = pts[s];
    bool markers = p.size() <= 40;
    for (size_t i = 0; i < p.size(); ++i) {
      if (std::isnan(p[i].second)) continue;
      double ax = px(p[i].first), ay = py(p[i].second);
      if (i + 1 < p.size() && !std::isnan(p[i + 1].second))
        draw_segment(img, ax, ay, px(p[i + 1].first), py(p[i + 1].second), c, opts.line_width, box);
      bool isolated = (i == 0 || std::isnan(p[i - 1].second)) &&
                      (i + 1 == p.size() || std::isnan(p[i + 1].second));
      if (markers || isolated) {
        int m = opts.line_width + 3;
        draw_segment(img, ax, ay, ax, ay, c, m, box);
      }
    }
  }

  // The frame on top of everything inside.
  img.fill_rect(box.x - 1, box.y - 1, box.width + 2, 1, kAxis);
  img.fill_rect(box.x - 1, box.y + box.height, box.width + 2, 1, kAxis);
  img.fill_rect(box.x - 1, box.y - 1, 1, box.height + 2, kAxis);
  img.fill_rect(box.x + box.width, box.y - 1, 1, box.height + 2, kAxis);

  // Legend, top right inside the box.
  std::vector<size_t> labelled;
  int lab_w = 0;
  for (size_t s = 0; s < series.size(); ++s)
    if (!series[s].label.empty()) {
      labelled.push_back(s);
      lab_w = std::max(lab_w, text_width(series[s].label));
    }
  if (!labelled.empty()) {
    const int row_h = 12, pad = 6, swatch = 18;
    int lw = pad + swatch + 5 + lab_w + pad, lh = pad + int(labelled.size()) * row_h + pad - 4;
    int lx = box.x + box.width - 8 - lw, ly = box.y + 8;
    img.fill_rect(lx, ly, lw, lh, kWhite);
    img.fill_rect(lx, ly, lw, 1, kGrid);
    img.fill_rect(lx, ly + lh - 1, lw, 1, kGrid);
    img.fill_rect(lx, ly, 1, lh, kGrid);
    img.fill_rect(lx + lw - 1, ly, 1, lh, kGrid);
    for (size_t k = 0; k < labelled.size(); ++k) {
      int y = ly + pad + int(k) * row_h;
      img.fill_rect(lx + pad, y + 3, swatch, std::max(2, opts.line_width), colors[labelled[k]]);
      draw_text(img, lx + pad + swatch + 5, y, series[labelled[k]].label, kInk);
    }
  }

  if (!opts.title.empty()) draw_text_centered(img, W / 2, kMargin, opts.title, kInk, title_scale);
  if (!opts.x_label.empty())
    draw_text_centered(img, box.x + box.width / 2, H - kMargin - kCharHeight, opts.x_label, kInk);
  if (!opts.y_label.empty())
    draw_text_vertical(img, kMargin, box.y + box.height / 2 + text_width(opts.y_label) / 2,
                       opts.y_label, kInk);
  return img;
}

Image line_plot(const std::vector<double>& ys, const LinePlotOptions& opts, Rect* area) {
  return line_plot(std::vector<Series>{Series("", ys)}, opts, area);
}

// ---------------------------------------------------------------- to files
void save_heatmap(const std::string& path, const Tensor& m, const HeatmapOptions& opts) {
  write_png(path, heatmap(m, opts));
}

void save_heatmap_grid(const std::string& path, const std::vector<Tensor>& mats,
                       const std::vector<std::string>& titles, int cols,
                       const HeatmapOptions& opts) {
  write_png(path, heatmap_grid(mats, titles, cols, opts));
}

void save_line_plot(const std::string& path, const std::vector<Series>& series,
                    const LinePlotOptions& opts) {
  write_png(path, line_plot(series, opts));
}

void save_line_plot(const std::string& path, const std::vector<double>& ys,
                    const LinePlotOptions& opts) {
  write_png(path, line_plot(ys, opts));
}

}  // namespace kiln::viz
