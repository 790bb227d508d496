// scaled_dot_product_attention: one fused op for softmax(q kᵀ · scale + mask) v with
// dropout on the weights. Forward keeps q, k, v, the output and one logsumexp per query;
// backward rebuilds the weights from them, so no (L, S) tensor lives between the two.
// Under autocast q, k and v are rounded to bfloat16 once and the kernels' mixed form runs
// (bfloat16 GEMMs, float32 softmax, float32 output and gradients).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/autocast_cast.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

constexpr const char* kAttention = "scaled_dot_product_attention";

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
  if (!heads_inner) return detail::new_tensor({N, H, L, X}, dtype, like, kAttention);
  return detail::new_tensor({N, L, H, X}, dtype, like, kAttention).transpose(1, 2);
}

// The unfused formula, for a float mask that itself needs a gradient.
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double p,
                          double scale, Generator* gen) {
  Tensor w = safe_softmax(add(mul(matmul(q, k.transpose(-2, -1)), scale), mask));
  if (p > 0) w = dropout(w, p, true, gen);
  return matmul(w, v);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p) {
  detail::check_floating(kAttention, q, "query");
  detail::check_floating(kAttention, k, "key");
  detail::check_floating(kAttention, v, "value");
  KILN_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kAttention, "query, key and value must share a dtype, got ",
             dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), kAttention,
             "query, key and value must have the same rank >= 2, got shapes ", shape_str(qs), ", ", shape_str(ks),
             " and ", shape_str(vs));
  const Shape batch(qs.begin(), qs.end() - 2);
  KILN_CHECK(Shape(ks.begin(), ks.end() - 2) == batch && Shape(vs.begin(), vs.end() - 2) == batch &&
                 q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             kAttention, "shapes ", shape_str(qs), ", ", shape_str(ks), " and ", shape_str(vs),
             " do not match: need query (…, L, E), key (…, S, E), value (…, S, Ev) with equal batch dims");
  KILN_CHECK(dropout_p >= 0 && dropout_p <= 1, kAttention, "dropout_p must be between 0 and 1, got ", dropout_p);
}

// The mask the kernel wants: true / -inf where attention is not allowed, as (N, H, L, S).
Tensor kernel_mask(const Tensor& q, const Tensor& k, const Tensor& attn_mask, bool is_causal) {
  const int64_t L = q.size(-2), S = k.size(-2);
  Shape scores = q.shape();
  scores.back() = S;
  // The fused kernel never stores the scores, but their count numbers the dropout draws
  // and sizes the mask's view: it must fit.
  checked_numel(kAttention, scores);
  Tensor m;
  if (is_causal) {
    KILN_CHECK(!attn_mask.defined(), kAttention, "takes attn_mask or is_causal, not both");
    TensorOptions ids = TensorOptions(kInt64).device(q.device());
    m = gt(arange(static_cast<double>(S), ids).unsqueeze(0), arange(static_cast<double>(L), ids).unsqueeze(1));
  } else if (attn_mask.defined()) {
    KILN_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == q.dtype(), kAttention,
               "attn_mask must be bool or the query's dtype (", dtype_name(q.dtype()), "), got ",
               dtype_name(attn_mask.dtype()));
    KILN_CHECK(attn_mask.dim() <= q.dim() && broadcast_shapes(kAttention, attn_mask.shape(), scores) == scores, kAttention,
               "attn_mask of shape ", shape_str(attn_mask.shape()), " does not broadcast to the scores' shape ",
               shape_str(scores));
    // Inverted while still small (before it is broadcast): torch's bool masks say who may attend.
    m = attn_mask.dtype() == kBool ? logical_not(attn_mask) : attn_mask.detach();
  } else {
    return Tensor();
  }
  return as_4d(m.expand(scores));
}

// ---- gradients written into a chunked projection
//
// MultiheadAttention's q, k and v are chunks of one projection (self-attention), or k and
// v of one (cross-attention). Recorded as inputs themselves, each gradient would reach
// the projection through its slice's backward: a zeroed buffer of the projection's shape
// per layer and one pass adding each chunk into it. When the chunks tile the projection
// exactly, the node records the projection instead, and backward writes grad_q, grad_k
// and grad_v into their windows of one uninitialised buffer: every element written once.
// The same gradient reaches the projection's history either way (a view's gradient is
// its window of its base's, whatever its chain of views).

// A view's place in its base's storage, as (N, H, L, X) (as_4d of the view).
struct Window4d {
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // from the base's first element
};

// Whether view's history reaches target (its base's) through view ops alone (one input each), none of
// them a tensor whose .grad() the caller keeps (retain_grad): skipping them then loses
// nothing. A few steps at most (chunk, reshape, transpose, …).
bool plain_view_chain(const Tensor& view, const std::shared_ptr<Node>& target) {
  std::shared_ptr<Node> n = view.grad_fn();
  for (int step = 0; n && step < 16; ++step) {
    if (n == target) return true;
    if (!n->retained_output.expired() || n->next.size() != 1) return false;
    n = n->next[0];
  }
  return false;
}

// The base the views tile exactly, or undefined: each an autograd view of one contiguous
// base of their dtype that requires grad, all of one shape and strides, their dense inner
// blocks (B elements) side by side at offsets 0, B, 2B, … and the rest of their dims dense
// over rows of n·B elements that make up the base.
Tensor tiled_base(const std::vector<const Tensor*>& views) {
  const Tensor& first = *views.front();
  const std::shared_ptr<TensorImpl>& base_impl = first.impl()->view_base;
  if (!base_impl || (!base_impl->requires_grad && !base_impl->grad_fn)) return Tensor();
  const Tensor base(base_impl);
  if (base.dtype() != first.dtype() || !base.is_contiguous() || base.numel() == 0) return Tensor();
  const std::shared_ptr<Node> history = gradient_edge(base);
  std::vector<int64_t> offsets;
  for (const Tensor* v : views) {
    if (v->impl()->view_base != base_impl || !v->requires_grad() || !plain_view_chain(*v, history) ||
        v->shape() != first.shape() ||
        v->strides() != first.strides() || v->impl()->storage != base_impl->storage)
      return Tensor();
    offsets.push_back(v->offset() - base.offset());
  }
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  for (int64_t d = 0; d < first.dim(); ++d)
    if (first.size(d) > 1) dims.emplace_back(first.stride(d), first.size(d));
  std::sort(dims.begin(), dims.end());
  size_t i = 0;
  int64_t block = 1;  // the dense inner block
  for (; i < dims.size() && dims[i].first == block; ++i) block *= dims[i].second;
  int64_t expected = block * static_cast<int64_t>(views.size());  // a row of the base
  for (; i < dims.size() && dims[i].first == expected; ++i) expected *= dims[i].second;
  if (i != dims.size() || expected != base.numel()) return Tensor();
  std::sort(offsets.begin(), offsets.end());
  for (size_t j = 0; j < offsets.size(); ++j)
    if (offsets[j] != static_cast<int64_t>(j) * block) return Tensor();
  return base;
}

// Where q's, k's and v's gradients go, which backward keeps (not the inputs themselves:
// a projection whose chunks were rounded to bfloat16 under autocast is not kept).
struct GradRoute {
  std::array<size_t, 3> slot{};   // the input that q's, k's, v's gradient goes to
  std::array<bool, 3> in_base{};  // written into a window of that input's buffer
  std::array<Window4d, 3> window;   // where, for those
  std::vector<Shape> input_shapes;
};

// Which of q, k and v the node records as themselves and which through a base they tile.
struct GradPlan {
  std::vector<Tensor> inputs;  // what the node records
  GradRoute route;
};

// The window of view (rank >= 2) in base, as the kernels see it: as_4d of the view, which
// must stay a view (undefined shape when it would copy) with rows of unit stride.
std::optional<Window4d> kernel_window(const Tensor& view, const Tensor& base) {
  const Tensor v4 = as_4d(view.detach());
  if (v4.impl()->storage != base.impl()->storage || (v4.size(3) > 1 && v4.stride(3) != 1)) return std::nullopt;
  return Window4d{v4.shape(), v4.strides(), v4.offset() - base.offset()};
}

GradPlan own_gradients(const Tensor& q, const Tensor& k, const Tensor& v) {
  GradPlan plan;
  plan.inputs = {q, k, v};
  plan.route.slot = {0, 1, 2};
  return plan;
}

GradPlan plan_gradients(const Tensor& q, const Tensor& k, const Tensor& v) {
  const std::array<const Tensor*, 3> qkv = {&q, &k, &v};
  GradPlan plan;
  // Those of q, k, v (by index) that tile `base` go to it, as one input.
  auto add_base = [&](const Tensor& base, std::initializer_list<size_t> which) {
    for (size_t w : which) {
      std::optional<Window4d> win = kernel_window(*qkv[w], base);
      if (!win) return false;
      plan.route.slot[w] = plan.inputs.size();
      plan.route.in_base[w] = true;
      plan.route.window[w] = *win;
    }
    plan.inputs.push_back(base);
    return true;
  };
  if (Tensor base = tiled_base({&q, &k, &v}); base.defined()) {
    if (add_base(base, {0, 1, 2})) return plan;
  } else if (Tensor kv = tiled_base({&k, &v}); kv.defined()) {
    plan.route.slot[0] = 0;
    plan.inputs.push_back(q);
    if (add_base(kv, {1, 2})) return plan;
  }
  return own_gradients(q, k, v);
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
  Backend& be = backend_of(kAttention, {&q, &k, &v, &attn_mask});
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
    return rows_contiguous(as_4d(recording ? detail::autocast_share(t, kAttention) : detail::autocast_operand(t, kAttention)));
  };
  Tensor q4 = operand(q), k4 = operand(k), v4 = operand(v);
  const int64_t N = q4.size(0), H = q4.size(1), L = q4.size(2), S = k4.size(2), Ev = v4.size(3);
  Tensor out4 = new_heads(N, H, L, Ev, q4, dtype);
  Tensor lse = detail::new_tensor({N, H, L}, dtype, q, kAttention);
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
  SavedTensor sq(q4, kAttention), sk(k4, kAttention), sv(v4, kAttention), smask(mask, kAttention);
  SavedTensor so(autocast ? detail::autocast_share(out4, kAttention) : out4, kAttention);
  const DType q_dtype = q.dtype();  // the gradients' (float32 from the mixed kernel, then cast)
  // A projection's buffer takes the kernel's output as it is: only where that is its dtype.
  const GradPlan plan = dtype == q_dtype && out4.numel() > 0 ? plan_gradients(q, k, v) : own_gradients(q, k, v);
  GradRoute route = plan.route;
  for (const Tensor& t : plan.inputs) route.input_shapes.push_back(t.shape());
  return record(kAttention, out, plan.inputs, [=](const Tensor& g) -> TensorList {
    const Tensor &qs = sq.get(), &ks = sk.get(), &vs = sv.get(), &os = so.get();
    TensorList grads(route.input_shapes.size());
    if (os.numel() == 0) {  // L or Ev is 0: nothing reached the output (q, k, v their own inputs)
      TensorOptions opts = TensorOptions(q_dtype).device(qs.device());
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = zeros(route.input_shapes[i], opts);
      return grads;
    }
    for (size_t w = 0; w < 3; ++w) {
      Tensor& buffer = grads[route.slot[w]];
      if (route.in_base[w] && !buffer.defined())
        buffer = detail::new_tensor(route.input_shapes[route.slot[w]], dtype, qs, kAttention);  // every element written below
    }
    // q's, k's, v's gradient as the kernel writes it: a window of its base's buffer, or its own.
    auto grad_of = [&](size_t w, const Tensor& saved, int64_t rows, int64_t cols) {
      if (!route.in_base[w]) return new_heads(N, H, rows, cols, saved, dtype);
      const Window4d& win = route.window[w];
      return detail::make_view(grads[route.slot[w]], win.shape, win.strides, win.offset);
    };
    Tensor g4 = rows_contiguous(g.to(dtype).reshape({N, H, L, Ev}));
    Tensor gq = grad_of(0, qs, L, qs.size(3)), gk = grad_of(1, ks, S, ks.size(3)), gv = grad_of(2, vs, S, Ev);
    backend_of(kAttention, {&g4, &qs}).attention_backward(g4, qs, ks, vs, smask.get(), os, lse, scale, dropout_p, seed,
                                                  block, gq, gk, gv);
    const std::array<Tensor, 3> own = {gq, gk, gv};
    for (size_t w = 0; w < 3; ++w)
      if (!route.in_base[w]) grads[route.slot[w]] = own[w].reshape(route.input_shapes[route.slot[w]]).to(q_dtype);
    return grads;
  });
}

}  // namespace kiln
