// Fused, numerically stable nn kernels with analytic backward: softmax, log_softmax,
// layer_norm (and add_layer_norm), dropout, embedding, cross_entropy.
#include <cmath>

#include "autograd/autocast_cast.h"
#include "autograd/recompute.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

Tensor softmax_impl(const char* op, const Tensor& x, int64_t dim, bool log) {
  detail::check_floating(op, x);
  int64_t d = x.dim() == 0 ? 0 : wrap_dim(op, dim, x.dim());
  Tensor xc = x.contiguous().detach();
  Tensor y = detail::new_tensor(x.shape(), x.dtype(), x);
  Backend& be = backend_of(op, {&x});
  if (x.numel() > 0) be.softmax(xc, d, log, y);
  if (!any_requires_grad({&x})) return y;
  SavedTensor sy(y, op);
  return record(op, y, {x}, [sy, d, log, op](const Tensor& g) -> TensorList {
    const Tensor& yv = sy.get();
    Tensor gx = detail::new_tensor(yv.shape(), yv.dtype(), yv);
    if (yv.numel() > 0) backend_of(op, {&yv, &g}).softmax_backward(yv, g.contiguous(), d, log, gx);
    return {gx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl("log_softmax", x, dim, true); }

namespace {

// What layer_norm and add_layer_norm check of the input and the parameters.
void check_layer_norm(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, double eps) {
  detail::check_floating(op, x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= x.dim(), op, "normalized_shape ", shape_str(normalized_shape),
             " does not fit an input of shape ", shape_str(x.shape()));
  KILN_CHECK(Shape(x.shape().end() - k, x.shape().end()) == normalized_shape, op,
             "input of shape ", shape_str(x.shape()), " does not end with normalized_shape ",
             shape_str(normalized_shape));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    KILN_CHECK(p->shape() == normalized_shape, op, (p == &weight ? "weight" : "bias"), " of shape ",
               shape_str(p->shape()), " does not match normalized_shape ", shape_str(normalized_shape));
    KILN_CHECK(p->dtype() == x.dtype(), op, (p == &weight ? "weight" : "bias"), " has dtype ",
               dtype_name(p->dtype()), ", input has ", dtype_name(x.dtype()));
  }
  KILN_CHECK(eps >= 0, op, "eps must be non-negative, got ", eps);
}

// The outputs of a layer norm kernel: y (the input's shape), mean and rstd (rows).
struct LayerNormOut {
  Tensor y, mean, rstd;
};
LayerNormOut layer_norm_outputs(const Tensor& x, const Shape& normalized_shape) {
  const int64_t n = shape_numel(normalized_shape);
  const int64_t rows = n ? x.numel() / n : 0;
  return {detail::new_tensor(x.shape(), x.dtype(), x), detail::new_tensor({rows}, x.dtype(), x),
          detail::new_tensor({rows}, x.dtype(), x)};
}

// The gradients of a layer norm of the saved input xs (contiguous, without history) from
// g: {dx, dw, db}, each undefined when not wanted.
TensorList layer_norm_grads(const char* op, const Tensor& g, const Tensor& xs, const Tensor& w, const Tensor& mean,
                            const Tensor& rstd, const Shape& normalized_shape, bool gx, bool gw, bool gb) {
  Tensor dx = gx ? detail::new_tensor(xs.shape(), xs.dtype(), xs) : Tensor();
  Tensor dw = gw ? detail::new_tensor(normalized_shape, xs.dtype(), xs) : Tensor();
  Tensor db = gb ? detail::new_tensor(normalized_shape, xs.dtype(), xs) : Tensor();
  if (xs.numel() > 0) {
    backend_of(op, {&xs, &g}).layer_norm_backward(g.contiguous(), xs, w, mean, rstd, dx, dw, db);
  } else {
    if (dw.defined()) dw.zero_();
    if (db.defined()) db.zero_();
  }
  return {dx, dw, db};
}

// Recipes (autograd/recompute.h) that write a layer norm's y, and the bfloat16 copy of it
// that autocast keeps for the next product (low, when defined), again from the saved
// input: layer_norm over it repeats the forward's arithmetic bit for bit (add_layer_norm's
// fused kernel writes the bits layer_norm writes for the sum, and rounds as copy does). The
// norm's node owns them; its consumers (the next linear) then keep the recipe, not y.
struct LayerNormRecipes {
  std::shared_ptr<const Recompute> y, low;
  // Called by the norm's backward, which comes after every consumer's.
  void drop() const {
    if (y) y->drop();
    if (low) low->drop();
  }
};

LayerNormRecipes leave_layer_norm_recipes(const char* op, const SavedTensor& sx, const SavedTensor& sw,
                                          const Tensor& bc, double eps, const Shape& normalized_shape,
                                          const Tensor& y, const Tensor& low) {
  if (!detail::recipes_wanted(y.device())) return {};  // and then saves nothing more
  const SavedTensor sb(bc, op);
  auto rebuild_y = [op, sx, sw, sb, eps, normalized_shape]() {
    const Tensor xs = sx.get();
    LayerNormOut r = layer_norm_outputs(xs, normalized_shape);
    backend_of(op, {&xs}).layer_norm(xs, sw.get(), sb.get(), eps, r.y, r.mean, r.rstd);
    return r.y;
  };
  LayerNormRecipes recipes;
  recipes.y = detail::leave_recompute(y, rebuild_y);
  if (low.defined()) {
    recipes.low = detail::leave_recompute(low, [rebuild_y]() { return rebuild_y().to(kBFloat16); });
  }
  return recipes;
}

// y = layer_norm(input) recorded over {input, weight, bias}, from the kernel's outputs and
// xs, input's values (contiguous, without history), which backward keeps; low: y's
// bfloat16 copy that autocast keeps, if any.
Tensor record_layer_norm(const char* op, const LayerNormOut& o, const Tensor& input, const Tensor& xs,
                         const Tensor& wc, const Tensor& bc, double eps, const Tensor& weight, const Tensor& bias,
                         const Shape& normalized_shape, const Tensor& low = Tensor()) {
  if (!any_requires_grad({&input, &weight, &bias})) return o.y;
  bool gx = detail::needs_grad(input), gw = detail::needs_grad(weight), gb = detail::needs_grad(bias);
  SavedTensor sx(xs, op), sw(wc, op), sm(o.mean, op), sr(o.rstd, op);
  LayerNormRecipes recipes = leave_layer_norm_recipes(op, sx, sw, bc, eps, normalized_shape, o.y, low);
  return record(op, o.y, {input, weight, bias}, [=](const Tensor& g) -> TensorList {
    recipes.drop();  // owned here, alive while y's consumers may ask; none asks after this
    return layer_norm_grads(op, g, sx.get(), sw.get(), sm.get(), sr.get(), normalized_shape, gx, gw, gb);
  });
}

// add_layer_norm's checks of the residual against x.
void check_residual(const char* op, const Tensor& x, const Tensor& residual) {
  detail::check_defined(op, residual, "residual");
  KILN_CHECK(residual.shape() == x.shape(), op, "residual of shape ", shape_str(residual.shape()),
             " does not match the input's shape ", shape_str(x.shape()));
  KILN_CHECK(residual.dtype() == x.dtype(), op, "residual has dtype ", dtype_name(residual.dtype()),
             ", input has ", dtype_name(x.dtype()));
}

// Runs add_layer_norm's kernel: o from x + residual, that sum into `sum` and y rounded to
// bfloat16 into `low` when they are defined. Contiguous inputs take the fused kernel;
// others (a sequence-first layer's transposed views) a strided Add into a buffer, then
// layer_norm (and a copy into low): the same bits, no extra copy of the inputs.
void run_add_layer_norm(Backend& be, const Tensor& x, const Tensor& residual, const Tensor& wc, const Tensor& bc,
                        double eps, const Tensor& sum, const LayerNormOut& o, const Tensor& low = Tensor()) {
  if (x.numel() == 0) return;
  if (x.is_contiguous() && residual.is_contiguous()) {
    be.add_layer_norm(x.detach(), residual.detach(), wc, bc, eps, sum, o.y, o.mean, o.rstd, low);
    return;
  }
  Tensor s = sum.defined() ? sum : detail::new_tensor(x.shape(), x.dtype(), x);
  be.binary(BinaryOp::Add, x.detach(), residual.detach(), s);
  be.layer_norm(s, wc, bc, eps, o.y, o.mean, o.rstd);
  if (low.defined()) be.copy(o.y, low);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "layer_norm";
  check_layer_norm(op, x, normalized_shape, weight, bias, eps);
  Backend& be = backend_of(op, {&x, &weight, &bias});
  Tensor xc = x.contiguous().detach();
  Tensor wc = weight.defined() ? weight.contiguous().detach() : Tensor();
  Tensor bc = bias.defined() ? bias.contiguous().detach() : Tensor();
  LayerNormOut o = layer_norm_outputs(x, normalized_shape);
  if (x.numel() > 0) be.layer_norm(xc, wc, bc, eps, o.y, o.mean, o.rstd);
  // Under autocast (training) y's bfloat16 copy is made once and cached: a Transformer's
  // encoder output (its final norm's y) is read by every decoder layer's cross-attention
  // projection, which then share one copy instead of rounding and keeping one each.
  Tensor low;
  if (x.dtype() == kFloat32 && x.numel() > 0 && any_requires_grad({&x, &weight, &bias}) &&
      detail::autocast_applies({&x}))
    low = detail::autocast_share(o.y, op);
  return record_layer_norm(op, o, x, xc, wc, bc, eps, weight, bias, normalized_shape, low);
}

Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias, double eps) {
  const char* op = "add_layer_norm";
  check_layer_norm(op, x, normalized_shape, weight, bias, eps);
  check_residual(op, x, residual);
  Backend& be = backend_of(op, {&x, &residual, &weight, &bias});
  Tensor wc = weight.defined() ? weight.contiguous().detach() : Tensor();
  Tensor bc = bias.defined() ? bias.contiguous().detach() : Tensor();
  const bool grad = any_requires_grad({&x, &residual, &weight, &bias});
  // The sum is kept only for backward (it is layer_norm's saved input).
  Tensor sum = grad ? detail::new_tensor(x.shape(), x.dtype(), x) : Tensor();
  LayerNormOut o = layer_norm_outputs(x, normalized_shape);
  // Under autocast (training) the product that reads y next (the next sublayer's first
  // linear) takes it rounded to bfloat16: that copy is written with y, each row while it is
  // in cache, and put in the cast cache for that product (and any other that reads y).
  const bool round = grad && x.dtype() == kFloat32 && x.numel() > 0 && detail::autocast_applies({&x, &residual});
  const Tensor low = round ? detail::new_tensor(x.shape(), kBFloat16, x) : Tensor();
  run_add_layer_norm(be, x, residual, wc, bc, eps, sum, o, low);
  if (round) detail::autocast_adopt(o.y, low);
  if (!grad) return o.y;
  bool gx = detail::needs_grad(x), gr = detail::needs_grad(residual);
  bool gw = detail::needs_grad(weight), gb = detail::needs_grad(bias);
  SavedTensor ss(sum, op), sw(wc, op), sm(o.mean, op), sr(o.rstd, op);
  LayerNormRecipes recipes = leave_layer_norm_recipes(op, ss, sw, bc, eps, normalized_shape, o.y, low);
  return record(op, o.y, {x, residual, weight, bias}, [=](const Tensor& g) -> TensorList {
    recipes.drop();  // owned here, alive while y's consumers may ask; none asks after this
    TensorList d = layer_norm_grads(op, g, ss.get(), sw.get(), sm.get(), sr.get(), normalized_shape, gx || gr, gw, gb);
    // d(x + residual)/dx = d(x + residual)/dresidual = 1: both get the one buffer.
    return {gx ? d[0] : Tensor(), gr ? d[0] : Tensor(), d[1], d[2]};
  });
}

SumAndNorm add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                   const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "add_layer_norm";
  check_layer_norm(op, x, normalized_shape, weight, bias, eps);
  check_residual(op, x, residual);
  Backend& be = backend_of(op, {&x, &residual, &weight, &bias});
  Tensor wc = weight.defined() ? weight.contiguous().detach() : Tensor();
  Tensor bc = bias.defined() ? bias.contiguous().detach() : Tensor();
  Tensor sum = detail::new_tensor(x.shape(), x.dtype(), x);
  LayerNormOut o = layer_norm_outputs(x, normalized_shape);
  run_add_layer_norm(be, x, residual, wc, bc, eps, sum, o);
  // The graph of add then layer_norm (the sum is an output of its own, used further on);
  // only the forward pass is fused.
  Tensor s = record(op, sum, {x, residual}, [gx = detail::needs_grad(x), gr = detail::needs_grad(residual)](
                                                const Tensor& g) -> TensorList {
    return {gx ? g : Tensor(), gr ? g : Tensor()};
  });
  return {s, record_layer_norm(op, o, s, sum, wc, bc, eps, weight, bias, normalized_shape)};
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  const char* op = "dropout";
  detail::check_floating(op, x);
  KILN_CHECK(p >= 0 && p <= 1, op, "probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return mul(x, 0.0);
  // The mask is a function of (seed, block): backward draws it again instead of keeping
  // a tensor of x's size alive until then.
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed(), block = g.reserve(static_cast<uint64_t>(x.numel()));
  Tensor xc = x.contiguous().detach();
  Tensor y = detail::new_tensor(x.shape(), x.dtype(), x);
  if (x.numel() > 0) backend_of(op, {&x}).dropout(xc, seed, block, p, y);
  if (!any_requires_grad({&x})) return y;
  return record(op, y, {x}, [seed, block, p, op](const Tensor& gy) -> TensorList {
    Tensor gc = gy.contiguous();
    Tensor gx = detail::new_tensor(gc.shape(), gc.dtype(), gc);
    if (gc.numel() > 0) backend_of(op, {&gc}).dropout(gc, seed, block, p, gx);
    return {gx};
  });
}

namespace {

// relu_dropout, its result written over x when `over_x` (x reusable: op_helpers.h).
Tensor relu_dropout_impl(const Tensor& x, double p, bool training, Generator* gen, bool over_x) {
  const char* op = "relu_dropout";
  detail::check_floating(op, x);
  KILN_CHECK(p >= 0 && p <= 1, op, "probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0) return relu(x);
  if (p == 1) return mul(relu(x), 0.0);
  Generator& g = gen ? *gen : default_generator();
  const uint64_t seed = g.seed(), block = g.reserve(static_cast<uint64_t>(x.numel()));
  // The kernels read each element before they write it, so y may be x's memory.
  Tensor y = over_x ? detail::take_over(x) : detail::new_tensor(x.shape(), x.dtype(), x);
  Backend& be = backend_of(op, {&x});
  // y > 0 exactly where x > 0 and the element was kept (x · 1/(1-p) >= x > 0), so
  // y alone gives the gradient: g · (y > 0) / (1 - p). Under autocast the product that
  // reads y next (a feed-forward's second linear) reads it rounded to bfloat16: that copy
  // is written here with y, in the same pass, cached for that product and kept instead of
  // y (half the bytes, and not y and a copy); it is > 0 where y is, but for y <= 2^-134,
  // which rounds to 0.
  const DType dtype = y.dtype();
  const bool share = dtype == kFloat32 && any_requires_grad({&x}) && detail::autocast_applies({&x});
  Tensor saved = y;
  if (share && x.numel() > 0) {
    Tensor low = detail::new_tensor(x.shape(), kBFloat16, x);
    be.relu_dropout(x.contiguous().detach(), seed, block, p, y, low);
    saved = detail::autocast_adopt(y, low);
  } else {
    if (x.numel() > 0) be.relu_dropout(x.detach(), seed, block, p, y, Tensor());
    if (!any_requires_grad({&x})) return y;
    if (share) saved = detail::autocast_share(y, op);
  }
  SavedTensor sy(saved, op);
  return record(op, y, {x}, [sy, p, op, dtype](const Tensor& gy) -> TensorList {
    const Tensor yv = sy.get();  // autocast's bfloat16 copy: the backend reads it as it is
    Tensor gc = gy.shape() == yv.shape() ? gy : gy.expand(yv.shape());
    Tensor gx = detail::new_tensor(yv.shape(), dtype, yv);
    if (gx.numel() > 0) backend_of(op, {&gc, &yv}).relu_dropout_backward(gc, yv, p, gx);
    return {gx};
  });
}

}  // namespace

Tensor relu_dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return relu_dropout_impl(x, p, training, gen, false);
}

Tensor relu_dropout(Tensor&& x, double p, bool training, Generator* gen) {
  const Tensor given = std::move(x);  // the caller's handle let go: ours is the only one
  return relu_dropout_impl(given, p, training, gen, detail::reusable(given));
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx) {
  const char* op = "embedding";
  detail::check_floating(op, weight, "weight");
  detail::check_defined(op, indices, "indices");
  KILN_CHECK(indices.dtype() == kInt64, op, "indices must be an int64 tensor, got ", dtype_name(indices.dtype()));
  KILN_CHECK(weight.dim() == 2, op, "weight must be 2-D (num_embeddings, embedding_dim), got shape ",
             shape_str(weight.shape()));
  const int64_t num = weight.size(0), D = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    KILN_CHECK(*padding_idx >= -num && *padding_idx < num, op, "padding_idx ", *padding_idx,
               " out of range for ", num, " embeddings");
    pad = *padding_idx < 0 ? *padding_idx + num : *padding_idx;
  }
  Backend& be = backend_of(op, {&weight, &indices});
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  checked_numel(op, out_shape);  // before the copies below: (2^24) indices of 2^40-wide rows
  Tensor idx = indices.contiguous().detach();
  Tensor w = weight.contiguous().detach();
  Tensor out = detail::new_tensor(out_shape, weight.dtype(), weight, op);
  be.embedding(w, idx, out);
  if (!any_requires_grad({&weight})) return out;
  SavedTensor si(idx, op);
  Shape wshape = weight.shape();
  DType dt = weight.dtype();
  return record(op, out, {weight}, [si, wshape, dt, pad, D](const Tensor& g) -> TensorList {
    Tensor gw = zeros(wshape, TensorOptions(dt).device(g.device()));
    const Tensor& iv = si.get();
    backend_of("embedding", {&g, &iv}).embedding_backward(g.contiguous().reshape({-1, D}), iv, pad, gw);
    return {gw};
  });
}

Reduction reduction_from_string(const std::string& s) {
  if (s == "none") return Reduction::None;
  if (s == "mean") return Reduction::Mean;
  if (s == "sum") return Reduction::Sum;
  if (s == "batchmean") return Reduction::BatchMean;
  KILN_FAIL("reduction", "unknown reduction '", s, "' (expected none, mean, sum or batchmean)");
}

namespace {

// cross_entropy with class weights `weight` (C), or undefined for none.
Tensor cross_entropy_impl(const Tensor& logits, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                          double label_smoothing, Reduction reduction) {
  const char* op = "cross_entropy";
  detail::check_floating(op, logits, "input");
  detail::check_defined(op, targets, "target");
  KILN_CHECK(targets.dtype() == kInt64, op, "target must be an int64 tensor of class indices, got ",
             dtype_name(targets.dtype()));
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, op, "label_smoothing must be in [0, 1], got ",
             label_smoothing);
  detail::check_reduction(op, reduction);
  // Bring the class dim last and flatten: (N, C, d1, …) -> (N·d1·…, C).
  detail::ClassRows cr = detail::class_rows(op, logits, targets);
  const Tensor& x2 = cr.rows;
  const Shape& expect = cr.target_shape;  // the target shape that goes with these logits
  if (weight.defined()) detail::check_class_weight(op, weight, logits, x2.size(1));
  Tensor xc = x2.contiguous().detach();
  Tensor t = targets.contiguous().detach().reshape({-1});
  Tensor cw = weight.defined() ? weight.contiguous().detach() : Tensor();
  const int64_t N = xc.size(0);
  Tensor losses = detail::new_tensor({N}, xc.dtype(), xc);
  Tensor weights = detail::new_tensor({N}, xc.dtype(), xc);
  // Each row's log-sum-exp, for the backward (float32 for bfloat16 logits: the backend's).
  Tensor lse = detail::new_tensor({N}, xc.dtype() == kBFloat16 ? kFloat32 : xc.dtype(), xc);
  Backend& be = backend_of(op, {&logits, &targets, &weight});
  if (N > 0) be.cross_entropy(xc, t, cw, ignore_index, label_smoothing, losses, weights, lse);
  // The loss as a function of the per-row losses; its gradient per row comes back
  // through a node that applies the fused kernel.
  Tensor per_row = losses;
  if (any_requires_grad({&logits})) {
    SavedTensor sx(xc, op), st(t, op), sw(cw, op), slse(lse, op);
    per_row = record(op, losses, {x2}, [=](const Tensor& g) -> TensorList {
      const Tensor& xv = sx.get();
      Tensor gx = detail::new_tensor(xv.shape(), xv.dtype(), xv);
      backend_of("cross_entropy", {&xv, &g}).cross_entropy_backward(xv, st.get(), sw.get(), ignore_index,
                                                                    label_smoothing, slse.get(), g.contiguous(), gx);
      return {gx};
    });
  }
  switch (reduction) {
    case Reduction::None: return per_row.reshape(expect);
    case Reduction::Sum: return sum(per_row);
    case Reduction::Mean:
    case Reduction::BatchMean: break;  // BatchMean was rejected above
  }
  // Mean: the sum over the sum of the counted rows' weights (their number without class
  // weights); none counted gives NaN, as in PyTorch.
  double count = sum(weights).item();
  return div(sum(per_row), count);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, double label_smoothing,
                     Reduction reduction) {
  return cross_entropy_impl(logits, targets, Tensor(), ignore_index, label_smoothing, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                     double label_smoothing, Reduction reduction) {
  detail::check_defined("cross_entropy", weight, "weight");
  return cross_entropy_impl(logits, targets, weight, ignore_index, label_smoothing, reduction);
}

}  // namespace kiln
