#pragma once
// The kernel interface: the narrow waist between ops/ and the devices. ops/ validates
// arguments, allocates outputs and records the graph; a Backend only computes. Shapes
// here are already checked and broadcast (inputs expanded with stride-0 views), so a
// kernel never has to report a user error except where only it can see the data
// (an embedding index out of range, a class target out of range).
//
// A device implements the required core, the pure virtuals: copy, fill, arange, unary,
// binary, where, reduce, matmul and the random fills. Every other kernel has a default in
// this class: the fused ones (softmax, layer_norm, cross_entropy, attention, dropout,
// Adam, ...) are composed from the core (composed_kernels.cpp), the indexing ones stage
// through the host CPU's kernels (host_staged.cpp). A device overrides a default only
// for speed; backend/reference/ is a backend of the core alone, in plain loops. The CUDA
// backend (backend/cuda/, built with -Dcuda) is compiled into libkiln and reached by
// direct calls from backend_for and allocator_for, started on the first CUDA tensor; a
// CPU-only build never sees its headers. register_backend / register_allocator let
// another plug-in take its place.
#include <cstdint>
#include <vector>

#include "../core/generator.h"
#include "quant_blocks.h"
#include "../core/tensor.h"

namespace kiln {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Tanh, Sigmoid, Relu, GeluErf, GeluTanh,
  Sign,        // -1, 0, 1
  Pow,         // x ^ a
  Clamp,       // min(max(x, a), b); use ±inf for an open side
  AddScalar,   // x + a
  MulScalar,   // x * a
  RsubScalar,  // a - x
  RdivScalar,  // a / x
  // Pointwise math (sin … softplus); floating x only.
  Sin, Cos, Tan, Erf,
  Log1p,       // log(1 + x), accurate near 0
  Expm1,       // exp(x) - 1, accurate near 0
  Silu,        // x * sigmoid(x)
  Softplus,    // log(1 + exp(a x)) / a, or x where a x > b (a = beta, b = threshold)
};

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Maximum, Minimum,
  Eq, Ne, Lt, Le, Gt, Ge,  // output bool
  // Backward helpers: (g, saved) -> gradient of the input, fused to save a pass.
  ReluBackward,      // g * (x > 0), saved = x
  GeluErfBackward,   // g * gelu'(x), saved = x
  GeluTanhBackward,  // g * gelu_tanh'(x), saved = x
  TanhBackward,      // g * (1 - y^2), saved = y
  SigmoidBackward,   // g * y * (1 - y), saved = y
  SiluBackward,      // g * silu'(x) = g * s (1 + x (1 - s)), s = sigmoid(x), saved = x
};

bool is_comparison(BinaryOp op);

enum class ReduceOp : uint8_t { Sum, Max, Min };

// The hyper-parameters of one Adam step (step counts from 1).
struct AdamStepParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;
  bool decoupled = false;  // AdamW: p *= 1 - lr * weight_decay instead of an L2 gradient
  bool amsgrad = false;
  bool maximize = false;
};

// One parameter's tensors for Backend::adam_step_many; max_exp_avg_sq undefined unless amsgrad.
struct AdamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
};

// The kernels whose dtype forms a backend may take itself or leave to backend_for's
// wrapper (Backend::supports).
enum class Kernel : uint8_t {
  Matmul,        // matmul and matmul_bias
  Attention,     // attention and attention_backward
  AddLayerNorm,  // add_layer_norm with its bfloat16 copy `low`
  ReluDropout,   // relu_dropout with its bfloat16 copy `low`, relu_dropout_backward from it
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // dst[i] = cast(src[i]); same shape, any dtypes and strides. src may live on another
  // device only when one of the two is the CPU.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // out[i] = start + i * step, out contiguous 1-D.
  virtual void arange(const Tensor& out, double start, double step) = 0;

  // out = op(x, a, b), same shape and dtype.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) = 0;
  // out = op(x, y); x, y, out the same shape; x and y the same dtype; out that dtype, or
  // bool for comparisons.
  virtual void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) = 0;
  // out = cond ? a : b; all the same shape, cond bool.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // Reduces x over `dims` (sorted, non-empty) into out, which has x's shape with those
  // dims set to 1 (contiguous). With `indices` (int64, out's shape, one dim only) also
  // writes the position of the extremum (the first one on ties).
  virtual void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims,
                      const Tensor& out, const Tensor* indices) = 0;

  // out = a @ b, or out += a @ b when `accumulate`: a (..., M, K), b (..., K, N), out
  // (..., M, N) contiguous; batch dims equal (possibly stride-0), a and b any strides,
  // same floating dtype; or autocast's mixed product: a and b bfloat16, out float32
  // (float32 accumulation). Accumulating is the BLAS beta = 1: linear pre-fills its
  // output with the bias, which saves a pass that zeroes it and a pass that adds the bias.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) = 0;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out) { matmul(a, b, out, false); }

  // Random fills from (seed, first block) of a Generator; contiguous out. bernoulli and a
  // float32 uniform use word i % 4 of Philox block (block + i / 4) for element i (the
  // stream dropout's mask shares); the others use block (block + i).
  virtual void uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) = 0;
  virtual void normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) = 0;
  // out = (u < p) as out's dtype (bool, int or float 0/1).
  virtual void bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) = 0;
  // out = lo + floor(u * (hi - lo)), int64.
  virtual void randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) = 0;

  // Whether this backend takes `kernel` itself with operands of dtype `in` and results of
  // dtype `out`; a form it does not take, backend_for's wrapper (bfloat16_staged.h) runs
  // on float32 copies, as every kernel's bfloat16 form. The forms asked about:
  //   (Matmul, bf16, bf16)        bfloat16 operands and output;
  //   (Matmul, bf16, f32)         autocast's mixed product (float32 accumulation);
  //   (Attention, bf16, f32)      attention's and attention_backward's mixed form (below);
  //   (AddLayerNorm, f32, bf16)   add_layer_norm writing y rounded to bfloat16 into `low`
  //                               in the same pass;
  //   (ReluDropout, f32, bf16)    relu_dropout writing `low` likewise, and
  //                               relu_dropout_backward reading that bfloat16 y.
  // The base takes every form without bfloat16 and none with it.
  virtual bool supports(Kernel kernel, DType in, DType out) const;

  // ---- fused kernels: each has a default composed from the core above
  // (composed_kernels.cpp); a device overrides one for speed.

  // out (M, N) = a @ b + bias, bias (N) contiguous in out's dtype added to every row (a
  // linear layer's); a and b 2-D as matmul's, the mixed form included. The default copies
  // the bias into out's rows and accumulates the product onto them; a backend whose GEMM
  // adds a bias itself (the CPU's oneDNN: the mixed product, and float32 from 2 MFLOP)
  // saves that pass and the read of it back.
  virtual void matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);
  // low (R, N) = x (R, N) rounded to bfloat16 and sums (N) = Σ_r x, with the bits
  // reduce(Sum, x, {0}) gives: x float32 and low bfloat16, both contiguous, sums float32.
  // A linear's output gradient under autocast is both the GEMMs' operand and the bias
  // gradient's input; a backend that does the two in one pass (the CPU's) reads it once.
  // The default is copy, then reduce.
  virtual void round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums);
  // Softmax / log-softmax over `dim`; out contiguous, x's shape.
  virtual void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out);
  // grad_x from y = (log_)softmax(x) and g = dL/dy.
  virtual void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                                const Tensor& grad_x);

  // x viewed as (rows, n) with n = the product of the normalized dims. weight and bias
  // (n) may be undefined. Writes y (x's shape), mean and rstd (rows).
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd);
  // grad_weight / grad_bias are undefined when not wanted.
  virtual void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                   const Tensor& grad_weight, const Tensor& grad_bias);
  // layer_norm of s = x + residual, the sum rounded to x's dtype first: the bits of a
  // binary Add then layer_norm, in one pass (a post-norm Transformer layer's residual
  // add and its norm). x, residual (rows, n) contiguous; weight, bias, y, mean and rstd
  // as layer_norm's. sum (rows, n) receives s when defined (the backward needs it);
  // undefined, s is not kept. low, when defined (float32 x only, y's shape, contiguous
  // bfloat16), receives y rounded to bfloat16: under autocast, the copy the next
  // sublayer's first product reads. The default copies y into it afterwards; a backend
  // that writes each row's copy while the row is in cache (the CPU's) says
  // supports(AddLayerNorm, f32, bf16), and only such a backend is handed low by
  // backend_for's wrapper.
  virtual void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                              double eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
                              const Tensor& rstd, const Tensor& low);

  // Inference forms of two composed ops (rms_norm and apply_rotary_emb record their
  // gradients through the composition; they call these only when nothing needs one).
  // y = x · rsqrt(mean(x²) + eps) · weight over each row of n, x and y contiguous
  // (rows, n) as tensors of any shape, weight (n) contiguous or undefined.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y);
  // y = x with each pair of its last dim (d) rotated: (a, b) -> (a cos - b sin, b cos + a
  // sin), the pairs (2i, 2i + 1) when interleaved, else (i, i + d/2). x and y contiguous;
  // cos and sin views of x's shape with the last dim d/2 (stride 0 where they broadcast).
  virtual void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, const Tensor& y);

  // out (*idx, D) = weight[idx]; throws "[embedding] index … out of range" on bad ids.
  virtual void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out);
  // grad_weight (num, D) += scatter of g (*idx, D) by idx, skipping padding_idx (or -1).
  virtual void embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                                  const Tensor& grad_weight);

  // Cross-entropy on logits (N, C) with targets (N) and class weights w (C, contiguous,
  // logits' dtype; undefined = all 1), per row, with logp = log_softmax(logits[n]) and
  // ε = label_smoothing:
  //   losses[n] = -(1-ε) w[t_n] logp[t_n] - ε/C Σ_c w[c] logp[c],
  // and the row's weight w[t_n] (0 when ignored) in `weights` (N), and the row's
  // log Σ exp(logits[n]) in `lse` (N; float32 for bfloat16 logits, else theirs; 0 when
  // ignored) for the backward. Throws on a target out of range.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                             int64_t ignore_index, double label_smoothing, const Tensor& losses,
                             const Tensor& weights, const Tensor& lse);
  // grad_logits (N, C) = g_row[n] · ∂losses[n]/∂logits[n]
  //   = g_row[n] · (softmax · ((1-ε) w[t_n] + ε/C Σ w) - smoothed weighted one-hot);
  // without weights, (softmax - smoothed one-hot) · g_row[n]; softmax from the forward's
  // lse (N), so that the logits are read once.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                                      int64_t ignore_index, double label_smoothing, const Tensor& lse,
                                      const Tensor& g_row, const Tensor& grad_logits);

  // One fused Adam/AdamW update of a parameter, in place, with torch.optim.Adam's
  // arithmetic (single-tensor path). All tensors contiguous, same dtype and numel;
  // max_exp_avg_sq is undefined unless amsgrad.
  virtual void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                         const Tensor& max_exp_avg_sq, const AdamStepParams& hp);
  // adam_step for several parameters of one dtype with the same hyper-parameters and step
  // count, in one pass (torch's multi-tensor path: one launch on a GPU instead of one per
  // parameter); each element's arithmetic is adam_step's, so the bits are too. The
  // parameters' storages must not overlap. The default calls adam_step for each.
  virtual void adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp);

  // out = x * keep / (1 - p) with keep[i] = (word i < 2^32 · (1 - p)), word i being word
  // i % 4 of Philox block (block + i / 4): the stream of bernoulli(1 - p), so backward
  // rebuilds the mask from (seed, block) instead of keeping it. x, out contiguous, same
  // shape and floating dtype; 0 <= p < 1. Applied to a gradient it is dropout's backward.
  virtual void dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out);
  // y = dropout(relu(x)) as above, and its backward from y alone: gx = g · (y > 0) / (1 - p)
  // (y > 0 exactly where x > 0 and the element was kept). Same shapes, one floating dtype,
  // any strides; 0 <= p < 1. The defaults run relu then dropout, and ReluBackward then a
  // scale (two passes each); a backend that fuses them gives the same bits in one.
  // low, when defined (float32 x and y, contiguous, all of one shape), receives y rounded
  // to bfloat16: autocast's copy for the next product, which the backward then reads as
  // y (g and gx float32). A backend that writes it in the same pass and reads it so says
  // supports(ReluDropout, f32, bf16); another gets, through backend_for's wrapper, low
  // copied from y afterwards and the backward's y widened to float32.
  virtual void relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                            const Tensor& low);
  virtual void relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx);

  // Fused attention over N·H independent problems, keeping no (L, S) tensor:
  //   scores = scale · q kᵀ + mask, P = softmax(scores) by row, lse = logsumexp of each
  //   row of scores, P' = dropout(P) as above with element (n, h, l, s) numbered
  //   ((n·H + h)·L + l)·S + s, out = P' v.
  // q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev), out (N, H, L, Ev): any strides with the
  // last one 1 (so out may be the (N, L, H, Ev) layout viewed as (N, H, L, Ev)). lse
  // (N, H, L) contiguous. mask undefined, or (N, H, L, S) with any strides (0 where
  // broadcast): bool (true = masked, i.e. -inf) or q's dtype (added). dropout_p = 0: none.
  // A row whose every score is -inf (nothing may be attended to) gives P = 0 and lse = -inf,
  // so its output row is 0, as torch's _safe_softmax; attention_backward then gives it zero
  // gradients.
  // Mixed (autocast): q, k, v bfloat16, out and lse float32 (a float mask too): the GEMMs
  // take bfloat16 operands with float32 accumulation, q kᵀ and P' v, the softmax is
  // float32, and P' is rounded to bfloat16 for the second GEMM.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                         double dropout_p, uint64_t seed, uint64_t block, const Tensor& out,
                         const Tensor& lse);
  // The gradients of attention from g = dL/dout, rebuilding P from q, k, mask and lse and
  // the dropout mask from (seed, block):
  //   D = rowsum(g ∘ out), dP = (g vᵀ) ∘ keep / (1 - p), dS = P ∘ (dP − D),
  //   grad_q = scale · dS k, grad_k = scale · dSᵀ q, grad_v = P'ᵀ g.
  // g and out as out above; grad_q/k/v the shapes of q/k/v, any strides with the last one 1,
  // overwritten.
  // Mixed (autocast): q, k, v bfloat16, out float32 or its bfloat16 rounding (what
  // autocast keeps), everything else float32. Every GEMM takes bfloat16 operands (g, P'
  // and scale · dS rounded) with float32 accumulation; D and the softmax's backward are
  // float32.
  virtual void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                  double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                  const Tensor& grad_k, const Tensor& grad_v);

  // out (M, N) = x (M, K) @ wᵀ for w (N, K) in ggml's blocks in host memory: x and out
  // float32 contiguous on this device. The default dequantises w and runs matmul; the
  // CPU's keeps w in its blocks (8-bit activations dotted in integers: cpu/quant_matmul.h).
  virtual void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& out);

  // ---- indexing, scatter, scan, sort and sampling
  // Not pure: the base class implements each one by staging through host memory (the
  // inputs copied to the CPU, the CPU backend's kernel run on them, the results copied
  // back into the device tensors), so a backend without kernels of its own for these
  // (CUDA today) works unchanged at the price of the copies; a backend overrides them
  // for speed. Every tensor has at least one dim (ops/ views a 0-D tensor as (1)); index
  // tensors are int64. Only the kernel sees index values, so it checks them: one out of
  // range throws "[op] index 7 is out of bounds for dim 1 with size 4". Work along `dim`
  // runs in index order, so repeated indices give the same result (the last write of a
  // scatter, the order of a sum) whatever the thread count.

  // out = x gathered along dim: out[.., j, ..] = x[.., index[.., j, ..], ..] ("[gather]").
  // index and out the same shape, index.size(d) <= x.size(d) for d != dim; any strides.
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);
  // In place: self[.., index[.., j, ..], ..] = src[.., j, ..], or += when accumulate (bool:
  // logical or) ("[scatter]" / "[scatter_add]"). src has index's shape (a window of the
  // caller's src, or a scalar expanded with stride 0) and self's dtype;
  // index.size(d) <= self.size(d) for d != dim; any strides.
  virtual void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate);
  // In place: self.select(dim, index[i]) += alpha * source.select(dim, i) ("[index_add]").
  // index (K), source self's shape with K at dim, same dtype; alpha already representable
  // in it (an integer for int64 self). Any strides.
  virtual void index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                         double alpha);
  // out = the running sum of x along dim, from the last element down when `reverse` (the
  // gradient of a cumsum). x and out the same shape and dtype (not bool); float32 sums in
  // double as torch does on the CPU, int64 wraps around on overflow. Any strides.
  virtual void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out);
  // values (x's shape) = x sorted along dim, indices (int64) = where each came from. NaN is
  // larger than every number. Ties keep their order (a stable sort, whatever `stable`).
  virtual void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices);
  // values, indices (x's shape with k at dim) = the k largest (or smallest) of x along dim,
  // best first, ties in index order; NaN is larger than every number; 0 <= k <= x.size(dim).
  virtual void topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
                    const Tensor& indices);
  // out (R, S) int64 contiguous = S category indices per row of probs (R, C), floating, any
  // strides, not necessarily normalised. Throws "[multinomial] …" on a negative, inf or
  // NaN entry or a row summing to 0. With replacement, sample s of row r is the inverse
  // CDF of the uniform double of Philox block (block + r·S + s); without, row r keeps the
  // S largest keys p_c / E_c, E_c = -log(1 - u_c) (exponential) from block (block + r·C + c)
  // (zero-weight categories last), which draws in order without replacement. Uses
  // R·S or R·C blocks from (seed, block).
  virtual void multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                           uint64_t block, const Tensor& out);
};

// The Backend::supports answer of a device with all of autocast's forms (the CPU's and
// CUDA's): every form without bfloat16, the mixed (Matmul | Attention, bf16, f32) and the
// bfloat16 copies (AddLayerNorm | ReluDropout, f32, bf16); not bfloat16 throughout.
bool supports_autocast_forms(Kernel kernel, DType in, DType out);

// The backend of a device; throws "[device] …" if none is registered for it. Wrapped so
// that its kernels other than copy and fill never see a bfloat16 tensor (they run on
// float32 copies: bfloat16_staged.h). The CPU's is the CPU backend, or the reference
// backend under KILN_CPU_BACKEND=reference.
Backend& backend_for(Device device);
// Which backend the CPU's ops run on: "cpu", "reference (the required kernels in plain
// loops)" or "registered" (a plug-in's, through register_backend).
const char* cpu_backend_name();
// Makes `backend` the one of every device of `type` (CPU or CUDA); nullptr restores the
// built-in one. Call it before ops run on that device type, not while they run.
void register_backend(DeviceType type, Backend* backend);

// The backend an op on these tensors runs on; throws "[op] expected all tensors on the
// same device, got cpu and cuda:0".
Backend& backend_of(const char* op, std::initializer_list<const Tensor*> tensors);

// Throws "[round_bf16_and_column_sums] …" unless x (R, N) is float32, low (R, N) bfloat16
// (both contiguous) and sums (N) float32, all on one device.
void check_round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums);

}  // namespace kiln
