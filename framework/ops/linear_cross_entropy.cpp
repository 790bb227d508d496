// linear_cross_entropy: cross_entropy(linear(input, weight, bias), target) without ever
// holding the (rows, classes) logits whole, the idea of PyTorch's proposed
// torch.nn.functional.linear_cross_entropy (pytorch/pytorch#124480). The rows go through
// in chunks: each chunk's logits are made, give their losses and, under grad mode, their
// gradient at once, which the two products of linear's backward take to the input's and
// the weight's gradients; the chunk's logits then go. Backward only scales the gradients
// kept (input (N, D), weight (V, D), bias (V)) by the upstream gradient: a language
// model's generator + loss then holds no (N, V) tensor between forward and backward,
// where the composition holds the logits from forward on, and their gradient besides in
// backward.
#include <algorithm>
#include <tuple>

#include "autograd/autocast_cast.h"
#include "autograd/grad_mode.h"
#include "ops/op_helpers.h"

namespace kiln {

namespace {

constexpr const char* kLinearCrossEntropy = "linear_cross_entropy";

// Rows per chunk when the caller leaves it to us: about 16 MiB of float32 logits, large
// enough for the products to run at their full rate, small beside the whole (N, V).
int64_t default_chunk_rows(int64_t classes) {
  return std::max<int64_t>(1, (int64_t{16} << 20) / (4 * std::max<int64_t>(classes, 1)));
}

void check_arguments(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                     Reduction reduction,
                     double label_smoothing, int64_t chunk_rows) {
  detail::check_floating(kLinearCrossEntropy, input);
  detail::check_floating(kLinearCrossEntropy, weight, "weight");
  detail::check_defined(kLinearCrossEntropy, target, "target");
  KILN_CHECK(weight.dim() == 2, kLinearCrossEntropy, "weight must be 2-D (classes, in_features), got shape ",
             shape_str(weight.shape()));
  KILN_CHECK(input.dim() >= 1 && input.size(-1) == weight.size(1), kLinearCrossEntropy, "input of shape ", shape_str(input.shape()),
             " does not end in in_features = ", weight.size(1), " (weight ", shape_str(weight.shape()), ")");
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), kLinearCrossEntropy, "bias must be (",
             weight.size(0), "), got shape ", shape_str(bias.shape()));
  KILN_CHECK(weight.size(0) > 0, kLinearCrossEntropy, "weight has no classes (shape ", shape_str(weight.shape()), ")");
  KILN_CHECK(target.dtype() == kInt64, kLinearCrossEntropy, "target must be an int64 tensor of class indices, got ",
             dtype_name(target.dtype()));
  Shape rows_shape = input.shape();
  rows_shape.pop_back();
  KILN_CHECK(target.shape() == rows_shape, kLinearCrossEntropy, "expected target of shape ", shape_str(rows_shape),
             " for input of shape ", shape_str(input.shape()), ", got ", shape_str(target.shape()));
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, kLinearCrossEntropy, "label_smoothing must be in [0, 1], got ",
             label_smoothing);
  KILN_CHECK(chunk_rows >= 0, kLinearCrossEntropy, "chunk_rows must be >= 0 (0: automatic), got ", chunk_rows);
  detail::check_reduction(kLinearCrossEntropy, reduction);
}

// Every target a class or ignore_index, checked before the first chunk so that a bad one
// is reported at its place in the whole target, not in its chunk.
void check_targets(const Tensor& t, int64_t ignore_index, int64_t classes) {
  NoGradGuard no_grad;
  const Tensor bad = logical_and(ne(t, static_cast<double>(ignore_index)),
                                 logical_or(lt(t, 0.0), ge(t, static_cast<double>(classes))));
  if (!any(bad).item()) return;
  const int64_t at = static_cast<int64_t>(argmax(bad.to(kInt64)).item());
  KILN_FAIL(kLinearCrossEntropy, "target ", static_cast<int64_t>(t.narrow(0, at, 1).item()), " out of range for ", classes,
            " classes (at position ", at, " of the flattened target)");
}

// The sum of the counted rows' weights (their number without class weights): the divisor
// of reduction Mean, as cross_entropy's.
double counted_weight(const Tensor& t, const Tensor& cw, int64_t ignore_index) {
  NoGradGuard no_grad;
  const Tensor counted = ne(t, static_cast<double>(ignore_index));
  if (!cw.defined()) return sum(counted.to(kInt64)).item();
  // ignored rows gather class 0 and count 0
  const Tensor cls = mul(t, counted.to(kInt64));
  return sum(mul(index_select(cw, 0, cls), counted.to(cw.dtype()))).item();
}

// The losses of all rows, and the gradients of their sum with each row weighted by
// `row_scale` (1 for Sum, 1 / the counted weight for Mean, as cross_entropy's gradient).
struct Pass {
  Tensor losses;                   // (N)
  Tensor weights;                  // (N), the backend kernel's (the count is made before)
  Tensor grad_input, grad_weight;  // (N, D), (V, D); undefined where not wanted
  Tensor grad_bias;                // (V)
};

Pass chunked_pass(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& t, const Tensor& cw,
                  int64_t ignore_index, double label_smoothing, double row_scale, int64_t chunk, bool gx, bool gw,
                  bool gb) {
  NoGradGuard no_grad;
  const int64_t N = x.size(0);
  // Under autocast each chunk's rows and its logits' gradient are rounded to bfloat16 once
  // here, for both products that read them (the products take a bfloat16 operand as it is).
  const bool low = detail::autocast_applies({&x, &weight, &bias});
  Pass p;
  Tensor lse;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const Tensor tc = t.narrow(0, r0, n);
    const Tensor xc = low ? detail::autocast_operand(x.narrow(0, r0, n), kLinearCrossEntropy) : x.narrow(0, r0, n);
    const Tensor logits = linear(xc, weight, bias);  // (n, V); autocast's rules apply as in linear
    if (!p.losses.defined()) {
      p.losses = detail::new_tensor({N}, logits.dtype(), logits);
      p.weights = detail::new_tensor({N}, logits.dtype(), logits);
      lse = detail::new_tensor({N}, logits.dtype() == kBFloat16 ? kFloat32 : logits.dtype(), logits);
      if (gx) p.grad_input = detail::new_tensor({N, x.size(1)}, logits.dtype(), logits);
    }
    Backend& be = backend_of(kLinearCrossEntropy, {&logits, &tc, &cw});
    const Tensor lse_c = lse.narrow(0, r0, n);
    be.cross_entropy(logits, tc, cw, ignore_index, label_smoothing, p.losses.narrow(0, r0, n),
                     p.weights.narrow(0, r0, n), lse_c);
    if (!gx && !gw && !gb) continue;
    // d(Σ losses)/d logits for this chunk (n, V)
    Tensor dlogits = detail::new_tensor(logits.shape(), logits.dtype(), logits);
    be.cross_entropy_backward(logits, tc, cw, ignore_index, label_smoothing, lse_c,
                              full({n}, row_scale, TensorOptions(logits.dtype()).device(logits.device())),
                              dlogits);
    // The products' operand and, for the bias, the column sums (V): read once under autocast.
    Tensor dl = dlogits, part_b;
    if (low && (gx || gw)) std::tie(dl, part_b) = detail::autocast_operand_and_column_sums(dlogits, kLinearCrossEntropy);
    if (gx) p.grad_input.narrow(0, r0, n).copy_(matmul(dl, weight));  // (n, V) @ (V, D)
    if (gw) {
      Tensor part = matmul(dl.t(), xc);  // (V, n) @ (n, D)
      p.grad_weight = p.grad_weight.defined() ? p.grad_weight.add_(part) : part;
    }
    if (gb) {
      if (!part_b.defined()) part_b = sum(dlogits, {0});  // (V)
      p.grad_bias = p.grad_bias.defined() ? p.grad_bias.add_(part_b) : part_b;
    }
  }
  return p;
}

// grad · the upstream gradient, in the dtype of the input it is the gradient of (autocast's products give float32).
Tensor scaled_grad(const Tensor& grad, const Tensor& upstream, DType dtype) {
  if (!grad.defined()) return Tensor();
  Tensor g = mul(grad, upstream.to(grad.dtype()));
  return g.dtype() == dtype ? g : g.to(dtype);
}

Tensor linear_cross_entropy_impl(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                 const Tensor& target, const Tensor& class_weight, int64_t ignore_index,
                                 double label_smoothing, Reduction reduction, int64_t chunk_rows) {
  check_arguments(input, weight, bias, target, reduction, label_smoothing, chunk_rows);
  const int64_t D = weight.size(1), V = weight.size(0), N = target.numel();
  // Each row's gradient weight is known only in backward: the composition, logits and all.
  if (reduction == Reduction::None || N == 0) {
    Tensor logits = linear(input, weight, bias).reshape({N, V});
    Tensor t = target.reshape({N});
    Tensor out = class_weight.defined()
                     ? cross_entropy(logits, t, class_weight, ignore_index, label_smoothing, reduction)
                     : cross_entropy(logits, t, ignore_index, label_smoothing, reduction);
    return reduction == Reduction::None ? out.reshape(target.shape()) : out;
  }
  const bool gx = detail::needs_grad(input), gw = detail::needs_grad(weight), gb = detail::needs_grad(bias);
  const bool grads = is_grad_enabled() && (gx || gw || gb);
  const int64_t chunk = chunk_rows > 0 ? chunk_rows : default_chunk_rows(V);
  const Tensor x = input.detach().reshape({N, D});
  const Tensor t = target.detach().contiguous().reshape({N});
  const Tensor cw = class_weight.defined() ? class_weight.detach().contiguous() : Tensor();
  // Class weights checked as cross_entropy checks them against its logits (float32 under
  // autocast, else the input's dtype).
  const DType logits_dtype = detail::autocast_applies({&input, &weight, &bias}) ? kFloat32 : input.dtype();
  if (cw.defined()) detail::check_class_weight(kLinearCrossEntropy, cw, detail::new_tensor({0}, logits_dtype, input), V);
  check_targets(t, ignore_index, V);
  // Mean: the sum over the counted rows' weights; none counted gives NaN, as cross_entropy.
  const double count = reduction == Reduction::Mean ? counted_weight(t, cw, ignore_index) : 1.0;
  // The weight as given (chunked_pass records nothing): autocast then rounds it once for
  // all the chunks' products, as the weight it is, not once per product.
  Pass p = chunked_pass(x, weight, bias, t, cw, ignore_index, label_smoothing, 1.0 / count, chunk, grads && gx,
                        grads && gw, grads && gb);
  Tensor loss = reduction == Reduction::Mean ? div(sum(p.losses), count) : sum(p.losses);
  if (!grads) return loss;
  const Shape in_shape = input.shape();
  const DType in_dt = input.dtype(), w_dt = weight.dtype(), b_dt = bias.defined() ? bias.dtype() : w_dt;
  return record(kLinearCrossEntropy, loss, {input, weight, bias}, [p, in_shape, in_dt, w_dt, b_dt](const Tensor& g) -> TensorList {
    Tensor g_in = scaled_grad(p.grad_input, g, in_dt);
    return {g_in.defined() ? g_in.reshape(in_shape) : g_in, scaled_grad(p.grad_weight, g, w_dt),
            scaled_grad(p.grad_bias, g, b_dt)};
  });
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            int64_t ignore_index, double label_smoothing, Reduction reduction, int64_t chunk_rows) {
  return linear_cross_entropy_impl(input, weight, bias, target, Tensor(), ignore_index, label_smoothing, reduction,
                                   chunk_rows);
}

Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const Tensor& class_weight, int64_t ignore_index, double label_smoothing,
                            Reduction reduction, int64_t chunk_rows) {
  detail::check_defined(kLinearCrossEntropy, class_weight, "class weight");
  return linear_cross_entropy_impl(input, weight, bias, target, class_weight, ignore_index, label_smoothing,
                                   reduction, chunk_rows);
}

}  // namespace kiln
