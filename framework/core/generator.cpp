#include "core/generator.h"

namespace kiln {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.seed;
}

GeneratorState Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}

void Generator::set_state(const GeneratorState& s) {
  std::lock_guard<std::mutex> lock(mu_);
  state_ = s;
}

uint64_t Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t first = state_.offset;
  state_.offset += blocks;
  return first;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }


}  // namespace kiln
