// torch.matmul semantics on top of one batched kernel. Under autocast (autograd/autocast.h)
// float32 operands are rounded to bfloat16 and the kernel's mixed product (float32
// accumulation and output) runs, in forward and in backward.
#include <tuple>

#include "autograd/autocast_cast.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "first operand");
  detail::check_defined(op, b, "second operand");
  KILN_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), op,
             "expected floating-point operands, got ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  // Under autocast float32 and bfloat16 mix, as in torch: both become bfloat16.
  KILN_CHECK(a.dtype() == b.dtype() || detail::autocast_applies({&a, &b}), op,
             "expected both operands to have the same dtype, got ", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()));
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, op, "both arguments need at least 1 dimension, got shapes ",
             shape_str(a.shape()), " and ", shape_str(b.shape()));
}

// a (…, M, K) @ b (…, K, N) into a new `dtype` tensor, batch dims broadcast (checked),
// without recording: the backend's kernel, bfloat16 operands into float32 under autocast.
Tensor product(const char* op, const Tensor& a, const Tensor& b, DType dtype) {
  const int64_t K = a.size(-1);
  Shape batch = broadcast_shapes(op, Shape(a.shape().begin(), a.shape().end() - 2),
                                 Shape(b.shape().begin(), b.shape().end() - 2));
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {a.size(-2), K});
  sb.insert(sb.end(), {K, b.size(-1)});
  so.insert(so.end(), {a.size(-2), b.size(-1)});
  Tensor out = detail::new_tensor(so, dtype, a, op);
  backend_of("matmul", {&a, &b}).matmul(a.expand(sa), b.expand(sb), out);
  return out;
}

// matmul_nd under autocast: the product of a and b rounded to bfloat16 (a weight's copy
// cached), float32 out. Backward runs the mixed product too, on g rounded once and the
// bfloat16 operands saved (half the bytes of float32 ones); the gradients are float32,
// or an operand's own dtype (bfloat16 given as bfloat16).
Tensor matmul_autocast(const char* op, const Tensor& a, const Tensor& b) {
  const Tensor al = detail::autocast_operand(a, op), bl = detail::autocast_operand(b, op);
  Tensor out = product(op, al, bl, kFloat32);
  if (!any_requires_grad({&a, &b})) return out;
  const bool ga = detail::needs_grad(a), gb = detail::needs_grad(b);
  SavedTensor sva(gb ? al : Tensor(), "matmul"), svb(ga ? bl : Tensor(), "matmul");
  const Shape a_shape = a.shape(), b_shape = b.shape();
  const DType a_dtype = a.dtype(), b_dtype = b.dtype();
  return record("matmul", out, {a, b}, [=](const Tensor& g) -> TensorList {
    const Tensor gl = detail::autocast_operand(g, "matmul");
    Tensor da, db;
    if (ga) da = sum_to(product("matmul", gl, svb.get().transpose(-1, -2), kFloat32), a_shape).to(a_dtype);
    if (gb) db = sum_to(product("matmul", sva.get().transpose(-1, -2), gl, kFloat32), b_shape).to(b_dtype);
    return {da, db};
  });
}

// a (…, M, K) @ b (…, K, N), both at least 2-D, batch dims broadcast. `op` is the
// public function called (mm and bmm come here too), for the messages.
Tensor matmul_nd(const char* op, const Tensor& a, const Tensor& b, const Shape& a_user, const Shape& b_user) {
  const int64_t K = a.size(-1);
  KILN_CHECK(b.size(-2) == K, op, "shapes ", shape_str(a_user), " and ", shape_str(b_user),
             " cannot be multiplied (", K, " != ", b.size(-2), ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  KILN_CHECK(can_broadcast(ba, bb), op, "shapes ", shape_str(a_user), " and ", shape_str(b_user),
             " cannot be multiplied: their batch dims ", shape_str(ba), " and ", shape_str(bb), " cannot be broadcast");
  if (detail::autocast_applies({&a, &b})) return matmul_autocast(op, a, b);
  Tensor out = product(op, a.detach(), b.detach(), a.dtype());
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

// matmul's dispatch on the operands' ranks; mm and bmm (checked already) report as themselves.
Tensor matmul_as(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dim() == 1 && b.dim() == 1) {
    KILN_CHECK(a.size(0) == b.size(0), op, "shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " cannot be multiplied (", a.size(0), " != ", b.size(0), ")");
    return matmul_nd(op, a.unsqueeze(0), b.unsqueeze(1), a.shape(), b.shape()).reshape({});
  }
  if (a.dim() == 1) return matmul_nd(op, a.unsqueeze(0), b, a.shape(), b.shape()).squeeze(-2);
  if (b.dim() == 1) return matmul_nd(op, a, b.unsqueeze(1), a.shape(), b.shape()).squeeze(-1);
  if (a.dim() > 2 && b.dim() == 2) {
    // (…, M, K) @ (K, N): fold the batch into M for one large gemm (and a single weight
    // gradient product instead of a sum over the batch).
    KILN_CHECK(b.size(0) == a.size(-1), op, "shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " cannot be multiplied (", a.size(-1), " != ", b.size(0), ")");
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    out_shape.push_back(b.size(1));
    return matmul_nd(op, a.reshape({-1, a.size(-1)}), b, a.shape(), b.shape()).view(out_shape);
  }
  return matmul_nd(op, a, b, a.shape(), b.shape());
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul_operands("matmul", a, b);
  return matmul_as("matmul", a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("mm", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm", "expected 2-D tensors, got shapes ", shape_str(a.shape()),
             " and ", shape_str(b.shape()));
  return matmul_as("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("bmm", a, b);
  KILN_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0), "bmm",
             "expected 3-D tensors with equal batch, got shapes ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  return matmul_as("bmm", a, b);
}

namespace {

// Backward of linear: g (rows, out) ->
//   grad x (rows, in) = g W,  grad W (out, in) = gᵀ x,  grad b (out) = Σ_rows g.
// The weight gradient comes out in the weight's own layout: the same product through
// matmul and transpose would hand the leaf a transposed view that accumulate_grad has
// to copy, every step, for every weight. Where the input's gradient already has a
// buffer (a residual connection's), the GEMM adds into it (BLAS beta = 1). Under
// autocast the saved x and W are their bfloat16 copies and g is rounded once for both
// products (mixed: float32 accumulation and gradients), in the pass that sums it for the
// bias gradient.
class LinearBackward final : public Node {
 public:
  struct Spec {
    Shape x_shape;
    int64_t rows;
    bool grad_x, grad_bias;
    bool autocast;                        // x2 and weight are bfloat16, g is rounded
    DType x_dtype, weight_dtype, bias_dtype;  // the gradients' dtypes
  };

  LinearBackward(SavedTensor x2, SavedTensor weight, Spec spec)
      : Node("linear"), x2_(std::move(x2)), weight_(std::move(weight)), spec_(std::move(spec)) {}

  TensorList apply(const Tensor& g) override { return apply_accumulating(g, {}); }

  TensorList apply_accumulating(const Tensor& g, const std::vector<Tensor*>& acc) override {
    check_not_released(name(), released_);
    Tensor* acc_x = acc.size() > 0 ? acc[0] : nullptr;
    Tensor* acc_w = acc.size() > 1 ? acc[1] : nullptr;
    const int64_t out_f = g.size(-1), rows = spec_.rows;
    const Tensor g2 = g.reshape({rows, out_f});  // (rows, out)
    Tensor gl = g2, gb;  // what the GEMMs read; the bias gradient
    if (spec_.autocast && spec_.grad_bias) {
      std::tie(gl, gb) = detail::autocast_operand_and_column_sums(g2, "linear");  // g read once for both
    } else if (spec_.autocast) {
      gl = detail::autocast_operand(g2, "linear");
    } else if (spec_.grad_bias) {
      gb = sum(g2, {0});
    }
    const DType grad_dtype = spec_.autocast ? kFloat32 : g.dtype();
    Backend& be = backend_for(g.device());
    Tensor gx, gw;
    if (spec_.grad_x) {
      const Tensor w = weight_.get().detach();  // (out, in)
      if (can_accumulate(acc_x, spec_.x_shape, spec_.x_dtype, grad_dtype, g)) {
        be.matmul(gl, w, acc_x->view({rows, w.size(1)}), /*accumulate=*/true);
      } else {
        gx = product(gl, w, grad_dtype).view(spec_.x_shape).to(spec_.x_dtype);
      }
    }
    if (x2_.defined()) {
      const Tensor& x2 = x2_.get();  // (rows, in)
      const Shape w_shape = {out_f, x2.size(1)};
      if (can_accumulate(acc_w, w_shape, spec_.weight_dtype, grad_dtype, g)) {
        be.matmul(gl.t(), x2, *acc_w, /*accumulate=*/true);
      } else {
        gw = product(gl.t(), x2, grad_dtype).to(spec_.weight_dtype);
      }
    }
    if (gb.defined()) gb = gb.to(spec_.bias_dtype);
    return {gx, gw, gb};
  }

  void release() override {
    x2_ = SavedTensor();
    weight_ = SavedTensor();
    released_ = true;
  }

 private:
  // True when `acc` (a gradient buffer the engine alone holds, or null) can take the
  // GEMM's result in place: its shape, the input's dtype, which the GEMM writes (float32
  // when autocast's gradients are, else g's), and g's device.
  static bool can_accumulate(const Tensor* acc, const Shape& shape, DType input_dtype, DType grad_dtype,
                             const Tensor& g) {
    return acc && acc->shape() == shape && acc->dtype() == input_dtype && input_dtype == grad_dtype &&
           acc->device() == g.device();
  }

  // a (m, k) @ b (k, n) into a new `dtype` tensor.
  static Tensor product(const Tensor& a, const Tensor& b, DType dtype) {
    Tensor out = detail::new_tensor({a.size(0), b.size(1)}, dtype, a, "linear");
    backend_for(a.device()).matmul(a, b, out);
    return out;
  }

  SavedTensor x2_, weight_;  // what the wanted gradients need, else undefined
  Spec spec_;
  bool released_ = false;
};

}  // namespace

// y = x Wᵀ + b as one node: x (…, in), weight (out, in), bias (out) -> (…, out). Under
// autocast x and W are rounded to bfloat16 (W's copy cached) and y is float32; the bias
// is added in float32 as without autocast.
namespace {

// Under autocast a product reads and saves its input's bfloat16 copy, never the float32
// values: once the copy is made, an input that only this call holds (detail::sole_handle)
// can let its memory go before the output is allocated. Its impl stays for the node's
// edge (its grad_fn).
void release_float32_input(const Tensor& x) { x.impl()->storage.reset(); }

Tensor linear_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, bool given_up_alone) {
  const char* op = "linear";
  detail::check_floating(op, x);
  detail::check_floating(op, weight, "weight");
  KILN_CHECK(weight.dim() == 2, op, "weight must be 2-D (out_features, in_features), got shape ",
             shape_str(weight.shape()));
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_f, op, "input of shape ", shape_str(x.shape()),
             " does not end in in_features = ", in_f, " (weight ", shape_str(weight.shape()), ")");
  const bool autocast = detail::autocast_applies({&x, &weight, &bias});
  KILN_CHECK(x.dtype() == weight.dtype() || autocast, op, "input has dtype ", dtype_name(x.dtype()),
             ", the weight has ", dtype_name(weight.dtype()));
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == out_f && (bias.dtype() == weight.dtype() || autocast), op,
               "bias must be (", out_f, ") of dtype ", dtype_name(weight.dtype()), ", got shape ",
               shape_str(bias.shape()), " and dtype ", dtype_name(bias.dtype()));
  }
  Backend& be = backend_of(op, {&x, &weight, &bias});
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  // Rounded before the reshape: a layout the reshape must copy is then copied in bfloat16.
  Tensor x2 = (autocast ? detail::autocast_operand(x, op) : x.detach()).reshape({rows, in_f});  // (rows, in)
  const Tensor w = autocast ? detail::autocast_operand(weight, op) : weight.detach();
  const TensorOptions y_options = TensorOptions(autocast ? kFloat32 : x.dtype()).device(x.device());
  if (given_up_alone && autocast && x.dtype() != kBFloat16) release_float32_input(x);  // x's shape and graph stay
  Tensor y2 = detail::empty_for(op, {rows, out_f}, y_options);
  // The transpose is a BLAS flag, not a copy. With a bias the GEMM accumulates onto the
  // bias rows (or oneDNN adds it): one pass that writes them instead of one that zeroes
  // y2 and one that adds.
  if (bias.defined()) {
    be.matmul_bias(x2, w.t(), bias.detach().to(y2.dtype()).contiguous(), y2);
  } else {
    be.matmul(x2, w.t(), y2);
  }
  Shape y_shape = x.shape();
  y_shape.back() = out_f;
  Tensor y = y2.view(y_shape);
  if (!any_requires_grad({&x, &weight, &bias})) return y;
  const bool gx = detail::needs_grad(x), gw = detail::needs_grad(weight), gb = detail::needs_grad(bias);
  LinearBackward::Spec spec{x.shape(), rows, gx, gb, autocast, x.dtype(), weight.dtype(),
                            bias.defined() ? bias.dtype() : weight.dtype()};
  auto node = std::make_shared<LinearBackward>(SavedTensor(gw ? x2 : Tensor(), op),
                                               SavedTensor(gx ? (autocast ? w : weight) : Tensor(), op),
                                               std::move(spec));
  return record_node(y, {x, weight, bias}, std::move(node));
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) { return linear_impl(x, weight, bias, false); }

Tensor linear(Tensor&& x, const Tensor& weight, const Tensor& bias) {
  const Tensor given = std::move(x);  // the caller's handle let go
  return linear_impl(given, weight, bias, detail::sole_handle(given));
}

}  // namespace kiln
