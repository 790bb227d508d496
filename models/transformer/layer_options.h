#pragma once
// The constructor arguments shared by nn.TransformerEncoderLayer and DecoderLayer.
#include <cstdint>
#include <string>

namespace kiln::transformer {

struct TransformerLayerOptions {
  int64_t d_model = 512;
  int64_t nhead = 8;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // relu | gelu | gelu_tanh
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm (003) instead of the paper's post-norm
};

// opts with d_model and nhead replaced (the (d_model, nhead, opts) constructors).
inline TransformerLayerOptions with_sizes(TransformerLayerOptions opts, int64_t d_model, int64_t nhead) {
  opts.d_model = d_model;
  opts.nhead = nhead;
  return opts;
}

}  // namespace kiln::transformer
