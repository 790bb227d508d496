// checkpoint_sequential (checkpoint_sequential.h).
#include "nn/checkpoint_sequential.h"

#include <memory>
#include <vector>

#include "core/error.h"

namespace kiln::utils {

Tensor checkpoint_sequential(const nn::Sequential& seq, int64_t segments, const Tensor& input,
                             CheckpointOptions options) {
  const auto n = static_cast<int64_t>(seq.size());
  KILN_CHECK(segments >= 1 && segments <= n, "checkpoint_sequential",
             "segments must be between 1 and the number of modules (", n, "), got ", segments);
  const int64_t run = n / segments;
  Tensor x = input;
  int64_t start = 0;
  for (int64_t s = 0; s + 1 < segments; ++s, start += run) {
    // The modules by value: the run is done again in backward, after this call returned.
    std::vector<std::shared_ptr<nn::UnaryModule>> modules;
    for (int64_t i = start; i < start + run; ++i) modules.push_back(seq[static_cast<size_t>(i)]);
    x = checkpoint(
        [modules](const Tensor& t) {
          Tensor h = t;
          for (const auto& m : modules) h = m->forward(h);
          return h;
        },
        x, options);
  }
  for (int64_t i = start; i < n; ++i) x = seq[static_cast<size_t>(i)]->forward(x);
  return x;
}

}  // namespace kiln::utils
