#pragma once
// The three training-step configurations of the benchmarks (issue 5), shared by the
// Kiln benchmarks; benchmarks/torch_train_step.py repeats them for PyTorch.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct TrainConfig {
  std::string name;
  int64_t vocab, d_model, heads, layers, d_ff, batch, seq;
};

inline const std::vector<TrainConfig>& train_configs() {
  static const std::vector<TrainConfig> configs = {
      {"seed", 5000, 512, 8, 6, 2048, 64, 100},  // the base size the seeds train at
      {"small", 1000, 128, 4, 2, 512, 32, 32},
      {"tiny", 16, 64, 4, 2, 128, 2, 6},
  };
  return configs;
}

inline const TrainConfig& train_config(const std::string& name) {
  for (const TrainConfig& c : train_configs()) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument("unknown configuration '" + name + "' (seed, small or tiny)");
}

// Token ids of sentence i, position j: non-zero ids, and the last (i % 4) positions of a
// sentence are padding (id 0), so that masks and ignore_index do real work. The same
// formula is in torch_train_step.py.
inline int64_t token_at(int64_t i, int64_t j, int64_t seq, int64_t vocab, int64_t salt) {
  if (j >= seq - (i % 4)) return 0;
  uint64_t h = static_cast<uint64_t>(i * 1000003 + j * 7919 + salt * 104729);
  h ^= h >> 13;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return 1 + static_cast<int64_t>(h % static_cast<uint64_t>(vocab - 1));
}

}  // namespace bench
