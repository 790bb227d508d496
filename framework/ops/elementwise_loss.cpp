// The elementwise losses (records in core/op_records.inc): mse_loss, l1_loss,
// smooth_l1_loss, binary_cross_entropy_with_logits, kl_div. Each computes a loss per
// element, input (…) and target (…) -> l (their broadcast shape), then reduces it.
#include <cmath>

#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace kiln {
namespace {

// Checks what mse/l1/smooth_l1 take: both defined, one of them floating (the result's
// dtype is their promotion), shapes that broadcast, one device, a reduction of theirs.
void check_regression(const char* op, const Tensor& input, const Tensor& target, Reduction reduction) {
  detail::check_defined(op, input, "input");
  detail::check_defined(op, target, "target");
  KILN_CHECK(is_floating(input.dtype()) || is_floating(target.dtype()), op,
             "expected a floating-point input or target, got ", dtype_name(input.dtype()), " and ",
             dtype_name(target.dtype()));
  broadcast_shapes(op, input.shape(), target.shape());
  backend_of(op, {&input, &target});
  detail::check_reduction(op, reduction);
}

// l reduced: as is, summed or averaged over all its elements (the mean of none is NaN).
Tensor reduce_loss(const Tensor& l, Reduction reduction) {
  switch (reduction) {
    case Reduction::None: return l;
    case Reduction::Sum: return sum(l);
    case Reduction::Mean:
    case Reduction::BatchMean: break;  // BatchMean: kl_div reduces it itself; others reject it
  }
  return mean(l);
}

// An optional weight of binary_cross_entropy_with_logits: undefined stays so; otherwise
// it must broadcast to the input's `shape` and not require grad (torch has no gradient
// for it); returned detached in the loss's dtype `dt`.
Tensor loss_weight(const char* op, const char* what, const Tensor& w, const Shape& shape, DType dt) {
  if (!w.defined()) return w;
  KILN_CHECK(broadcast_shapes(op, w.shape(), shape) == shape, op, what, " of shape ", shape_str(w.shape()),
             " does not broadcast to the input's shape ", shape_str(shape));
  KILN_CHECK(!any_requires_grad({&w}), op, "not differentiable with respect to argument '", what,
             "'; this input cannot have requires_grad=True (detach it)");
  return w.detach().to(dt);
}

// softplus(-x) = log(1 + exp(-x)) = max(-x, 0) + log1p(exp(-|x|)): never overflows, and
// accurate for large |x| in both directions.
Tensor softplus_neg(const Tensor& x) { return add(relu(neg(x)), log1p(exp(neg(abs(x))))); }

// p log p, 0 where p = 0 (torch's xlogy(p, p)), NaN where p < 0 or NaN. Computed as
// p · log(p where p != 0, else 1), so the gradient at p = 0 is 0, not 0 · -inf.
Tensor xlogx(const Tensor& p) { return mul(p, log(where(ne(p, 0.0), p, 1.0))); }

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_regression("mse_loss", input, target, reduction);
  Tensor d = sub(input, target);
  return reduce_loss(mul(d, d), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_regression("l1_loss", input, target, reduction);
  return reduce_loss(abs(sub(input, target)), reduction);  // gradient sign(d): 0 at d = 0, as torch
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  const char* op = "smooth_l1_loss";
  check_regression(op, input, target, reduction);
  KILN_CHECK(beta >= 0, op, "beta must be non-negative, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction);  // as torch: the quadratic part vanishes
  Tensor d = sub(input, target);
  Tensor ad = abs(d);
  // torch's arithmetic: 0.5 z² / beta below beta, z - 0.5 beta above (z = |d|; d² = z²).
  Tensor l = where(lt(ad, beta), div(mul(mul(d, d), 0.5), beta), sub(ad, 0.5 * beta));
  return reduce_loss(l, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        Reduction reduction, const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  detail::check_floating(op, input, "input");
  detail::check_floating(op, target, "target");
  KILN_CHECK(target.shape() == input.shape(), op, "target size ", shape_str(target.shape()),
             " must be the same as input size ", shape_str(input.shape()));
  detail::check_reduction(op, reduction);
  backend_of(op, {&input, &target, &weight, &pos_weight});
  const DType dt = promote_types(input.dtype(), target.dtype());
  const Tensor w = loss_weight(op, "weight", weight, input.shape(), dt);
  const Tensor pw = loss_weight(op, "pos_weight", pos_weight, input.shape(), dt);
  const Tensor x = input.detach(), t = target.detach();
  // l = (1 - t) x + lw · softplus(-x), lw = 1 + (pw - 1) t; times w.
  Tensor l;
  {
    NoGradGuard no_grad;  // the node below carries the analytic gradient
    Tensor sp = softplus_neg(x);
    l = add(mul(rsub(t, 1.0), x), pw.defined() ? mul(add(mul(sub(pw, 1.0), t), 1.0), sp) : sp);
    if (w.defined()) l = mul(l, w);
  }
  if (any_requires_grad({&input, &target})) {
    const bool g_in = detail::needs_grad(input), g_tg = detail::needs_grad(target);
    SavedTensor sx(x, op), st(t, op), sw(w, op), spw(pw, op);
    l = record(op, l, {input, target}, [=](const Tensor& g) -> TensorList {
      const Tensor &xv = sx.get(), &tv = st.get(), &wv = sw.get(), &pwv = spw.get();
      const Tensor gw = wv.defined() ? mul(g, wv) : g;
      Tensor gx, gt;
      if (g_in) {  // ∂l/∂x = lw σ(x) - pw t, or σ(x) - t
        Tensor s = sigmoid(xv);
        Tensor d = pwv.defined() ? sub(mul(add(mul(sub(pwv, 1.0), tv), 1.0), s), mul(pwv, tv)) : sub(s, tv);
        gx = detail::grad_for(mul(gw, d), xv);
      }
      if (g_tg) {  // ∂l/∂t = -x + (pw - 1) softplus(-x), or -x
        Tensor d = pwv.defined() ? sub(mul(sub(pwv, 1.0), softplus_neg(xv)), xv) : neg(xv);
        gt = detail::grad_for(mul(gw, d), tv);
      }
      return {gx, gt};
    });
  }
  return reduce_loss(l, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  detail::check_floating(op, input, "input");
  detail::check_floating(op, target, "target");
  broadcast_shapes(op, input.shape(), target.shape());
  backend_of(op, {&input, &target});
  Tensor l = log_target ? mul(exp(target), sub(target, input)) : sub(xlogx(target), mul(target, input));
  if (reduction != Reduction::BatchMean) return reduce_loss(l, reduction);
  // The sum over the batch size (the sum for a 0-d input), as torch.
  if (input.dim() == 0) return sum(l);
  return div(sum(l), static_cast<double>(input.size(0)));
}

}  // namespace kiln
