// Reductions over one dim, several dims or all dims, with keepdim.
#include <cmath>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

using detail::keepdim_shape;

// Shape after reducing sorted `dims` of s, with or without keepdim.
Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(s, dims);
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    if (k < dims.size() && dims[k] == d) {
      ++k;
      continue;
    }
    out.push_back(s[d]);
  }
  return out;
}

// All dims when `dims` is empty; otherwise wrapped and sorted.
std::vector<int64_t> resolve_dims(const char* op, const std::vector<int64_t>& dims, int64_t ndim) {
  if (dims.empty()) {
    std::vector<int64_t> all(ndim);
    for (int64_t i = 0; i < ndim; ++i) all[i] = i;
    return all;
  }
  std::vector<int64_t> wrapped = wrap_dims(op, dims, ndim);
  if (ndim == 0) return {};  // dim 0 or -1 of a 0-d tensor: nothing to reduce, as PyTorch
  return wrapped;
}

// Runs the reduction kernel; returns the keepdim-shaped result (and indices if asked).
Tensor reduce_kernel(const char* op, ReduceOp kind, const Tensor& x, const std::vector<int64_t>& dims,
                     DType out_dtype, Tensor* indices = nullptr) {
  Shape ks = keepdim_shape(x.shape(), dims);
  Tensor xin = x.dtype() == out_dtype ? x : x.to(out_dtype);
  if (dims.empty()) return xin.detach().clone();  // 0-d input: nothing to reduce
  Tensor out = detail::new_tensor(ks, out_dtype, x);
  if (indices) *indices = detail::new_tensor(ks, kInt64, x);
  if (out.numel() > 0) backend_of(op, {&x}).reduce(kind, xin, dims, out, indices);
  return out;
}

// g (reduced shape, with or without keepdim) broadcast back over x's shape.
Tensor expand_back(const Tensor& g, const Shape& x_shape, const std::vector<int64_t>& dims) {
  return g.reshape(keepdim_shape(x_shape, dims)).expand(x_shape);
}

// The extremum of an empty set is undefined: an error for a reduced dim of size 0, as
// torch ("Expected reduction dim 1 to have non-zero size"). An empty tensor reduced over
// non-empty dims gives an empty result. all_dims: the caller asked for every dim.
void check_nonempty(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool all_dims = false) {
  KILN_CHECK(!all_dims || x.numel() > 0, op, "cannot reduce an empty tensor of shape ", shape_str(x.shape()),
             " over all its dims; name the dims to reduce");
  for (int64_t d : dims)
    KILN_CHECK(x.size(d) > 0, op, "cannot reduce over dim ", d, " of size 0 (shape ",
               shape_str(x.shape()), ")");
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("sum", x);
  std::vector<int64_t> dims = resolve_dims("sum", dims_in, x.dim());
  DType t = is_floating(x.dtype()) ? x.dtype() : kInt64;  // bools and ints sum as int64
  Tensor y = reduce_kernel("sum", ReduceOp::Sum, x, dims, t).reshape(reduced_shape(x.shape(), dims, keepdim));
  if (!any_requires_grad({&x})) return y;
  Shape sx = x.shape();
  return record("sum", y, {x}, [sx, dims](const Tensor& g) -> TensorList { return {expand_back(g, sx, dims)}; });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_floating("mean", x);
  std::vector<int64_t> dims = resolve_dims("mean", dims_in, x.dim());
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  if (x.dtype() == kBFloat16) {
    // As torch's CPU mean: the sum and the division in float32, rounded once.
    Tensor s = sum(x.to(kFloat32), dims, keepdim);
    return div(s, full({}, static_cast<double>(n), TensorOptions(kFloat32).device(x.device()))).to(kBFloat16);
  }
  return mul(sum(x, dims, keepdim), 1.0 / static_cast<double>(n));
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims_in, int64_t correction, bool keepdim) {
  detail::check_floating("var", x);
  // One kernel in torch, which computes bfloat16 in float32 and rounds once.
  if (x.dtype() == kBFloat16) return var(x.to(kFloat32), dims_in, correction, keepdim).to(kBFloat16);
  std::vector<int64_t> dims = resolve_dims("var", dims_in, x.dim());
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(d);
  Tensor centred = sub(x, mean(x, dims, true));
  double denom = std::max<double>(0.0, static_cast<double>(n - correction));
  return div(sum(mul(centred, centred), dims, keepdim), denom);
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_floating("logsumexp", x);
  std::vector<int64_t> dims = resolve_dims("logsumexp", dims_in, x.dim());
  if (x.numel() == 0) {
    // log Σ over nothing is log 0 = -inf, as torch (logsumexp of a (3, 0) tensor over dim
    // 1 is [-inf, -inf, -inf]); the gradient of an empty input is empty.
    Tensor y = full(reduced_shape(x.shape(), dims, keepdim), -std::numeric_limits<double>::infinity(),
                    TensorOptions(x.dtype()).device(x.device()));
    if (!any_requires_grad({&x})) return y;
    Shape sx = x.shape();
    return record("logsumexp", y, {x}, [sx](const Tensor& g) -> TensorList {
      return {zeros(sx, TensorOptions(g.dtype()).device(g.device()))};
    });
  }
  // Shift by the (constant) max so exp never overflows; a row of -inf keeps -inf.
  Tensor m = amax(x.detach(), dims, true);
  m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
  Tensor out = add(log(sum(exp(sub(x, m)), dims, true)), m);
  return keepdim ? out : out.reshape(reduced_shape(x.shape(), dims, false));
}

namespace {
// amax/amin: the gradient is shared evenly among the elements equal to the extremum.
Tensor extremum_all(const char* op, ReduceOp kind, const Tensor& x, const std::vector<int64_t>& dims_in,
                    bool keepdim) {
  detail::check_defined(op, x);
  KILN_CHECK(x.dtype() != kBool, op, "not defined for bool tensors");
  std::vector<int64_t> dims = resolve_dims(op, dims_in, x.dim());
  check_nonempty(op, x, dims, dims_in.empty());
  Tensor yk = reduce_kernel(op, kind, x, dims, x.dtype());
  Tensor y = yk.reshape(reduced_shape(x.shape(), dims, keepdim));
  if (!any_requires_grad({&x})) return y;
  SavedTensor sx(x, op), sy(yk, op);
  return record(op, y, {x}, [sx, sy, dims](const Tensor& g) -> TensorList {
    const Tensor& xv = sx.get();
    Tensor hit = eq(xv, sy.get());
    Tensor count = sum(hit, dims, true).to(g.dtype());
    Tensor share = div(g.reshape(sy.get().shape()), count);
    return {where(hit, share, 0.0)};
  });
}

ValuesIndices extremum_dim(const char* op, ReduceOp kind, const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined(op, x);
  KILN_CHECK(x.dtype() != kBool, op, "not defined for bool tensors");
  int64_t d = wrap_dim(op, dim, x.dim());
  std::vector<int64_t> dims = x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{d};
  check_nonempty(op, x, dims);
  Tensor idx;
  Tensor yk = reduce_kernel(op, kind, x, dims, x.dtype(), dims.empty() ? nullptr : &idx);
  if (dims.empty()) idx = zeros({}, TensorOptions(kInt64).device(x.device()));
  Shape rs = reduced_shape(x.shape(), dims, keepdim);
  Tensor values = yk.reshape(rs);
  Tensor indices = idx.reshape(rs);
  if (any_requires_grad({&x})) {
    Shape sx = x.shape();
    SavedTensor si(idx, op);
    int64_t ndim = x.dim();
    values = record(op, values, {x}, [sx, si, d, ndim, dims](const Tensor& g) -> TensorList {
      if (dims.empty()) return {g.reshape(sx)};
      // One-hot along d at the saved index: positions (…, i, …) with i == index.
      Shape pos_shape(ndim, 1);
      pos_shape[d] = sx[d];
      Tensor pos = arange(0, static_cast<double>(sx[d]), 1, TensorOptions(kInt64).device(g.device())).reshape(pos_shape);
      Tensor hit = eq(pos, si.get());
      return {where(hit, g.reshape(si.get().shape()), 0.0)};
    });
  }
  return {values, indices};
}
}  // namespace

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_all("amax", ReduceOp::Max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_all("amin", ReduceOp::Min, x, dims, keepdim);
}
Tensor max(const Tensor& x) { return extremum_all("max", ReduceOp::Max, x, {}, false); }
Tensor min(const Tensor& x) { return extremum_all("min", ReduceOp::Min, x, {}, false); }
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum_dim("max", ReduceOp::Max, x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum_dim("min", ReduceOp::Min, x, dim, keepdim);
}

Tensor argmax(const Tensor& x) {
  detail::check_defined("argmax", x);
  return argmax(x.reshape({-1}), 0, false);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return extremum_dim("argmax", ReduceOp::Max, x, dim, keepdim).indices;
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  return extremum_dim("argmin", ReduceOp::Min, x, dim, keepdim).indices;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  KILN_CHECK(lead >= 0, "sum_to", "cannot sum a tensor of shape ", shape_str(g.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && g.size(d) != 1) {
      dims.push_back(d);
    } else {
      KILN_CHECK(shape[d - lead] == g.size(d), "sum_to", "cannot sum a tensor of shape ",
                 shape_str(g.shape()), " to ", shape_str(shape));
    }
  }
  if (dims.empty()) return g.reshape(shape);
  return sum(g, dims, true).reshape(shape);
}

}  // namespace kiln
