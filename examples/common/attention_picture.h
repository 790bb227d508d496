#pragma once
// A picture of attention for the examples: one heatmap per head, two to a row, each
// cell a weight from 0 to 1, the query tokens down the side and the key tokens along
// the bottom.
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/viz/plot.h>

namespace kiln_examples {

// weights (H, T, S) on any device; options' labels and title as the caller sets them.
inline void save_attention_heads(const std::string& path, const kiln::Tensor& weights,
                                 kiln::viz::HeatmapOptions options) {
  const kiln::Tensor host = weights.to(kiln::Device());
  std::vector<kiln::Tensor> heads;
  std::vector<std::string> titles;
  for (int64_t h = 0; h < host.size(0); ++h) {
    heads.push_back(host.select(0, h));
    titles.push_back("head " + std::to_string(h));
  }
  options.vmin = 0.0;
  options.vmax = 1.0;
  kiln::viz::save_heatmap_grid(path, heads, titles, 2, options);
}

}  // namespace kiln_examples
