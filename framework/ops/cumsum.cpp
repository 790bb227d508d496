// cumsum and the Tensor method. The gradient of a running sum is the running sum of the
// gradient taken from the other end, which is the same kernel run in reverse.
#include "ops/index_op_helpers.h"

namespace kiln {
namespace {

// x (.., N, ..) -> (.., N, ..): running sums along d, from the end when reverse.
Tensor running_sum(const Tensor& x, int64_t d, bool reverse) {
  Tensor out = detail::new_tensor(x.shape(), x.dtype(), x);
  backend_of("cumsum", {&x}).cumsum(detail::as_1d_view(x.detach()), d, reverse, detail::as_1d_view(out));
  if (!any_requires_grad({&x})) return out;
  return record("cumsum", out, {x}, [d, reverse](const Tensor& g) -> TensorList {
    return {running_sum(g, d, !reverse)};
  });
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const char* op = "cumsum";
  detail::check_defined(op, x);
  const int64_t d = wrap_dim(op, dim, x.dim());
  const DType t = dtype ? *dtype : (is_floating(x.dtype()) ? x.dtype() : kInt64);
  KILN_CHECK(t != kBool, op, "cannot sum in bool (dtype=bool); use int64");
  // A floating target keeps the graph (to_dtype's gradient converts back); int64 cuts it.
  return running_sum(x.dtype() == t ? x : to_dtype(x, t), d, false);
}

}  // namespace kiln
