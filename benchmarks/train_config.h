#pragma once
// The three training-step configurations of the benchmarks, shared by the Kiln
// benchmarks; benchmarks/torch_train_step.py repeats them for PyTorch. "base" is the
// paper's base Transformer (d_model 512, 8 heads, 6 layers, d_ff 2048) on a 5000-word
// vocabulary; "seed", its earlier name here, is still accepted for it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

struct TrainConfig {
  std::string name;
  int64_t vocab, d_model, heads, layers, d_ff, batch, seq;
  int default_steps;  // timed steps when the command line does not say
};

inline const std::vector<TrainConfig>& train_configs() {
  static const std::vector<TrainConfig> configs = {
      {"base", 5000, 512, 8, 6, 2048, 64, 100, 3},
      {"small", 1000, 128, 4, 2, 512, 32, 32, 20},
      {"tiny", 16, 64, 4, 2, 128, 2, 6, 200},
  };
  return configs;
}

// The names a user may pass to --config, for usage texts.
inline constexpr const char* kConfigNames = "base|small|tiny (seed: another name for base)";

// The configuration called `name` ("seed" gives "base").
inline const TrainConfig& train_config(const std::string& name) {
  const std::string wanted = name == "seed" ? "base" : name;
  for (const TrainConfig& c : train_configs()) {
    if (c.name == wanted) return c;
  }
  throw std::invalid_argument("unknown configuration '" + name + "': expected base, small or tiny (seed is another name for base)");
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
