#pragma once
// What nn.TransformerEncoder and nn.TransformerDecoder share: their list of layers, made
// as deep copies of one layer or fresh from options.
#include <memory>

#include <kiln/kiln.h>
#include "layer_options.h"

namespace kiln::transformer::detail {

// num_layers layers made by make(), in order (num_layers checked, for `op`).
template <class Layer, class Make>
std::shared_ptr<nn::ModuleList<Layer>> layer_list(const char* op, int64_t num_layers, Make make) {
  KILN_CHECK(num_layers >= 0, op, "num_layers must be non-negative, got ", num_layers);
  auto list = std::make_shared<nn::ModuleList<Layer>>();
  for (int64_t i = 0; i < num_layers; ++i) list->push_back(make());
  return list;
}

// num_layers deep copies of `layer` (identical initial weights, as torch's _get_clones);
// `layer_arg` names the argument in the message when it is null.
template <class Layer>
std::shared_ptr<nn::ModuleList<Layer>> layer_clones(const char* op, const char* layer_arg,
                                                     const std::shared_ptr<Layer>& layer, int64_t num_layers) {
  KILN_CHECK(layer != nullptr, op, layer_arg, " must not be null");
  return layer_list<Layer>(op, num_layers, [&] { return layer->clone(); });
}

// num_layers layers built from `options`, each initialised independently.
template <class Layer>
std::shared_ptr<nn::ModuleList<Layer>> fresh_layers(const char* op, const TransformerLayerOptions& options,
                                                    int64_t num_layers) {
  return layer_list<Layer>(op, num_layers, [&] { return std::make_shared<Layer>(options); });
}

}  // namespace kiln::transformer::detail
