// The Backend base class's fused kernels, composed from the required core (copy, fill,
// unary, binary, where, reduce, matmul, the random fills, gather / scatter / index_add).
// A device that implements only the core runs every op through these; a device with a
// fused kernel of its own overrides the default for speed. Each default computes what the
// kernel's contract in backend.h says, in the operands' dtype, one core kernel at a time
// (so its rounding is that of the unfused ops, not necessarily the fused kernel's bits).
#include <cmath>
#include <limits>
#include <vector>

#include "backend/adam_scalars.h"
#include "backend/backend.h"
#include "backend/kernel_views.h"

namespace kiln {
namespace {

using kernel_views::expanded;
using kernel_views::reshaped;
using kernel_views::transposed;
using kernel_views::view;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The core kernels on fresh outputs: each returns a new contiguous tensor on be's device.
struct Core {
  Backend& be;

  Tensor empty(const Shape& shape, DType dtype) const {
    return Tensor::empty(shape, TensorOptions(dtype).device(be.device()));
  }
  // value in `dtype`, one element seen as `shape` (stride 0 everywhere).
  Tensor scalar(double value, DType dtype, const Shape& shape) const {
    Tensor s = empty(Shape(shape.size(), 1), dtype);
    be.fill(s, value);
    return expanded(s, shape);
  }
  Tensor unary(UnaryOp op, const Tensor& x, double a = 0, double b = 0) const {
    Tensor out = empty(x.shape(), x.dtype());
    be.unary(op, x, out, a, b);
    return out;
  }
  Tensor binary(BinaryOp op, const Tensor& x, const Tensor& y) const {
    Tensor out = empty(x.shape(), is_comparison(op) ? kBool : x.dtype());
    be.binary(op, x, y, out);
    return out;
  }
  // x op y with y broadcast to x's shape.
  Tensor with(BinaryOp op, const Tensor& x, const Tensor& y) const { return binary(op, x, expanded(y, x.shape())); }
  Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) const {
    Tensor out = empty(a.shape(), a.dtype());
    be.where(cond, a, b, out);
    return out;
  }
  // x reduced over dims, kept as size-1 dims.
  Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims) const {
    Shape shape = x.shape();
    for (int64_t d : dims) shape[static_cast<size_t>(d)] = 1;
    Tensor out = empty(shape, x.dtype());
    be.reduce(op, x, dims, out, nullptr);
    return out;
  }
  Tensor matmul(const Tensor& a, const Tensor& b) const {
    Shape shape = a.shape();
    shape.back() = b.size(-1);
    Tensor out = empty(shape, a.dtype());
    be.matmul(a, b, out, false);
    return out;
  }
  Tensor cast(const Tensor& x, DType dtype) const {
    Tensor out = empty(x.shape(), dtype);
    be.copy(x, out);
    return out;
  }
  Tensor contiguous(const Tensor& x) const { return x.is_contiguous() ? x : cast(x, x.dtype()); }
  // x seen as (rows, n), copied first if it is not contiguous.
  Tensor rows(const Tensor& x, int64_t rows, int64_t n) const { return reshaped(contiguous(x), {rows, n}); }
  // x, whose -inf entries become 0 (a row maximum of a row with nothing to attend to).
  Tensor finite_or_zero(const Tensor& x) const {
    return where(binary(BinaryOp::Eq, x, scalar(-kInfinity, x.dtype(), x.shape())), scalar(0, x.dtype(), x.shape()), x);
  }
  // Σ exp(x - m) along dim (kept), m the row maximum where finite: 0 for a row of -inf.
  // Returns {m, Σ}.
  std::pair<Tensor, Tensor> shifted_exp_sum(const Tensor& x, int64_t dim) const {
    const Tensor m = finite_or_zero(reduce(ReduceOp::Max, x, {dim}));
    const Tensor e = unary(UnaryOp::Exp, with(BinaryOp::Sub, x, m));
    return {m, reduce(ReduceOp::Sum, e, {dim})};
  }
};

// The int64 values of t, on the host, for the checks only a kernel can make.
std::vector<int64_t> host_values(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), TensorOptions(kInt64));
  if (t.numel() > 0) be.copy(t, h);
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}

void check_embedding_indices(Backend& be, const Tensor& indices, int64_t num) {
  const std::vector<int64_t> idx = host_values(be, indices);
  for (size_t i = 0; i < idx.size(); ++i) {
    KILN_CHECK(idx[i] >= 0 && idx[i] < num, "embedding", "index ", idx[i], " out of range for an embedding of ", num,
               " rows (at position ", i, ")");
  }
}

void check_targets(Backend& be, const Tensor& targets, int64_t C, int64_t ignore_index) {
  const std::vector<int64_t> t = host_values(be, targets);
  for (size_t n = 0; n < t.size(); ++n) {
    KILN_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < C), "cross_entropy", "target ", t[n],
               " out of range for ", C, " classes (at position ", n, ")");
  }
}

// Cross-entropy's per-row pieces: valid (N) bool, the safe targets (N) (0 where
// ignored) and the target's class weight w_t (N, 0 where ignored).
struct TargetRows {
  Tensor valid, safe, weight;
};

TargetRows target_rows(const Core& c, const Tensor& targets, const Tensor& class_weight, int64_t ignore_index,
                       DType dtype) {
  const Shape n{targets.size(0)};
  TargetRows r;
  r.valid = c.binary(BinaryOp::Ne, targets, c.scalar(static_cast<double>(ignore_index), kInt64, n));
  r.safe = c.where(r.valid, targets, c.scalar(0, kInt64, n));
  if (class_weight.defined()) {
    Tensor w = c.empty(n, dtype);
    c.be.gather(class_weight, 0, r.safe, w);
    r.weight = c.where(r.valid, w, c.scalar(0, dtype, n));
  } else {
    r.weight = c.cast(r.valid, dtype);
  }
  return r;
}

}  // namespace

bool Backend::supports(Kernel, DType in, DType out) const { return in != kBFloat16 && out != kBFloat16; }

void Backend::matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  copy(expanded(view(bias, {1, bias.size(0)}, {0, bias.stride(0)}, bias.offset()), out.shape()), out);
  matmul(a, b, out, /*accumulate=*/true);
}

void Backend::round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) {
  check_round_bf16_and_column_sums(x, low, sums);
  copy(x, low);
  reduce(ReduceOp::Sum, x, {0}, sums, nullptr);
}

// softmax = e / Σ e, log_softmax = (x - m) - log Σ e, with e = exp(x - m), m the maximum.
void Backend::softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) {
  const Core c{*this};
  const Tensor m = c.reduce(ReduceOp::Max, x, {dim});
  const Tensor z = c.with(BinaryOp::Sub, x, m);
  const Tensor e = c.unary(UnaryOp::Exp, z);
  const Tensor s = c.reduce(ReduceOp::Sum, e, {dim});
  if (log) {
    binary(BinaryOp::Sub, z, expanded(c.unary(UnaryOp::Log, s), x.shape()), out);
  } else {
    binary(BinaryOp::Div, e, expanded(s, x.shape()), out);
  }
}

// softmax: y (g - Σ g y); log_softmax: g - exp(y) Σ g.
void Backend::softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log, const Tensor& grad_x) {
  const Core c{*this};
  if (log) {
    const Tensor s = c.reduce(ReduceOp::Sum, g, {dim});
    const Tensor p = c.unary(UnaryOp::Exp, y);
    binary(BinaryOp::Sub, g, c.with(BinaryOp::Mul, p, s), grad_x);
  } else {
    const Tensor s = c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, g, y), {dim});
    binary(BinaryOp::Mul, y, c.with(BinaryOp::Sub, g, s), grad_x);
  }
}

// x (rows, n): mean = Σ x / n, rstd = 1 / sqrt(Σ (x - mean)² / n + eps),
// y = (x - mean) · rstd · weight + bias.
void Backend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd) {
  const Core c{*this};
  const int64_t rows = mean.numel(), n = rows == 0 ? 0 : x.numel() / rows;
  if (rows == 0 || n == 0) return;
  const Tensor xr = c.rows(x, rows, n);
  const Tensor mu = c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, xr, {1}), 1.0 / static_cast<double>(n));
  const Tensor d = c.with(BinaryOp::Sub, xr, mu);
  const Tensor var = c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, d, d), {1}),
                             1.0 / static_cast<double>(n));
  const Tensor r = c.unary(UnaryOp::Rsqrt, c.unary(UnaryOp::AddScalar, var, eps));
  Tensor out = c.with(BinaryOp::Mul, d, r);
  if (weight.defined()) out = c.with(BinaryOp::Mul, out, reshaped(c.contiguous(weight), {1, n}));
  if (bias.defined()) out = c.with(BinaryOp::Add, out, reshaped(c.contiguous(bias), {1, n}));
  copy(out, reshaped(y, {rows, n}));
  copy(mu, reshaped(mean, {rows, 1}));
  copy(r, reshaped(rstd, {rows, 1}));
}

// With x̂ = (x - mean) · rstd and ĝ = g · weight:
//   grad_x = rstd · (ĝ - mean(ĝ) - x̂ · mean(ĝ x̂)), grad_weight = Σ_rows g x̂, grad_bias = Σ_rows g.
void Backend::layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                  const Tensor& grad_bias) {
  const Core c{*this};
  const int64_t rows = mean.numel(), n = rows == 0 ? 0 : x.numel() / rows;
  if (rows == 0 || n == 0) {
    if (grad_weight.defined() && grad_weight.numel() > 0) fill(grad_weight, 0);
    if (grad_bias.defined() && grad_bias.numel() > 0) fill(grad_bias, 0);
    return;
  }
  const Tensor gr = c.rows(g, rows, n), xr = c.rows(x, rows, n);
  const Tensor mu = reshaped(c.contiguous(mean), {rows, 1}), r = reshaped(c.contiguous(rstd), {rows, 1});
  const Tensor xhat = c.with(BinaryOp::Mul, c.with(BinaryOp::Sub, xr, mu), r);
  if (grad_x.defined()) {
    const Tensor gh = weight.defined() ? c.with(BinaryOp::Mul, gr, reshaped(c.contiguous(weight), {1, n})) : gr;
    const double inv_n = 1.0 / static_cast<double>(n);
    const Tensor mean_g = c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, gh, {1}), inv_n);
    const Tensor mean_gx =
        c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, gh, xhat), {1}), inv_n);
    const Tensor inner = c.binary(BinaryOp::Sub, c.with(BinaryOp::Sub, gh, mean_g), c.with(BinaryOp::Mul, xhat, mean_gx));
    binary(BinaryOp::Mul, inner, expanded(r, inner.shape()), reshaped(grad_x, {rows, n}));
  }
  if (grad_weight.defined()) copy(c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, gr, xhat), {0}), reshaped(grad_weight, {1, n}));
  if (grad_bias.defined()) copy(c.reduce(ReduceOp::Sum, gr, {0}), reshaped(grad_bias, {1, n}));
}

void Backend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y) {
  const Core c{*this};
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0 || n == 0) return;
  const Tensor xr = c.rows(x, rows, n);
  const Tensor ms = c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, xr, xr), {1}),
                            1.0 / static_cast<double>(n));
  Tensor out = c.with(BinaryOp::Mul, xr, c.unary(UnaryOp::Rsqrt, c.unary(UnaryOp::AddScalar, ms, eps)));
  if (weight.defined()) out = c.with(BinaryOp::Mul, out, reshaped(weight, {1, n}));
  copy(out, reshaped(y, {rows, n}));
}

namespace {

// The two halves of each pair as views of `t` (contiguous (..., d)) of shape `half`:
// (2i, 2i + 1) when interleaved, else (i, i + d/2).
std::pair<Tensor, Tensor> pair_views(const Tensor& t, const Shape& half, bool interleaved) {
  Strides strides = contiguous_strides(half);
  const int64_t d = t.size(-1);
  for (size_t i = 0; i + 1 < half.size(); ++i) strides[i] = t.stride(static_cast<int64_t>(i));
  strides.back() = interleaved ? 2 : 1;
  const int64_t second = interleaved ? 1 : d / 2;
  return {view(t, half, strides, t.offset()), view(t, half, strides, t.offset() + second)};
}

}  // namespace

void Backend::rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, const Tensor& y) {
  if (x.numel() == 0) return;
  const Core c{*this};
  const auto [a, b] = pair_views(x, cos.shape(), interleaved);
  const auto [ya, yb] = pair_views(y, cos.shape(), interleaved);
  copy(c.binary(BinaryOp::Sub, c.binary(BinaryOp::Mul, a, cos), c.binary(BinaryOp::Mul, b, sin)), ya);
  copy(c.binary(BinaryOp::Add, c.binary(BinaryOp::Mul, b, cos), c.binary(BinaryOp::Mul, a, sin)), yb);
}

void Backend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                             double eps, const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                             const Tensor& low) {
  const Tensor s = sum.defined() ? sum : Core{*this}.empty(x.shape(), x.dtype());
  binary(BinaryOp::Add, x, residual, s);
  layer_norm(s, weight, bias, eps, y, mean, rstd);
  if (low.defined()) copy(y, low);
}

// out (K, D) = weight rows gathered by the flat indices (K) expanded over D.
void Backend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  check_embedding_indices(*this, indices, weight.size(0));
  const Core c{*this};
  const int64_t K = indices.numel(), D = weight.size(1);
  if (K == 0 || D == 0) return;
  const Tensor idx = reshaped(c.contiguous(indices), {K, 1});
  gather(weight, 0, expanded(idx, {K, D}), reshaped(out, {K, D}));
}

// grad_weight += index_add of g's rows (K, D) by the flat indices, padding rows zeroed.
void Backend::embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                                 const Tensor& grad_weight) {
  check_embedding_indices(*this, indices, grad_weight.size(0));
  const Core c{*this};
  const int64_t K = indices.numel(), D = grad_weight.size(1);
  if (K == 0 || D == 0) return;
  const Tensor idx = reshaped(c.contiguous(indices), {K});
  Tensor rows = c.rows(g, K, D);
  if (padding_idx >= 0) {
    const Tensor keep = c.binary(BinaryOp::Ne, idx, c.scalar(static_cast<double>(padding_idx), kInt64, {K}));
    rows = c.where(expanded(reshaped(keep, {K, 1}), {K, D}), rows, c.scalar(0, rows.dtype(), {K, D}));
  }
  index_add(grad_weight, 0, idx, rows, 1.0);
}

// lse = log Σ exp(x), logp = x - lse; losses = -(1-ε) w_t logp_t - ε/C Σ_c w_c logp_c.
void Backend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                            int64_t ignore_index, double label_smoothing, const Tensor& losses, const Tensor& weights,
                            const Tensor& lse) {
  const int64_t N = logits.size(0), C = logits.size(1);
  check_targets(*this, targets, C, ignore_index);
  if (N == 0) return;
  const Core c{*this};
  const DType dt = logits.dtype();
  const TargetRows t = target_rows(c, targets, class_weight, ignore_index, dt);
  const auto [m, s] = c.shifted_exp_sum(logits, 1);
  const Tensor row_lse = c.binary(BinaryOp::Add, m, c.unary(UnaryOp::Log, s));  // (N, 1)
  const Tensor logp = c.with(BinaryOp::Sub, logits, row_lse);
  Tensor logp_t = c.empty({N, 1}, dt);
  gather(logp, 1, reshaped(t.safe, {N, 1}), logp_t);
  const Tensor w_t = reshaped(t.weight, {N, 1});
  Tensor loss = c.unary(UnaryOp::MulScalar, c.binary(BinaryOp::Mul, w_t, logp_t), -(1.0 - label_smoothing));
  if (label_smoothing > 0) {
    const Tensor wl =
        class_weight.defined() ? c.with(BinaryOp::Mul, logp, reshaped(c.contiguous(class_weight), {1, C})) : logp;
    const Tensor smooth =
        c.unary(UnaryOp::MulScalar, c.reduce(ReduceOp::Sum, wl, {1}), -label_smoothing / static_cast<double>(C));
    loss = c.binary(BinaryOp::Add, loss, smooth);
  }
  const Tensor valid = reshaped(t.valid, {N, 1});
  copy(c.where(valid, loss, c.scalar(0, dt, {N, 1})), reshaped(losses, {N, 1}));
  copy(t.weight, weights);
  copy(c.where(valid, row_lse, c.scalar(0, dt, {N, 1})), reshaped(lse, {N, 1}));
}

// grad = g_n · (softmax · ((1-ε) w_t + ε/C Σ w) - (1-ε) w_t onehot(t) - ε/C w), 0 for ignored rows.
void Backend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                     int64_t ignore_index, double label_smoothing, const Tensor& lse,
                                     const Tensor& g_row, const Tensor& grad_logits) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0 || C == 0) return;
  const Core c{*this};
  const DType dt = logits.dtype();
  const double eps = label_smoothing, per_class = label_smoothing / static_cast<double>(C);
  const TargetRows t = target_rows(c, targets, class_weight, ignore_index, dt);
  const Tensor valid = reshaped(t.valid, {N, 1});
  const Tensor g = c.where(valid, reshaped(c.contiguous(g_row), {N, 1}), c.scalar(0, dt, {N, 1}));
  const Tensor w_t = reshaped(t.weight, {N, 1});
  const Tensor w_row = class_weight.defined() ? reshaped(c.contiguous(class_weight), {1, C}) : Tensor();
  // Σ w, (1, 1): C without class weights.
  const Tensor sum_w = w_row.defined() ? c.reduce(ReduceOp::Sum, w_row, {1}) : c.scalar(static_cast<double>(C), dt, {1, 1});
  const Tensor target_part = c.unary(UnaryOp::MulScalar, w_t, 1.0 - eps);
  const Tensor coef =
      c.binary(BinaryOp::Mul, g, c.with(BinaryOp::Add, target_part, c.unary(UnaryOp::MulScalar, sum_w, per_class)));
  const Tensor p = c.unary(UnaryOp::Exp, c.with(BinaryOp::Sub, logits, reshaped(c.contiguous(lse), {N, 1})));
  Tensor grad = c.with(BinaryOp::Mul, p, coef);
  Tensor onehot = c.empty({N, C}, dt);
  fill(onehot, 0);
  scatter(onehot, 1, reshaped(t.safe, {N, 1}), c.binary(BinaryOp::Mul, target_part, g), false);
  grad = c.binary(BinaryOp::Sub, grad, onehot);
  if (eps > 0) {
    const Tensor spread = w_row.defined() ? c.unary(UnaryOp::MulScalar, w_row, per_class) : c.scalar(per_class, dt, {1, C});
    grad = c.binary(BinaryOp::Sub, grad, c.binary(BinaryOp::Mul, expanded(g, {N, C}), expanded(spread, {N, C})));
  }
  where(expanded(valid, {N, C}), grad, c.scalar(0, dt, {N, C}), grad_logits);
}

// torch.optim.Adam's single-tensor update, one core kernel per step of adam_range's
// arithmetic (cpu_optim.cpp), each rounded in the parameter's dtype as there.
void Backend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                        const Tensor& max_exp_avg_sq, const AdamStepParams& hp) {
  if (param.numel() == 0) return;
  const Core c{*this};
  const AdamScalars<double> s = adam_scalars<double>(hp);
  // The scalars as the parameter's dtype rounds them.
  auto in_dtype = [&](double v) { return param.dtype() == kFloat32 ? static_cast<double>(static_cast<float>(v)) : v; };
  Tensor g = s.maximize ? c.unary(UnaryOp::Neg, grad) : grad;
  if (s.l2) g = c.binary(BinaryOp::Add, g, c.unary(UnaryOp::MulScalar, param, in_dtype(s.weight_decay)));
  const Tensor p = s.decoupled ? c.unary(UnaryOp::MulScalar, param, in_dtype(s.decay_factor)) : param;
  const Tensor m = c.binary(BinaryOp::Add, c.unary(UnaryOp::MulScalar, exp_avg, in_dtype(s.beta1)),
                            c.unary(UnaryOp::MulScalar, g, in_dtype(s.one_minus_beta1)));
  Tensor v = c.binary(BinaryOp::Add, c.unary(UnaryOp::MulScalar, exp_avg_sq, in_dtype(s.beta2)),
                      c.binary(BinaryOp::Mul, c.unary(UnaryOp::MulScalar, g, in_dtype(s.one_minus_beta2)), g));
  copy(m, exp_avg);
  copy(v, exp_avg_sq);
  if (max_exp_avg_sq.defined()) {
    v = c.binary(BinaryOp::Maximum, max_exp_avg_sq, v);
    copy(v, max_exp_avg_sq);
  }
  const Tensor root = c.unary(UnaryOp::Sqrt, v);
  const Tensor scaled = c.binary(BinaryOp::Div, root, c.scalar(in_dtype(s.bc2_sqrt), param.dtype(), root.shape()));
  const Tensor d = c.unary(UnaryOp::AddScalar, scaled, in_dtype(s.eps));
  const Tensor step = c.unary(UnaryOp::MulScalar, c.binary(BinaryOp::Div, m, d), in_dtype(s.neg_step_size));
  binary(BinaryOp::Add, p, step, param);
}

void Backend::quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& out) {
  const Core c{*this};
  Tensor host = Tensor::empty({w.rows, w.cols}, TensorOptions(kFloat32));
  for (int64_t r = 0; r < w.rows; ++r) dequantize_row(w.type, w.row(r), host.data<float>() + r * w.cols, w.cols);
  Tensor values = host;
  if (!device().is_cpu()) {
    values = c.empty(host.shape(), kFloat32);
    copy(host, values);
  }
  matmul(x, transposed(values), out, false);
}

void Backend::adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  for (const AdamTensors& t : params) adam_step(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq, hp);
}

// out = keep ? x · 1/(1-p) : 0, keep the bernoulli(1 - p) stream at (seed, block).
void Backend::dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) {
  if (x.numel() == 0) return;
  if (p == 0) return copy(x, out);
  const Core c{*this};
  Tensor keep = c.empty(x.shape(), kBool);
  bernoulli(keep, seed, block, 1.0 - p);
  const Tensor scaled = c.unary(UnaryOp::MulScalar, x, 1.0 / (1.0 - p));
  where(keep, scaled, c.scalar(0, x.dtype(), x.shape()), out);
}

void Backend::relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                           const Tensor& low) {
  unary(UnaryOp::Relu, x, y, 0, 0);
  dropout(y, seed, block, p, y);  // elementwise, so in place is safe
  if (low.defined()) copy(y, low);
}

void Backend::relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) {
  binary(BinaryOp::ReluBackward, g, y, gx);
  unary(UnaryOp::MulScalar, gx, gx, 1.0 / (1.0 - p), 0);
}

namespace {

// attention's P (N, H, L, S) = softmax(scale · q kᵀ + mask) by row, a row of -inf giving
// 0; also the rows' log-sum-exp (N, H, L, 1), -inf for such a row. With lse given, P is
// rebuilt from it instead (the backward).
struct Probabilities {
  Tensor p, lse;
};

Probabilities attention_probabilities(const Core& c, const Tensor& q, const Tensor& k, const Tensor& mask,
                                      double scale, const Tensor& saved_lse) {
  Tensor scores = c.unary(UnaryOp::MulScalar, c.matmul(q, transposed(k)), scale);
  if (mask.defined()) {
    scores = mask.dtype() == kBool
                 ? c.where(mask, c.scalar(-kInfinity, scores.dtype(), scores.shape()), scores)
                 : c.binary(BinaryOp::Add, scores, mask);
  }
  const int64_t last = scores.dim() - 1;
  Probabilities r;
  if (saved_lse.defined()) {
    Shape shape = saved_lse.shape();
    shape.push_back(1);
    r.lse = reshaped(c.contiguous(saved_lse), shape);
    r.p = c.unary(UnaryOp::Exp, c.with(BinaryOp::Sub, scores, c.finite_or_zero(r.lse)));
    return r;
  }
  const auto [m, s] = c.shifted_exp_sum(scores, last);
  const Tensor e = c.unary(UnaryOp::Exp, c.with(BinaryOp::Sub, scores, m));
  // A dead row sums to 0: divide by 1 instead, which leaves its zeros.
  const Tensor safe_s = c.where(c.binary(BinaryOp::Eq, s, c.scalar(0, s.dtype(), s.shape())),
                                c.scalar(1, s.dtype(), s.shape()), s);
  r.p = c.with(BinaryOp::Div, e, safe_s);
  r.lse = c.binary(BinaryOp::Add, m, c.unary(UnaryOp::Log, s));
  return r;
}

}  // namespace

void Backend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                        double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  if (out.numel() == 0 && lse.numel() == 0) return;
  const Core c{*this};
  const Probabilities pr = attention_probabilities(c, q, k, mask, scale, Tensor());
  copy(pr.lse, reshaped(lse, pr.lse.shape()));
  Tensor p = pr.p;
  if (dropout_p > 0) dropout(p, seed, block, dropout_p, p);
  copy(c.matmul(p, v), out);
}

void Backend::attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                 double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                 const Tensor& grad_k, const Tensor& grad_v) {
  const Core c{*this};
  const Probabilities pr = attention_probabilities(c, q, k, mask, scale, lse);
  const int64_t last = g.dim() - 1;
  // D = rowsum(g ∘ out); dP = (g vᵀ) ∘ keep / (1 - p); dS = P ∘ (dP − D).
  const Tensor D = c.reduce(ReduceOp::Sum, c.binary(BinaryOp::Mul, g, out), {last});
  Tensor dp = c.matmul(g, transposed(v));
  Tensor kept = pr.p;
  if (dropout_p > 0) {
    dropout(dp, seed, block, dropout_p, dp);
    kept = c.empty(pr.p.shape(), pr.p.dtype());
    dropout(pr.p, seed, block, dropout_p, kept);
  }
  const Tensor ds = c.binary(BinaryOp::Mul, pr.p, c.with(BinaryOp::Sub, dp, D));
  copy(c.unary(UnaryOp::MulScalar, c.matmul(ds, k), scale), grad_q);
  copy(c.unary(UnaryOp::MulScalar, c.matmul(transposed(ds), q), scale), grad_k);
  copy(c.matmul(transposed(kept), g), grad_v);
}

}  // namespace kiln
