// scaled_dot_product_attention: one fused op for softmax(q kᵀ · scale + mask) v with
// dropout on the weights. Forward keeps q, k, v, the output and one logsumexp per query;
// backward rebuilds the weights from them, so no (L, S) tensor lives between the two.
// Under autocast q, k and v are rounded to bfloat16 once and the kernels' mixed form runs
// (bfloat16 GEMMs, float32 softmax, float32 output and gradients).
#include <cmath>
#include <limits>

#include "autograd/autocast_cast.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// (…, L, E) as (N, H, L, E): rank 2 -> (1, 1, L, E), rank 3 -> (1, B, L, E), more ->
// the leading dims folded into N.
Tensor as_4d(const Tensor& t) {
  if (t.dim() == 2) return t.unsqueeze(0).unsqueeze(0);
  if (t.dim() == 3) return t.unsqueeze(0);
  if (t.dim() == 4) return t;
  return t.reshape({-1, t.size(-3), t.size(-2), t.size(-1)});
}

// The kernels need the last stride to be 1.
Tensor rows_contiguous(const Tensor& t) { return t.size(3) > 1 && t.stride(3) != 1 ? t.contiguous() : t; }

// A fresh (N, H, L, X) `dtype` tensor laid out like `like`: when like's heads sit inside
// its rows ((N, L, H, X) memory, as MultiheadAttention's projections are), the result is
// that layout viewed as (N, H, L, X), so the caller's transpose back is free.
Tensor new_heads(int64_t N, int64_t H, int64_t L, int64_t X, const Tensor& like, DType dtype) {
  const bool heads_inner = like.size(1) > 1 && like.size(2) > 1 && like.stride(1) < like.stride(2);
  if (!heads_inner) return detail::new_tensor({N, H, L, X}, dtype, like, kOp);
  return detail::new_tensor({N, L, H, X}, dtype, like, kOp).transpose(1, 2);
}

// The unfused formula, for a float mask that itself needs a gradient.
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p,
                          double scale, Generator* gen) {
  Tensor w = safe_softmax(add(mul(matmul(q, k.transpose(-2, -1)), scale), mask));
  if (p > 0) w = dropout(w, p, true, gen);
  return matmul(w, v);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p) {
  detail::check_floating(kOp, q, "query");
  detail::check_floating(kOp, k, "key");
  detail::check_floating(kOp, v, "value");
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp, "query, key and value must share a dtype, got ",
             dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), kOp,
             "query, key and value must have the same rank >= 2, got shapes ", shape_str(qs), ", ", shape_str(ks),
             " and ", shape_str(vs));
  const Shape batch(qs.begin(), qs.end() - 2);
  KILN_CHECK(Shape(ks.begin(), ks.end() - 2) == batch && Shape(vs.begin(), vs.end() - 2) == batch &&
                 q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             kOp, "shapes ", shape_str(qs), ", ", shape_str(ks), " and ", shape_str(vs),
             " do not match: need query (…, L, E), key (…, S, E), value (…, S, Ev) with equal batch dims");
  KILN_CHECK(dropout_p >= 0 && dropout_p <= 1, kOp, "dropout_p must be between 0 and 1, got ", dropout_p);
}

// The mask the kernel wants: true / -inf where attention is not allowed, as (N, H, L, S).
Tensor kernel_mask(const Tensor& q, const Tensor& k, const Tensor& attn_mask, bool is_causal) {
  const int64_t L = q.size(-2), S = k.size(-2);
  Shape scores = q.shape();
  scores.back() = S;
  // The fused kernel never stores the scores, but their count numbers the dropout draws
  // and sizes the mask's view: it must fit.
  checked_numel(kOp, scores);
  Tensor m;
  if (is_causal) {
    KILN_CHECK(!attn_mask.defined(), kOp, "takes attn_mask or is_causal, not both");
    TensorOptions ids = TensorOptions(kInt64).device(q.device());
    m = gt(arange(static_cast<double>(S), ids).unsqueeze(0), arange(static_cast<double>(L), ids).unsqueeze(1));
  } else if (attn_mask.defined()) {
    KILN_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == q.dtype(), kOp,
               "attn_mask must be bool or the query's dtype (", dtype_name(q.dtype()), "), got ",
               dtype_name(attn_mask.dtype()));
    KILN_CHECK(attn_mask.dim() <= q.dim() && broadcast_shapes(kOp, attn_mask.shape(), scores) == scores, kOp,
               "attn_mask of shape ", shape_str(attn_mask.shape()), " does not broadcast to the scores' shape ",
               shape_str(scores));
    // Inverted while still small (before it is broadcast): torch's bool masks say who may attend.
    m = attn_mask.dtype() == kBool ? logical_not(attn_mask) : attn_mask.detach();
  } else {
    return Tensor();
  }
  return as_4d(m.expand(scores));
}

}  // namespace

// The fused kernels' rule for a fully masked row, composed (ops.h).
Tensor safe_softmax(const Tensor& scores) {
  if (scores.size(-1) == 0) return softmax(scores, -1);
  Tensor dead = eq(amax(scores.detach(), {-1}, /*keepdim=*/true), -std::numeric_limits<double>::infinity());
  // The dead rows' scores are replaced before the softmax, so that nothing is NaN in
  // forward or backward, then their weights are zeroed.
  return masked_fill(softmax(masked_fill(scores, dead, 0.0), -1), dead, 0.0);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale_opt,
                                    Generator* gen) {
  check_inputs(q, k, v, dropout_p);
  Backend& be = backend_of(kOp, {&q, &k, &v, &attn_mask});
  const double scale = scale_opt ? *scale_opt : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (attn_mask.defined() && attn_mask.dtype() != kBool && any_requires_grad({&attn_mask})) {
    return attention_composed(q, k, v, attn_mask, dropout_p, scale, gen);
  }
  Tensor mask = kernel_mask(q, k, attn_mask, is_causal);
  // Under autocast: bfloat16 q, k, v (their layouts kept; kept for backward as the
  // cache's copies, one pass over a projection that made all three), float32 out, lse and
  // mask.
  const bool autocast = detail::autocast_applies({&q, &k, &v});
  const bool recording = any_requires_grad({&q, &k, &v});
  const DType dtype = autocast ? kFloat32 : q.dtype();
  if (autocast && mask.defined() && mask.dtype() != kBool) mask = mask.to(kFloat32);
  auto operand = [&](const Tensor& t) {
    if (!autocast) return rows_contiguous(as_4d(t.detach()));
    return rows_contiguous(as_4d(recording ? detail::autocast_share(t, kOp) : detail::autocast_operand(t, kOp)));
  };
  Tensor q4 = operand(q), k4 = operand(k), v4 = operand(v);
  const int64_t N = q4.size(0), H = q4.size(1), L = q4.size(2), S = k4.size(2), Ev = v4.size(3);
  Tensor out4 = new_heads(N, H, L, Ev, q4, dtype);
  Tensor lse = detail::new_tensor({N, H, L}, dtype, q, kOp);
  uint64_t seed = 0, block = 0;
  if (dropout_p > 0) {
    Generator& g = gen ? *gen : default_generator();
    seed = g.seed();
    block = g.reserve(static_cast<uint64_t>(N * H * L * S));
  }
  if (out4.numel() > 0) be.attention(q4, k4, v4, mask, scale, dropout_p, seed, block, out4, lse);
  Shape out_shape = q.shape();
  out_shape.back() = Ev;
  Tensor out = out4.reshape(out_shape);
  if (!recording) return out;

  // The mask too: a float mask is the caller's tensor, which could be changed in place.
  // Under autocast the output is kept as the bfloat16 copy that the product reading it
  // next (the output projection) shares, not in float32 besides that copy.
  SavedTensor sq(q4, kOp), sk(k4, kOp), sv(v4, kOp), smask(mask, kOp);
  SavedTensor so(autocast ? detail::autocast_share(out4, kOp) : out4, kOp);
  const Shape q_shape = q.shape(), k_shape = k.shape(), v_shape = v.shape();
  const DType q_dtype = q.dtype();  // the gradients' (float32 from the mixed kernel, then cast)
  return record(kOp, out, {q, k, v}, [=](const Tensor& g) -> TensorList {
    const Tensor &qs = sq.get(), &ks = sk.get(), &vs = sv.get(), &os = so.get();
    if (os.numel() == 0) {  // L or Ev is 0: nothing reached the output
      TensorOptions opts = TensorOptions(q_dtype).device(qs.device());
      return {zeros(q_shape, opts), zeros(k_shape, opts), zeros(v_shape, opts)};
    }
    Tensor g4 = rows_contiguous(g.to(dtype).reshape({N, H, L, Ev}));
    Tensor gq = new_heads(N, H, L, qs.size(3), qs, dtype), gk = new_heads(N, H, S, ks.size(3), ks, dtype),
           gv = new_heads(N, H, S, Ev, vs, dtype);
    backend_of(kOp, {&g4, &qs}).attention_backward(g4, qs, ks, vs, smask.get(), os, lse, scale, dropout_p, seed,
                                                  block, gq, gk, gv);
    return {gq.reshape(q_shape).to(q_dtype), gk.reshape(k_shape).to(q_dtype), gv.reshape(v_shape).to(q_dtype)};
  });
}

}  // namespace kiln
