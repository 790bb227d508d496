#pragma once
// Heatmaps and line plots as RGB images (see png.h to write them), with a built-in
// 5x8 bitmap font for titles and labels. No dependency beyond Kiln itself.
//
//   viz::save_heatmap("pe.png", pe, {.title = "positional encoding",
//                                    .x_label = "dimension", .y_label = "position"});
//   viz::save_line_plot("loss.png", {{"train", train_losses}, {"valid", valid_losses, epochs_x}},
//                       {.title = "training"});
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/tensor.h"
#include "png.h"

namespace kiln::viz {

// ---------------------------------------------------------------- colours
// The ramp of every heatmap: dark navy -> blue -> teal -> green -> yellow, linear in
// RGB between five control points. Its luminance rises steadily, so it reads in
// grey-scale too. t is clamped to [0, 1]; NaN gives kNonFiniteColor.
Rgb colormap(double t);

// Heatmap cells holding NaN or +-inf are drawn in this colour (magenta, which the
// ramp never reaches) and are left out of the automatic value range.
constexpr Rgb kNonFiniteColor{255, 0, 255};

// ---------------------------------------------------------------- text
// Text is UTF-8. Each character is 6 pixels wide (5 and a space) and 8 high (with a
// descender row) times `scale`. Printable ASCII and the Latin-1 letters (à é ñ ç ü ß,
// and the capitals Ä Ö Ü; other accented capitals lose their accent) have glyphs;
// any other character is drawn as '?'. (x, y) is the top-left corner of the text.
constexpr int kCharAdvance = 6;
constexpr int kCharHeight = 8;
int text_width(std::string_view text, int scale = 1);  // pixels, no trailing space
void draw_text(Image& img, int x, int y, std::string_view text, Rgb color, int scale = 1);
// Rotated 90 degrees counter-clockwise (read bottom to top); (x, y) is the bottom-left
// corner of the rotated text, which extends up by text_width and right by kCharHeight.
void draw_text_vertical(Image& img, int x, int y, std::string_view text, Rgb color, int scale = 1);

// A straight line between two pixels (Bresenham), `width` pixels thick, clipped.
void draw_line(Image& img, int x0, int y0, int x1, int y1, Rgb color, int width = 1);

// Numbers as compactly as they read well: 0.5, 12, 1.5e-4, 3e6 (at most 3 significant
// digits).
std::string format_number(double v);

// Where a plot put its data (heatmap: the matrix of the first panel; line plot: the
// axes box, whose edges are the extremes of the value ranges), for callers that
// annotate the image and for tests.
struct Rect {
  int x = 0, y = 0, width = 0, height = 0;
};

// ---------------------------------------------------------------- heatmaps
struct HeatmapOptions {
  // Every member has an initializer so that designated initialization, {.title = "pe"},
  // draws no -Wmissing-field-initializers.
  std::string title = {};                    // above, twice the font size
  std::vector<std::string> row_labels = {};  // one per row (left), or none
  std::vector<std::string> col_labels = {};  // one per column (below, rotated), or none
  std::string x_label = {}, y_label = {};    // axis names (below / left)
  std::optional<double> vmin = {}, vmax = {};  // the colour range; default: finite min/max
  int cell = 0;                          // pixels per cell side, 1..256; 0: auto
  bool colorbar = true;
  int max_label_chars = 16;              // longer labels are cut and end in '~'
  bool index_ticks = true;               // number unlabelled rows/columns (0, 5, 10, ...)
};

// A 2-D tensor of any dtype as a grid of coloured cells: element (i, j) fills the
// cell x in [j * cell, (j + 1) * cell), y in [i * cell, (i + 1) * cell) from the
// matrix corner. Values map linearly from [vmin, vmax] to colormap([0, 1]), clamped;
// when vmin == vmax every finite cell gets colormap(0.5). A bool tensor gets
// colormap(0) for false and colormap(1) for true, with a two-swatch legend. Labels
// are drawn every k-th row/column when the cells are too small for all of them;
// without labels, rows and columns are numbered at round steps (index_ticks).
// Throws "[heatmap] ..." for a tensor that is not 2-D or is empty, label counts that do
// not match, cell out of range, vmin > vmax or not finite, or an image that would be
// too large (check_image_size). `area`, if given, receives the matrix's rectangle.
Image heatmap(const Tensor& m, const HeatmapOptions& opts = {}, Rect* area = nullptr);

// Several matrices of one shape side by side, `cols` to a row (0: about square),
// each under its title (titles: one per matrix, or none), sharing one colour range
// and one colour bar: the per-head attention weights of a layer. Row labels go left
// of the first column, column labels under the last panel of each column; opts.title
// is the title of the whole figure. `area` receives the first panel's matrix.
// Throws "[heatmap_grid] ..." as heatmap, and for no matrices or differing shapes.
Image heatmap_grid(const std::vector<Tensor>& mats, const std::vector<std::string>& titles = {},
                   int cols = 0, const HeatmapOptions& opts = {}, Rect* area = nullptr);
// The same for a 3-D tensor (N, rows, cols): N panels (a 2-D tensor is one panel).
Image heatmap_grid(const Tensor& stack, const std::vector<std::string>& titles = {},
                   int cols = 0, const HeatmapOptions& opts = {}, Rect* area = nullptr);

// ---------------------------------------------------------------- line plots
struct Series {
  std::string label;        // shown in a legend when any series has one
  std::vector<double> ys;
  std::vector<double> xs;   // one per y; empty: 0, 1, 2, ...
  std::optional<Rgb> color; // default: the next colour of a built-in palette

  Series() = default;
  // {"train", losses} or {"valid", losses, steps}: a constructor rather than an
  // aggregate, so that leaving out xs and color draws no -Wmissing-field-initializers.
  Series(std::string label, std::vector<double> ys, std::vector<double> xs = {},
         std::optional<Rgb> color = std::nullopt)
      : label(std::move(label)), ys(std::move(ys)), xs(std::move(xs)), color(color) {}
};

struct LinePlotOptions {
  std::string title = {};
  std::string x_label = "step";
  std::string y_label = "loss";
  int width = 640, height = 400;          // the whole image, 160x120 .. 16384x16384
  bool log_y = false;                     // log10 y axis (non-positive ys are skipped)
  std::optional<double> y_min = {}, y_max = {};  // the y range; by default the data's, padded 5%
  int line_width = 2;                     // 1..8
};

// Lines through each series' points in order, with axes, ticks and grid lines at round
// numbers (whole x steps when every x is whole), a title and a legend of the labelled
// series (top right). The x range is the data's; the y range the data's padded by 5%
// unless y_min / y_max are given (points outside are clipped). Non-finite points (and,
// with log_y, non-positive ones) are skipped and break the line, so a diverged run
// still plots; a series of 40 points or fewer also gets a marker on each point.
// Throws "[line_plot] ..." when there is no series or no plottable point in any, xs of
// the wrong length or not finite, the size or line width out of range, or y_min >= y_max.
// `area` receives the axes box.
Image line_plot(const std::vector<Series>& series, const LinePlotOptions& opts = {},
                Rect* area = nullptr);
Image line_plot(const std::vector<double>& ys, const LinePlotOptions& opts = {},
                Rect* area = nullptr);

// ---------------------------------------------------------------- to files
void save_heatmap(const std::string& path, const Tensor& m, const HeatmapOptions& opts = {});
void save_heatmap_grid(const std::string& path, const std::vector<Tensor>& mats,
                       const std::vector<std::string>& titles = {}, int cols = 0,
                       const HeatmapOptions& opts = {});
void save_line_plot(const std::string& path, const std::vector<Series>& series,
                    const LinePlotOptions& opts = {});
void save_line_plot(const std::string& path, const std::vector<double>& ys,
                    const LinePlotOptions& opts = {});

}  // namespace kiln::viz
