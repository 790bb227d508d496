// index_add, index_add_ and the Tensor method: whole slices of a source added into x at
// the positions along dim that a 1-D int64 index names.
#include <cmath>

#include "ops/index_op_helpers.h"

namespace kiln {
namespace {

using detail::as_1d_view;
using detail::rank_at_least_1;
using detail::size_at_least_1d;

// torch's rules: index 0-D or 1-D int64, source of x's dtype and rank, x's sizes apart
// from dim, where it has one slice per index. Returns the wrapped dim.
int64_t check_index_add(const char* op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  detail::check_defined(op, x);
  detail::check_defined(op, index, "index");
  detail::check_defined(op, source, "source");
  KILN_CHECK(index.dtype() == kInt64, op, "index must be an int64 tensor, got ", dtype_name(index.dtype()));
  KILN_CHECK(index.dim() <= 1, op, "index must be 0-D or 1-D, got shape ", shape_str(index.shape()));
  const int64_t d = wrap_dim(op, dim, x.dim());
  KILN_CHECK(source.dtype() == x.dtype(), op, "source has dtype ", dtype_name(source.dtype()), " but self has ",
             dtype_name(x.dtype()), " (they must be the same)");
  KILN_CHECK(rank_at_least_1(source) == rank_at_least_1(x), op, "source of shape ", shape_str(source.shape()),
             " must have as many dimensions as self of shape ", shape_str(x.shape()));
  for (int64_t k = 0; k < rank_at_least_1(x); ++k) {
    KILN_CHECK(k == d || size_at_least_1d(source, k) == size_at_least_1d(x, k), op, "source of shape ",
               shape_str(source.shape()), " does not match self of shape ", shape_str(x.shape()), " at dim ", k,
               " (only dim ", d, " may differ)");
  }
  KILN_CHECK(index.numel() == size_at_least_1d(source, d), op, "number of indices (", index.numel(),
             ") must equal source.size(", d, ") (", size_at_least_1d(source, d), ")");
  return d;
}

// alpha as the kernel takes it: an integer for int64 (torch truncates it), checked to fit.
double kernel_alpha(const char* op, double alpha, DType t) {
  if (t != kInt64) return alpha;
  detail::check_int64_scalar(op, "alpha", alpha);
  return std::trunc(alpha);
}

// The gradient of source from g: g's slices at index (source's slice i went to x's slice
// index[i]), times alpha.
Tensor source_grad(const Tensor& g, int64_t d, const Tensor& index, const Shape& source_shape, double alpha) {
  Tensor g1 = g.dim() == 0 ? g.reshape({1}) : g;
  Tensor picked = index_select(g1, d, index.reshape({-1})).reshape(source_shape);
  return alpha == 1.0 ? picked : mul(picked, alpha);
}

void index_add_into(Backend& be, const Tensor& self, int64_t d, const Tensor& index, const Tensor& source,
                    double alpha) {
  be.index_add(as_1d_view(self), d, as_1d_view(index.detach()), as_1d_view(source.detach()), alpha);
}

}  // namespace

// x (.., N, ..), index (K), source (.., K, ..) -> x's shape
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  const char* op = "index_add";
  const int64_t d = check_index_add(op, x, dim, index, source);
  const double a = kernel_alpha(op, alpha, x.dtype());
  Backend& be = backend_of(op, {&x, &index, &source});
  Tensor out = x.detach().clone();
  index_add_into(be, out, d, index, source, a);
  if (!any_requires_grad({&x, &source})) return out;
  SavedTensor si(index, op);
  const Shape source_shape = source.shape();
  const bool gx = detail::needs_grad(x), gs = detail::needs_grad(source);
  return record(op, out, {x, source}, [=](const Tensor& g) -> TensorList {
    return {gx ? g : Tensor(), gs ? source_grad(g, d, si.get(), source_shape, a) : Tensor()};
  });
}

// In place, recorded under autograd as index_add (detail::apply_inplace).
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  const char* op = "index_add_";
  Tensor& self = *this;
  detail::check_defined(op, self);
  const int64_t d = check_index_add(op, self, dim, index, source);
  const double a = kernel_alpha(op, alpha, dtype());
  detail::check_inplace_no_overlap(op, self, {&index, &source});
  Backend& be = backend_of(op, {this, &index, &source});
  return detail::apply_inplace(
      op, self, {&source}, [&] { index_add_into(be, self, d, index, source, a); },
      [&]() -> BackwardFn {
        SavedTensor si(index, op);
        const Shape source_shape = source.shape();
        return [si, d, a, source_shape](const Tensor& g) -> TensorList {
          return {g, source_grad(g, d, si.get(), source_shape, a)};
        };
      });
}

}  // namespace kiln
