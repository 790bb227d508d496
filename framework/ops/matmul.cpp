// torch.matmul semantics on top of one batched kernel.
#include "ops/op_helpers.h"

namespace kiln {
namespace {

void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  KILN_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), op,
             "expected floating-point operands, got ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  KILN_CHECK(a.dtype() == b.dtype(), op, "expected both operands to have the same dtype, got ",
             dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, op, "both arguments need at least 1 dimension, got shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
}

// a (…, M, K) @ b (…, K, N), both at least 2-D, batch dims broadcast.
Tensor matmul_nd(const Tensor& a, const Tensor& b, const Shape& a_user, const Shape& b_user) {
  const int64_t K = a.size(-1);
  KILN_CHECK(b.size(-2) == K, "matmul", "shapes ", shape_str(a_user), " and ", shape_str(b_user),
             " cannot be multiplied (", K, " != ", b.size(-2), ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes("matmul", ba, bb);
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {a.size(-2), K});
  sb.insert(sb.end(), {K, b.size(-1)});
  so.insert(so.end(), {a.size(-2), b.size(-1)});
  Tensor out = detail::new_tensor(so, a.dtype(), a);
  backend_of("matmul", {&a, &b}).matmul(a.detach().expand(sa), b.detach().expand(sb), out);
  if (!any_requires_grad({&a, &b})) return out;
  bool ga = detail::needs_grad(a), gb = detail::needs_grad(b);
  SavedTensor sva(gb ? a : Tensor(), "matmul"), svb(ga ? b : Tensor(), "matmul");
  Shape a_shape = a.shape(), b_shape = b.shape();
  return record("matmul", out, {a, b}, [=](const Tensor& g) -> TensorList {
    // dA = g @ B^T, dB = A^T @ g; transposes are views, handed to BLAS as flags.
    return {ga ? sum_to(matmul(g, svb.get().transpose(-1, -2)), a_shape) : Tensor(),
            gb ? sum_to(matmul(sva.get().transpose(-1, -2), g), b_shape) : Tensor()};
  });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul_operands("matmul", a, b);
  if (a.dim() == 1 && b.dim() == 1) {
    KILN_CHECK(a.size(0) == b.size(0), "matmul", "shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " cannot be multiplied (", a.size(0), " != ", b.size(0), ")");
    return matmul_nd(a.unsqueeze(0), b.unsqueeze(1), a.shape(), b.shape()).reshape({});
  }
  if (a.dim() == 1) return matmul_nd(a.unsqueeze(0), b, a.shape(), b.shape()).squeeze(-2);
  if (b.dim() == 1) return matmul_nd(a, b.unsqueeze(1), a.shape(), b.shape()).squeeze(-1);
  if (a.dim() > 2 && b.dim() == 2) {
    // (…, M, K) @ (K, N): fold the batch into M for one large gemm (and a single weight
    // gradient product instead of a sum over the batch).
    KILN_CHECK(b.size(0) == a.size(-1), "matmul", "shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " cannot be multiplied (", a.size(-1), " != ", b.size(0), ")");
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.size(1));
    return matmul_nd(a.reshape({-1, a.size(-1)}), b, a.shape(), b.shape()).view(out_shape);
  }
  return matmul_nd(a, b, a.shape(), b.shape());
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("mm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expected 2-D tensors, got shapes ", shape_str(a.shape()),
             " and ", shape_str(b.shape()));
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("bmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bmm",
             "expected 3-D tensors with equal batch, got shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  return matmul(a, b);
}

// The weight's transpose is a view that BLAS reads with a transpose flag (no copy).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? add(y, bias) : y;
}

}  // namespace kiln
