// sort, argsort and topk with their Tensor methods. The values' gradient goes back to the
// places they were picked from (the indices along dim are distinct, so a scatter).
#include "ops/index_op_helpers.h"

namespace kiln {
namespace {

using detail::as_1d_view;

// values picked from x along d at `indices` (distinct along d), with that backward.
Tensor record_picked(const char* op, const Tensor& values, const Tensor& x, int64_t d, const Tensor& indices) {
  if (!any_requires_grad({&x})) return values;
  SavedTensor si(indices, op);
  const Shape x_shape = x.shape();
  return record(op, values, {x}, [si, d, x_shape](const Tensor& g) -> TensorList {
    return {scatter(zeros(x_shape, TensorOptions(g.dtype()).device(g.device())), d, si.get(), g)};
  });
}

}  // namespace

// x (.., N, ..) -> values (.., N, ..), indices (.., N, ..) int64
ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool /*stable: Kiln's sort always is*/) {
  const char* op = "sort";
  detail::check_defined(op, x);
  const int64_t d = wrap_dim(op, dim, x.dim());
  Tensor values = detail::new_tensor(x.shape(), x.dtype(), x);
  Tensor indices = detail::new_tensor(x.shape(), kInt64, x);
  backend_of(op, {&x}).sort(as_1d_view(x.detach()), d, descending, as_1d_view(values), as_1d_view(indices));
  return {record_picked(op, values, x, d, indices), indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  NoGradGuard no_grad;
  return sort(x, dim, descending, stable).indices;
}

// x (.., N, ..) -> values (.., k, ..), indices (.., k, ..) int64
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted: Kiln always sorts*/) {
  const char* op = "topk";
  detail::check_defined(op, x);
  const int64_t d = wrap_dim(op, dim, x.dim());
  KILN_CHECK(x.dtype() != kBool, op, "not defined for bool tensors");
  const int64_t n = detail::size_at_least_1d(x, d);
  KILN_CHECK(k >= 0 && k <= n, op, "selected index k out of range: k = ", k, " for dim ", d, " of size ", n);
  // A 0-D x gives itself for k = 0 as well as k = 1, as in torch.
  Shape shape = x.shape();
  if (x.dim() > 0) shape[d] = k;
  const int64_t kernel_k = x.dim() == 0 ? 1 : k;
  Tensor values = detail::new_tensor(shape, x.dtype(), x);
  Tensor indices = detail::new_tensor(shape, kInt64, x);
  backend_of(op, {&x}).topk(as_1d_view(x.detach()), kernel_k, d, largest, as_1d_view(values), as_1d_view(indices));
  return {record_picked(op, values, x, d, indices), indices};
}

}  // namespace kiln
