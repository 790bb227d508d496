// multinomial and the Tensor method: category indices drawn from rows of weights.
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {

// probs (C) -> (num_samples), probs (R, C) -> (R, num_samples), int64
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  const char* op = "multinomial";
  detail::check_defined(op, probs);
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2, op, "prob_dist must be 1 or 2 dim, got shape ",
             shape_str(probs.shape()));
  KILN_CHECK(is_floating(probs.dtype()), op, "only supports floating-point dtypes for input, got ",
             dtype_name(probs.dtype()));
  KILN_CHECK(num_samples > 0, op, "cannot sample n_sample <= 0 samples (num_samples = ", num_samples, ")");
  const int64_t C = probs.size(-1);
  KILN_CHECK(replacement || num_samples <= C, op,
             "cannot sample n_sample > prob_dist.size(-1) samples without replacement (num_samples = ", num_samples,
             ", ", C, " categories)");
  Tensor rows = probs.dim() == 1 ? probs.detach().unsqueeze(0) : probs.detach();
  const int64_t R = rows.size(0);
  KILN_CHECK(R == 0 || num_samples <= std::numeric_limits<int64_t>::max() / R, op, "num_samples ", num_samples,
             " is too large for ", R, " rows");
  Tensor out = detail::new_tensor({R, num_samples}, kInt64, probs, op);
  if (R > 0) {
    // Philox blocks as Backend::multinomial documents: one per sample with replacement,
    // one per category without.
    Generator& g = gen ? *gen : default_generator();
    const uint64_t seed = g.seed();
    const uint64_t block = g.reserve(static_cast<uint64_t>(R) * static_cast<uint64_t>(replacement ? num_samples : C));
    backend_of(op, {&probs}).multinomial(rows, num_samples, replacement, seed, block, out);
  }
  return probs.dim() == 1 ? out.reshape({num_samples}) : out;
}

}  // namespace kiln
