// Sampling category indices from rows of non-negative weights. Every random number is a
// pure function of (seed, block + its position), so results do not depend on the thread
// count (rows run in parallel).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// Row r of probs (R, C), any strides, as doubles.
template <class T>
void load_row(const Tensor& probs, int64_t r, std::vector<double>& w) {
  const T* p = probs.data<T>() + r * probs.stride(0);
  const int64_t C = probs.size(1), sc = probs.stride(1);
  w.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) w[c] = static_cast<double>(p[c * sc]);
}

// Throws torch's errors for a weight that is negative, inf or NaN, or a row summing to 0.
void check_weights(const std::vector<double>& w, int64_t r) {
  double total = 0.0;
  for (size_t c = 0; c < w.size(); ++c) {
    KILN_CHECK(std::isfinite(w[c]) && w[c] >= 0.0, "multinomial",
               "probability tensor contains either inf, nan or element < 0 (got ", w[c], " in row ", r,
               ", category ", c, ")");
    total += w[c];
  }
  KILN_CHECK(total > 0.0, "multinomial", "invalid multinomial distribution (sum of probabilities <= 0) in row ", r);
}

// The uniform double in [0, 1) of Philox block `counter`.
double uniform_at(uint64_t seed, uint64_t counter) {
  std::array<uint32_t, 4> w = philox4x32(seed, counter);
  return uniform_double(w[0], w[1]);
}

// With replacement: sample s is the first category whose running total exceeds
// u_s · total (zero-weight categories have no width, so they are never picked).
void sample_with_replacement(const std::vector<double>& w, int64_t S, uint64_t seed, uint64_t first,
                             int64_t* out) {
  std::vector<double> cdf(w.size());
  std::partial_sum(w.begin(), w.end(), cdf.begin());
  if (!std::isfinite(cdf.back())) {
    // Finite weights whose sum overflows (1e308 twice): the same distribution scaled
    // down by the largest weight, or every draw would land on the last category.
    const double top = *std::max_element(w.begin(), w.end());
    for (size_t c = 0; c < w.size(); ++c) cdf[c] = (c ? cdf[c - 1] : 0.0) + w[c] / top;
  }
  const double total = cdf.back();
  int64_t last_positive = 0;
  for (size_t c = 0; c < w.size(); ++c)
    if (w[c] > 0) last_positive = static_cast<int64_t>(c);
  for (int64_t s = 0; s < S; ++s) {
    const double target = uniform_at(seed, first + static_cast<uint64_t>(s)) * total;
    const int64_t c = std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin();
    // u · total rounds up to total only for u a hair below 1: the last real category.
    out[s] = std::min(c, last_positive);
  }
}

// Without replacement: the S largest keys w_c / E_c with E_c ~ Exp(1), ties by index
// (exponential races: the order in which categories are drawn one by one without
// replacement, each with probability proportional to its weight). Zero weights get key
// -1, after every positive one.
void sample_without_replacement(const std::vector<double>& w, int64_t S, uint64_t seed, uint64_t first,
                                int64_t* out) {
  const int64_t C = static_cast<int64_t>(w.size());
  std::vector<double> key(w.size());
  for (int64_t c = 0; c < C; ++c) {
    const double e = -std::log1p(-uniform_at(seed, first + static_cast<uint64_t>(c)));  // in [0, inf)
    key[c] = w[c] > 0 ? w[c] / e : -1.0;  // e = 0 gives +inf: drawn first
  }
  std::vector<int64_t> perm(w.size());
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::partial_sort(perm.begin(), perm.begin() + S, perm.end(), [&](int64_t a, int64_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
  });
  std::copy(perm.begin(), perm.begin() + S, out);
}

}  // namespace

// probs (R, C) float -> out (R, S) int64 contiguous
void CpuBackend::multinomial(const Tensor& probs, int64_t S, bool replacement, uint64_t seed, uint64_t block,
                             const Tensor& out) {
  const int64_t R = probs.size(0), C = probs.size(1);
  visit_floating("multinomial", probs.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> w;
    for (int64_t r = 0; r < R; ++r) {  // all rows checked first: the same error whatever the threads
      load_row<T>(probs, r, w);
      check_weights(w, r);
    }
    int64_t* o = out.data<int64_t>();
    const uint64_t per_row = static_cast<uint64_t>(replacement ? S : C);
    parallel_for(R, std::max<int64_t>(1, kGrainElements / (64 * (C + S))), [&](int64_t r0, int64_t r1) {
      std::vector<double> row;
      for (int64_t r = r0; r < r1; ++r) {
        load_row<T>(probs, r, row);
        const uint64_t first = block + static_cast<uint64_t>(r) * per_row;
        if (replacement) {
          sample_with_replacement(row, S, seed, first, o + r * S);
        } else {
          sample_without_replacement(row, S, seed, first, o + r * S);
        }
      }
    });
  });
}

}  // namespace kiln::cpu
