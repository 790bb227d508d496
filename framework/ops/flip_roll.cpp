// flip (reverse along dims) and roll (cyclic shift along dims). flip picks the reversed
// rows with index_select and records its own backward (flipping the gradient back);
// roll is a cat of two narrowed pieces, differentiable through them.
#include "ops/op_helpers.h"

namespace kiln {

// x -> x with the order of elements reversed along each of dims (same shape)
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  const char* op = "flip";
  detail::check_defined(op, x);
  const std::vector<int64_t> ds = wrap_dims(op, dims, x.dim());  // wrapped, sorted, no repeats
  if (x.numel() <= 1 || ds.empty()) return clone(x);  // nothing to reverse: a copy, as torch
  Tensor y = x.detach();
  {
    NoGradGuard no_grad;  // the gathers are the forward only; flip's node below is the backward
    for (int64_t d : ds) {
      const double n = static_cast<double>(x.size(d));
      y = index_select(y, d, arange(n - 1, -1, -1, TensorOptions(kInt64).device(x.device())));
    }
  }
  return record(op, y, {x}, [ds](const Tensor& g) -> TensorList { return {flip(g, ds)}; });
}

// x -> x shifted along each dims[i] by shifts[i], wrapping around (same shape)
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  const char* op = "roll";
  detail::check_defined(op, x);
  KILN_CHECK(!shifts.empty(), op, "shifts must not be empty");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, op, "shifts and dims must align: ", shifts.size(),
               " shifts with no dims (a flattened roll takes one shift)");
    return roll(x.reshape({-1}), shifts, {0}).reshape(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), op, "shifts and dims must align: ", shifts.size(), " shifts, ",
             dims.size(), " dims");
  KILN_CHECK(x.dim() > 0, op, "dims given for a 0-d tensor (roll it with no dims)");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(op, dims[i], x.dim());
    const int64_t n = x.size(d);
    if (n == 0) continue;
    const int64_t k = ((shifts[i] % n) + n) % n;  // in [0, n): the last k elements come first
    if (k == 0) continue;
    y = cat({narrow(y, d, n - k, k), narrow(y, d, 0, n - k)}, d);
  }
  return y.same_storage(x) ? clone(y) : y;  // new memory even when nothing moved, as torch
}

Tensor roll(const Tensor& x, int64_t shifts, std::optional<int64_t> dim) {
  if (dim) return roll(x, std::vector<int64_t>{shifts}, std::vector<int64_t>{*dim});
  return roll(x, std::vector<int64_t>{shifts}, std::vector<int64_t>{});
}

}  // namespace kiln
