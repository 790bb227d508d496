// BFloat16Staged (bfloat16_staged.h): each kernel call with a bfloat16 tensor runs on
// float32 stand-ins, then the results are rounded back into the caller's tensors.
#include "backend/bfloat16_staged.h"

#include <limits>

#include "backend/kernel_views.h"

namespace kiln {
namespace {

bool is_bf16(const Tensor& t) { return t.defined() && t.dtype() == kBFloat16; }

bool any_bf16(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t && is_bf16(*t)) return true;
  return false;
}

// Autocast's mixed kernels: bfloat16 operands (`low`) with a float32 output.
bool mixed(const Tensor& low, const Tensor& out) { return is_bf16(low) && out.dtype() == kFloat32; }

using kernel_views::view;

bool same_view(const Tensor& a, const Tensor& b) {
  return a.same_storage(b) && a.offset() == b.offset() && a.shape() == b.shape() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

// The float32 stand-ins of one kernel call's bfloat16 tensors. Inputs are staged before
// outputs; finish() copies the outputs back once the kernel has returned (a kernel that
// throws leaves the caller's tensors as they were).
class Staging {
 public:
  explicit Staging(Backend& be) : be_(be) {}

  // An input: t itself unless it is bfloat16 (undefined stays undefined).
  Tensor in(const Tensor& t) { return stage(t, /*read=*/true, /*write=*/false); }
  // An output the kernel only writes.
  Tensor out(const Tensor& t) { return stage(t, /*read=*/false, /*write=*/true); }
  // An output the kernel also reads.
  Tensor inout(const Tensor& t) { return stage(t, /*read=*/true, /*write=*/true); }

  void finish() {
    for (const Entry& e : entries_)
      if (e.write_back && e.original.numel() > 0) be_.copy(e.stand_in, e.original);
  }

 private:
  struct Entry {
    Tensor original, stand_in;
    bool write_back;
  };

  Tensor stage(const Tensor& t, bool read, bool write) {
    if (!is_bf16(t)) return t;
    for (Entry& e : entries_) {
      if (!same_view(e.original, t)) continue;
      e.write_back = e.write_back || write;  // an in-place kernel: one stand-in for both roles
      return e.stand_in;
    }
    Tensor s = read ? float32_copy(be_, t) : Tensor::empty(t.shape(), TensorOptions(kFloat32).device(t.device()));
    entries_.push_back({t, s, write});
    return s;
  }

  Backend& be_;
  std::vector<Entry> entries_;
};

// A contiguous bfloat16 tensor (…, 2k) whose element 0 is 4-byte aligned, viewed as
// float32 words (…, k): for kernels that only move values, never compute on them.
// Undefined when t is not such a tensor.
Tensor as_float_words(const Tensor& t) {
  if (!is_bf16(t) || !t.is_contiguous() || t.dim() == 0 || t.size(-1) % 2 != 0 || t.offset() % 2 != 0) return Tensor();
  Shape shape = t.shape();
  shape.back() /= 2;
  return view(t, shape, contiguous_strides(shape), t.offset() / 2, kFloat32);
}

// The largest bfloat16 value below hi, as a float: the top of a uniform draw in
// [lo, hi), which rounding to nearest could otherwise carry up to hi itself.
float bf16_below(double hi) {
  uint16_t b = bf16_bits_from_float(static_cast<float>(hi));
  if (static_cast<double>(float_from_bf16_bits(b)) < hi) return float_from_bf16_bits(b);
  if ((b & 0x7FFF) == 0) b = 0x8001;  // ±0: the smallest negative subnormal
  else if (b & 0x8000) ++b;           // negative: one step away from zero
  else --b;                           // positive: one step toward zero
  return float_from_bf16_bits(b);
}

}  // namespace

Tensor float32_copy(Backend& be, const Tensor& t) {
  Shape compact = t.shape();
  bool expanded = false;
  for (size_t d = 0; d < compact.size(); ++d) {
    if (t.strides()[d] == 0 && compact[d] > 1) {
      compact[d] = 1;
      expanded = true;
    }
  }
  Tensor c = Tensor::empty(compact, TensorOptions(kFloat32).device(t.device()));
  if (c.numel() > 0) be.copy(expanded ? view(t, compact, t.strides(), t.offset()) : t, c);
  if (!expanded) return c;
  Strides strides = c.strides();
  for (size_t d = 0; d < strides.size(); ++d)
    if (t.strides()[d] == 0) strides[d] = 0;
  return view(c, t.shape(), strides, 0);
}

void BFloat16Staged::arange(const Tensor& out, double start, double step) {
  if (!is_bf16(out)) return inner_.arange(out, start, step);
  Staging s(inner_);
  inner_.arange(s.out(out), start, step);
  s.finish();
}

void BFloat16Staged::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  if (!any_bf16({&x, &out})) return inner_.unary(op, x, out, a, b);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.unary(op, xs, s.out(out), a, b);
  s.finish();
}

void BFloat16Staged::binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  if (!any_bf16({&x, &y, &out})) return inner_.binary(op, x, y, out);
  Staging s(inner_);
  Tensor xs = s.in(x), ys = s.in(y);
  inner_.binary(op, xs, ys, s.out(out));
  s.finish();
}

void BFloat16Staged::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!any_bf16({&a, &b, &out})) return inner_.where(cond, a, b, out);
  Staging s(inner_);
  Tensor as = s.in(a), bs = s.in(b);
  inner_.where(cond, as, bs, s.out(out));
  s.finish();
}

void BFloat16Staged::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out,
                            const Tensor* indices) {
  if (!any_bf16({&x, &out})) return inner_.reduce(op, x, dims, out, indices);
  // A sum accumulates in float32 and is rounded once, at the end.
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.reduce(op, xs, dims, s.out(out), indices);
  s.finish();
}

void BFloat16Staged::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  if (!any_bf16({&a, &b, &out})) return inner_.matmul(a, b, out, accumulate);
  if (is_bf16(a) && is_bf16(b) && inner_.supports(Kernel::Matmul, kBFloat16, out.dtype()))
    return inner_.matmul(a, b, out, accumulate);
  // bfloat16 products are exact in float32; the float32 GEMM's sums are rounded once.
  Staging s(inner_);
  Tensor as = s.in(a), bs = s.in(b);
  inner_.matmul(as, bs, accumulate ? s.inout(out) : s.out(out), accumulate);
  s.finish();
}

void BFloat16Staged::matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (!any_bf16({&a, &b, &bias, &out}) ||
      (mixed(a, out) && is_bf16(b) && !is_bf16(bias) && inner_.supports(Kernel::Matmul, kBFloat16, kFloat32)))
    return inner_.matmul_bias(a, b, bias, out);
  Backend::matmul_bias(a, b, bias, out);  // this wrapper's copy and matmul stage what they must
}

void BFloat16Staged::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  if (!any_bf16({&x, &out})) return inner_.softmax(x, dim, log, out);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.softmax(xs, dim, log, s.out(out));
  s.finish();
}

void BFloat16Staged::softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                                      const Tensor& grad_x) {
  if (!any_bf16({&y, &g, &grad_x})) return inner_.softmax_backward(y, g, dim, log, grad_x);
  Staging s(inner_);
  Tensor ys = s.in(y), gs = s.in(g);
  inner_.softmax_backward(ys, gs, dim, log, s.out(grad_x));
  s.finish();
}

void BFloat16Staged::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  if (!any_bf16({&x, &weight, &bias, &y, &mean, &rstd})) return inner_.layer_norm(x, weight, bias, eps, y, mean, rstd);
  Staging s(inner_);
  Tensor xs = s.in(x), ws = s.in(weight), bs = s.in(bias);
  Tensor ys = s.out(y), ms = s.out(mean), rs = s.out(rstd);
  inner_.layer_norm(xs, ws, bs, eps, ys, ms, rs);
  s.finish();
}

// In bfloat16 the sum is rounded to bfloat16 before it is normalised (the contract: the
// bits of add then layer_norm), so the two steps are staged one after the other. low (the
// float32 result's bfloat16 copy) goes to a backend that writes it itself, else is
// copied from y afterwards.
void BFloat16Staged::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    const Tensor& bias, double eps, const Tensor& sum, const Tensor& y,
                                    const Tensor& mean, const Tensor& rstd, const Tensor& low) {
  if (!any_bf16({&x, &residual, &weight, &bias, &sum, &y, &mean, &rstd})) {
    if (!low.defined() || inner_.supports(Kernel::AddLayerNorm, kFloat32, kBFloat16))
      return inner_.add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd, low);
    inner_.add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd, Tensor());
    return copy(y, low);
  }
  const Tensor s = sum.defined() ? sum : Tensor::empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
  binary(BinaryOp::Add, x, residual, s);
  layer_norm(s, weight, bias, eps, y, mean, rstd);
  if (low.defined()) copy(y, low);
}

void BFloat16Staged::layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                         const Tensor& grad_bias) {
  if (!any_bf16({&g, &x, &weight, &mean, &rstd, &grad_x, &grad_weight, &grad_bias}))
    return inner_.layer_norm_backward(g, x, weight, mean, rstd, grad_x, grad_weight, grad_bias);
  Staging s(inner_);
  Tensor gs = s.in(g), xs = s.in(x), ws = s.in(weight), ms = s.in(mean), rs = s.in(rstd);
  Tensor gx = s.out(grad_x), gw = s.out(grad_weight), gb = s.out(grad_bias);
  inner_.layer_norm_backward(gs, xs, ws, ms, rs, gx, gw, gb);
  s.finish();
}

void BFloat16Staged::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  if (!any_bf16({&weight, &out})) return inner_.embedding(weight, indices, out);
  // A lookup only moves rows: an even number of bfloat16 values per row is gathered as
  // float32 words, bits untouched, instead of converting the whole table both ways.
  const Tensor w32 = as_float_words(weight), o32 = as_float_words(out);
  if (w32.defined() && o32.defined()) return inner_.embedding(w32, indices, o32);
  Staging s(inner_);
  Tensor ws = s.in(weight);
  inner_.embedding(ws, indices, s.out(out));
  s.finish();
}

void BFloat16Staged::embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                                        const Tensor& grad_weight) {
  if (!any_bf16({&g, &grad_weight})) return inner_.embedding_backward(g, indices, padding_idx, grad_weight);
  Staging s(inner_);
  Tensor gs = s.in(g);
  inner_.embedding_backward(gs, indices, padding_idx, s.inout(grad_weight));  // adds into grad_weight
  s.finish();
}

void BFloat16Staged::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                   int64_t ignore_index, double label_smoothing, const Tensor& losses,
                                   const Tensor& weights, const Tensor& lse) {
  // lse is float32 for bfloat16 logits: it passes through as it is.
  if (!any_bf16({&logits, &class_weight, &losses, &weights}))
    return inner_.cross_entropy(logits, targets, class_weight, ignore_index, label_smoothing, losses, weights,
                                lse);
  Staging s(inner_);
  Tensor xs = s.in(logits), ws = s.in(class_weight);
  Tensor ls = s.out(losses), rw = s.out(weights);
  inner_.cross_entropy(xs, targets, ws, ignore_index, label_smoothing, ls, rw, lse);
  s.finish();
}

void BFloat16Staged::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                            int64_t ignore_index, double label_smoothing, const Tensor& lse,
                                            const Tensor& g_row, const Tensor& grad_logits) {
  if (!any_bf16({&logits, &class_weight, &g_row, &grad_logits}))
    return inner_.cross_entropy_backward(logits, targets, class_weight, ignore_index, label_smoothing, lse, g_row,
                                         grad_logits);
  Staging s(inner_);
  Tensor xs = s.in(logits), ws = s.in(class_weight), gs = s.in(g_row);
  inner_.cross_entropy_backward(xs, targets, ws, ignore_index, label_smoothing, lse, gs, s.out(grad_logits));
  s.finish();
}

void BFloat16Staged::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamStepParams& hp) {
  if (!any_bf16({&param, &grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq}))
    return inner_.adam_step(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hp);
  Staging s(inner_);
  Tensor gs = s.in(grad);
  Tensor ps = s.inout(param), m = s.inout(exp_avg), v = s.inout(exp_avg_sq), vmax = s.inout(max_exp_avg_sq);
  inner_.adam_step(ps, gs, m, v, vmax, hp);
  s.finish();
}

void BFloat16Staged::adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  for (const AdamTensors& t : params) {
    if (any_bf16({&t.param, &t.grad, &t.exp_avg, &t.exp_avg_sq, &t.max_exp_avg_sq}))
      return Backend::adam_step_many(params, hp);
  }
  inner_.adam_step_many(params, hp);
}

void BFloat16Staged::uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) {
  if (!is_bf16(out)) return inner_.uniform(out, seed, block, lo, hi);
  Staging s(inner_);
  Tensor o = s.out(out);
  inner_.uniform(o, seed, block, lo, hi);
  // Keep the draw below hi once rounded (torch.rand in bfloat16 never gives 1 either).
  if (hi > lo) inner_.unary(UnaryOp::Clamp, o, o, -std::numeric_limits<double>::infinity(), bf16_below(hi));
  s.finish();
}

void BFloat16Staged::normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) {
  if (!is_bf16(out)) return inner_.normal(out, seed, block, mean, std);
  Staging s(inner_);
  inner_.normal(s.out(out), seed, block, mean, std);
  s.finish();
}

void BFloat16Staged::bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) {
  if (!is_bf16(out)) return inner_.bernoulli(out, seed, block, p);
  Staging s(inner_);
  inner_.bernoulli(s.out(out), seed, block, p);
  s.finish();
}

void BFloat16Staged::randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) {
  if (!is_bf16(out)) return inner_.randint(out, seed, block, lo, hi);
  Staging s(inner_);
  inner_.randint(s.out(out), seed, block, lo, hi);
  s.finish();
}

void BFloat16Staged::dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) {
  if (!any_bf16({&x, &out})) return inner_.dropout(x, seed, block, p, out);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.dropout(xs, seed, block, p, s.out(out));
  s.finish();
}

// bfloat16 runs the defaults' passes through this wrapper, each staged as it must be;
// so does a bfloat16 copy `low` for a backend that does not write it itself.
void BFloat16Staged::relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                                  const Tensor& low) {
  if (!any_bf16({&x, &y}) && (!low.defined() || inner_.supports(Kernel::ReluDropout, kFloat32, kBFloat16)))
    return inner_.relu_dropout(x, seed, block, p, y, low);
  Backend::relu_dropout(x, seed, block, p, y, low);
}

void BFloat16Staged::relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) {
  if (!any_bf16({&g, &y, &gx}) ||
      (mixed(y, gx) && !is_bf16(g) && inner_.supports(Kernel::ReluDropout, kFloat32, kBFloat16)))
    return inner_.relu_dropout_backward(g, y, p, gx);
  Backend::relu_dropout_backward(g, y, p, gx);
}

void BFloat16Staged::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                               double dropout_p, uint64_t seed, uint64_t block, const Tensor& out,
                               const Tensor& lse) {
  if (!any_bf16({&q, &k, &v, &mask, &out, &lse}) ||
      (mixed(q, out) && inner_.supports(Kernel::Attention, kBFloat16, kFloat32)))
    return inner_.attention(q, k, v, mask, scale, dropout_p, seed, block, out, lse);
  Staging s(inner_);
  Tensor qs = s.in(q), ks = s.in(k), vs = s.in(v), ms = s.in(mask);
  Tensor os = s.out(out), ls = s.out(lse);
  inner_.attention(qs, ks, vs, ms, scale, dropout_p, seed, block, os, ls);
  s.finish();
}

void BFloat16Staged::attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                        double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                        const Tensor& grad_k, const Tensor& grad_v) {
  if (!any_bf16({&g, &q, &k, &v, &mask, &out, &lse, &grad_q, &grad_k, &grad_v}) ||
      (mixed(q, grad_q) && inner_.supports(Kernel::Attention, kBFloat16, kFloat32)))
    return inner_.attention_backward(g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q, grad_k,
                                     grad_v);
  Staging s(inner_);
  Tensor gs = s.in(g), qs = s.in(q), ks = s.in(k), vs = s.in(v), ms = s.in(mask), os = s.in(out), ls = s.in(lse);
  Tensor gq = s.out(grad_q), gk = s.out(grad_k), gv = s.out(grad_v);
  inner_.attention_backward(gs, qs, ks, vs, ms, os, ls, scale, dropout_p, seed, block, gq, gk, gv);
  s.finish();
}

void BFloat16Staged::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (!any_bf16({&x, &out})) return inner_.gather(x, dim, index, out);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.gather(xs, dim, index, s.out(out));
  s.finish();
}

void BFloat16Staged::scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                             bool accumulate) {
  if (!any_bf16({&self, &src})) return inner_.scatter(self, dim, index, src, accumulate);
  Staging s(inner_);
  Tensor ss = s.in(src);
  inner_.scatter(s.inout(self), dim, index, ss, accumulate);
  s.finish();
}

void BFloat16Staged::index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                               double alpha) {
  if (!any_bf16({&self, &source})) return inner_.index_add(self, dim, index, source, alpha);
  Staging s(inner_);
  Tensor ss = s.in(source);
  inner_.index_add(s.inout(self), dim, index, ss, alpha);
  s.finish();
}

void BFloat16Staged::cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  if (!any_bf16({&x, &out})) return inner_.cumsum(x, dim, reverse, out);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.cumsum(xs, dim, reverse, s.out(out));
  s.finish();
}

void BFloat16Staged::sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values,
                          const Tensor& indices) {
  if (!any_bf16({&x, &values})) return inner_.sort(x, dim, descending, values, indices);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.sort(xs, dim, descending, s.out(values), indices);
  s.finish();
}

void BFloat16Staged::topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
                          const Tensor& indices) {
  if (!any_bf16({&x, &values})) return inner_.topk(x, k, dim, largest, values, indices);
  Staging s(inner_);
  Tensor xs = s.in(x);
  inner_.topk(xs, k, dim, largest, s.out(values), indices);
  s.finish();
}

void BFloat16Staged::multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                                 uint64_t block, const Tensor& out) {
  if (!is_bf16(probs)) return inner_.multinomial(probs, num_samples, replacement, seed, block, out);
  Staging s(inner_);
  inner_.multinomial(s.in(probs), num_samples, replacement, seed, block, out);
}

}  // namespace kiln
