// index_select: rows picked by index along one dim. Floating tensors go through the
// embedding kernel (a row gather with a scatter-add backward, native on every backend),
// so the op is differentiable; other dtypes through the gather kernel.
#include "ops/op_helpers.h"

namespace kiln {

// x (…, N, …) along dim, index (K) int64 -> (…, K, …)
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  detail::check_defined(op, x);
  detail::check_defined(op, index, "index");
  KILN_CHECK(index.dtype() == kInt64, op, "index must be an int64 tensor, got ", dtype_name(index.dtype()));
  KILN_CHECK(index.dim() <= 1, op, "index must be 0-D or 1-D, got shape ", shape_str(index.shape()));
  KILN_CHECK(x.dim() >= 1, op, "input must have at least 1 dimension, got a 0-D tensor");
  int64_t d = wrap_dim(op, dim, x.dim());
  const int64_t n = x.size(d);
  std::vector<int64_t> ids = index.reshape({-1}).to_vector<int64_t>();
  for (int64_t& i : ids) {
    KILN_CHECK(i >= -n && i < n, op, "index ", i, " is out of range for dimension ", dim, " of size ", n,
               " (shape ", shape_str(x.shape()), ")");
    if (i < 0) i += n;
  }
  const int64_t k = static_cast<int64_t>(ids.size());
  Shape out = x.shape();
  out[d] = k;
  checked_numel(op, out);  // more rows than x has may not fit
  Tensor wrapped = from_vector<int64_t>(ids, {k}, TensorOptions(kInt64).device(x.device()));
  Tensor y;
  if (is_floating(x.dtype())) {
    // Move `dim` to the front and flatten the rest: (N, rest) rows to gather.
    Tensor front = x.transpose(0, d);
    Shape rest(front.shape().begin() + 1, front.shape().end());
    Tensor rows = embedding(front.reshape({n, shape_numel(rest)}), wrapped);  // not -1: n may be 0
    Shape rows_shape = {k};
    rows_shape.insert(rows_shape.end(), rest.begin(), rest.end());
    y = rows.reshape(rows_shape).transpose(0, d);
  } else {
    // Nothing to differentiate: a gather whose index is wrapped[i] all over slice i.
    Strides spread(out.size(), 0);
    spread[d] = 1;
    y = gather(x, d, detail::make_view(wrapped, out, spread, wrapped.offset()));
  }
  if (index.dim() == 0) y = y.squeeze(d);
  own_result(y, {x, index});  // a fresh tensor, as torch's, not a view of the gather's rows
  return y;
}

}  // namespace kiln
