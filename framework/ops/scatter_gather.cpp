// gather, scatter and scatter_add, their in-place forms and Tensor methods: elements moved
// along one dim at the places an int64 index tensor names. The backend kernels check the
// index values (only they see them); the shapes are checked here.
#include "ops/index_op_helpers.h"

namespace kiln {
namespace {

using detail::as_1d_view;
using detail::rank_at_least_1;
using detail::size_at_least_1d;

// torch's shape rules for gather / scatter: index of x's rank, no larger than x apart
// from dim, and no larger than src (when given, of x's dtype) in any dim. Returns the
// wrapped dim.
int64_t check_gather_scatter(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src) {
  detail::check_defined(op, x);
  detail::check_defined(op, index, "index");
  KILN_CHECK(index.dtype() == kInt64, op, "index must be an int64 tensor, got ", dtype_name(index.dtype()));
  const int64_t d = wrap_dim(op, dim, x.dim());
  KILN_CHECK(rank_at_least_1(index) == rank_at_least_1(x), op, "index of shape ", shape_str(index.shape()),
             " must have as many dimensions as the input of shape ", shape_str(x.shape()));
  for (int64_t k = 0; k < rank_at_least_1(x); ++k) {
    KILN_CHECK(k == d || size_at_least_1d(index, k) <= size_at_least_1d(x, k), op, "index of shape ",
               shape_str(index.shape()), " is larger than the input of shape ", shape_str(x.shape()), " at dim ", k,
               " (only dim ", d, " may be larger)");
  }
  if (src) {
    detail::check_defined(op, *src, "src");
    KILN_CHECK(src->dtype() == x.dtype(), op, "src has dtype ", dtype_name(src->dtype()), " but the input has ",
               dtype_name(x.dtype()), " (they must be the same)");
    KILN_CHECK(rank_at_least_1(*src) == rank_at_least_1(index), op, "src of shape ", shape_str(src->shape()),
               " must have as many dimensions as index of shape ", shape_str(index.shape()));
    for (int64_t k = 0; k < rank_at_least_1(index); ++k) {
      KILN_CHECK(size_at_least_1d(index, k) <= size_at_least_1d(*src, k), op, "index of shape ",
                 shape_str(index.shape()), " is larger than src of shape ", shape_str(src->shape()), " at dim ", k);
    }
  }
  return d;
}

// A double scattered into a tensor of dtype t must be representable there.
void check_value_fits(const char* op, double value, DType t) {
  if (t == kInt64) detail::check_int64_scalar(op, "value", value);
}

// The leading window of t (at least 1-D) with the given shape: a view.
Tensor leading_window(const Tensor& t, const Shape& shape) {
  Strides st = t.strides();
  return detail::make_view(t, shape, st, t.offset());
}

// self[.., index[.., j, ..], ..] (+)= src[.., j, ..] in place; self, index and src
// validated; src's leading window of index's shape is read.
void scatter_into(Backend& be, const Tensor& self, int64_t d, const Tensor& index, const Tensor& src, bool accumulate) {
  Tensor i1 = as_1d_view(index.detach());
  be.scatter(as_1d_view(self), d, i1, leading_window(as_1d_view(src.detach()), i1.shape()), accumulate);
}

// self[.., index[.., j, ..], ..] = value in place.
void scatter_value_into(Backend& be, const Tensor& self, int64_t d, const Tensor& index, double value) {
  Tensor i1 = as_1d_view(index.detach());
  Tensor v = full({}, value, TensorOptions(self.dtype()).device(self.device()));
  Tensor src = detail::make_view(v, i1.shape(), Strides(i1.shape().size(), 0), v.offset());  // expanded
  be.scatter(as_1d_view(self), d, i1, src, false);
}

// The gradient of src from g: g at index's places, padded with zeros to src's shape when
// src is larger than index (only its window was read).
Tensor src_grad(const Tensor& g, int64_t d, const Tensor& index, const Shape& src_shape) {
  Tensor picked = gather(g, d, index);
  if (picked.shape() == src_shape) return picked;
  if (picked.numel() == shape_numel(src_shape)) return picked.reshape(src_shape);  // () vs (1)
  Tensor full_grad = zeros(src_shape, TensorOptions(picked.dtype()).device(picked.device()));
  NoGradGuard no_grad;
  leading_window(full_grad, picked.shape()).copy_(picked);
  return full_grad;
}

// The gradients of scatter / scatter_add's x (places overwritten by a scatter get
// nothing) and src from g; each only when wanted.
TensorList scatter_grads(const Tensor& g, int64_t d, const Tensor& index, const Shape& src_shape, bool accumulate,
                         bool want_x, bool want_src) {
  Tensor grad_x, grad_src;
  if (want_x) grad_x = accumulate ? g : scatter(g, d, index, 0.0);
  if (want_src) grad_src = src_grad(g, d, index, src_shape);
  return {grad_x, grad_src};
}

Tensor scatter_src_op(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                      bool accumulate) {
  const int64_t d = check_gather_scatter(op, x, dim, index, &src);
  Backend& be = backend_of(op, {&x, &index, &src});
  Tensor out = x.detach().clone();
  scatter_into(be, out, d, index, src, accumulate);
  if (!any_requires_grad({&x, &src})) return out;
  SavedTensor si(index, op);
  const Shape src_shape = src.shape();
  const bool gx = detail::needs_grad(x), gs = detail::needs_grad(src);
  return record(op, out, {x, src}, [=](const Tensor& g) -> TensorList {
    return scatter_grads(g, d, si.get(), src_shape, accumulate, gx, gs);
  });
}

// scatter_ / scatter_add_ with a src tensor: self (.., N, ..), index (.., n, ..), src
// (>= index's shape), in place; the gradients are those of scatter_src_op.
Tensor& scatter_src_inplace(const char* op, Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                            bool accumulate) {
  detail::check_defined(op, self);
  const int64_t d = check_gather_scatter(op, self, dim, index, &src);
  detail::check_inplace_no_overlap(op, self, {&index, &src});
  Backend& be = backend_of(op, {&self, &index, &src});
  return detail::apply_inplace(
      op, self, {&src}, [&] { scatter_into(be, self, d, index, src, accumulate); },
      [&]() -> BackwardFn {
        SavedTensor si(index, op);
        const Shape src_shape = src.shape();
        return [si, d, src_shape, accumulate](const Tensor& g) -> TensorList {
          return scatter_grads(g, d, si.get(), src_shape, accumulate, true, true);
        };
      });
}

}  // namespace

// x (.., N, ..), index (.., n, ..) -> (.., n, ..)
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "gather";
  const int64_t d = check_gather_scatter(op, x, dim, index, nullptr);
  Backend& be = backend_of(op, {&x, &index});
  Tensor out = detail::new_tensor(index.shape(), x.dtype(), x);
  be.gather(as_1d_view(x.detach()), d, as_1d_view(index.detach()), as_1d_view(out));
  if (!any_requires_grad({&x})) return out;
  SavedTensor si(index, op);
  const Shape x_shape = x.shape();
  return record(op, out, {x}, [si, d, x_shape](const Tensor& g) -> TensorList {
    return {scatter_add(zeros(x_shape, TensorOptions(g.dtype()).device(g.device())), d, si.get(), g)};
  });
}

// x (.., N, ..), index (.., n, ..), src (>= index's shape) -> x's shape
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_src_op("scatter", x, dim, index, src, false);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_src_op("scatter_add", x, dim, index, src, true);
}

// x (.., N, ..), index (.., n, ..) -> x's shape
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  const char* op = "scatter";
  const int64_t d = check_gather_scatter(op, x, dim, index, nullptr);
  check_value_fits(op, value, x.dtype());
  Backend& be = backend_of(op, {&x, &index});
  Tensor out = x.detach().clone();
  scatter_value_into(be, out, d, index, value);
  if (!any_requires_grad({&x})) return out;
  SavedTensor si(index, op);
  return record(op, out, {x}, [si, d](const Tensor& g) -> TensorList { return {scatter(g, d, si.get(), 0.0)}; });
}

// In place, recorded under autograd as the out-of-place forms (detail::apply_inplace).
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_src_inplace("scatter_", *this, dim, index, src, false);
}

Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  return scatter_src_inplace("scatter_add_", *this, dim, index, src, true);
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) {
  const char* op = "scatter_";
  Tensor& self = *this;
  detail::check_defined(op, self);
  const int64_t d = check_gather_scatter(op, self, dim, index, nullptr);
  check_value_fits(op, value, dtype());
  detail::check_inplace_no_overlap(op, self, {&index});
  Backend& be = backend_of(op, {this, &index});
  return detail::apply_inplace(
      op, self, {}, [&] { scatter_value_into(be, self, d, index, value); },
      [&]() -> BackwardFn {
        SavedTensor si(index, op);
        return [si, d](const Tensor& g) -> TensorList { return {kiln::scatter(g, d, si.get(), 0.0)}; };
      });
}

}  // namespace kiln
