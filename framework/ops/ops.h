#pragma once
// Kiln's public functions. Each validates its arguments (throwing kiln::Error with
// "[op] …"), runs a kernel of the inputs' backend and, when grad mode is on and an input
// requires grad, records its backward. Semantics follow PyTorch's functions of the
// same name.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/grad_mode.h"
#include "../core/generator.h"
#include "../core/tensor.h"
#include "tensor_literal.h"

namespace kiln {

// ---------------------------------------------------------------- factories
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor empty_like(const Tensor& t);
// [start, end) in steps of `step`; int64 unless opts say otherwise.
Tensor arange(double end, TensorOptions opts = kInt64);
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = kInt64);
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
Tensor scalar_tensor(double value, TensorOptions opts = {});

// From data. The vector's length must equal the shape's numel.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts);
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape) {
  return from_vector<T>(data, shape, TensorOptions(dtype_of<T>::value));
}
// torch.tensor: tensor(3.5), tensor({1, 2, 3}), tensor({{1.5, 2}, {3, 4}}), nested to any
// depth (ops/tensor_literal.h). Without a dtype in opts the values decide it: bools ->
// bool, integers -> int64, any floating value -> float32. Ragged nesting throws
// "[tensor] expected a sequence of length 2 at dim 1, got 1 (at position [1])".
Tensor tensor(const TensorLiteral& data, TensorOptions opts = {});

// Random, from `gen` (the default generator when null): same seed, same numbers.
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
// Each element 1 with probability p (a tensor of probabilities or a scalar).
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts = {}, Generator* gen = nullptr);

// ---------------------------------------------------------------- elementwise
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a
Tensor rdiv(const Tensor& a, double b);  // b / a
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // no gradient (zero almost everywhere)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (the erf form) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
// ---- pointwise math: int64/bool inputs give float32 for sin … expm1, as
// torch; silu and softplus take floating inputs only.
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);  // log(1 + x), accurate near 0
Tensor expm1(const Tensor& x);  // exp(x) - 1, accurate near 0
Tensor silu(const Tensor& x);   // x * sigmoid(x)
// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold; beta != 0.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);

// Comparisons give bool tensors; broadcast like arithmetic.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// cond ? a : b, all three broadcast together; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
// x with `value` where mask (bool, broadcastable to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---------------------------------------------------------------- reductions
// An empty dims list reduces over all dims.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Largest / smallest values over dims; the gradient is shared evenly among ties.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
// One dim as an integer, sum(x, -1); a braced list ({0, 1}, {})
// always picks the list overload above (shape.h, DimIndex).
template <DimIndex I> Tensor sum(const Tensor& x, I dim, bool keepdim = false) {
  return sum(x, detail::dims_of(dim), keepdim);
}
template <DimIndex I> Tensor mean(const Tensor& x, I dim, bool keepdim = false) {
  return mean(x, detail::dims_of(dim), keepdim);
}
template <DimIndex I> Tensor var(const Tensor& x, I dim, int64_t correction = 1, bool keepdim = false) {
  return var(x, detail::dims_of(dim), correction, keepdim);
}
template <DimIndex I> Tensor logsumexp(const Tensor& x, I dim, bool keepdim = false) {
  return logsumexp(x, detail::dims_of(dim), keepdim);
}
template <DimIndex I> Tensor amax(const Tensor& x, I dim, bool keepdim = false) {
  return amax(x, detail::dims_of(dim), keepdim);
}
template <DimIndex I> Tensor amin(const Tensor& x, I dim, bool keepdim = false) {
  return amin(x, detail::dims_of(dim), keepdim);
}

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
// Along one dim: values and the index of the (first) extremum; the gradient flows to it.
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // index into the flattened tensor
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

// Sums g (broadcast result) back down to `shape` (the inverse of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---------------------------------------------------------------- matmul
// torch.matmul: 1-D, 2-D and batched N-d with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // 2-D only
Tensor bmm(const Tensor& a, const Tensor& b);  // 3-D only, equal batch
// F.linear: x (…, in) @ weight (out, in)^T + bias (out) -> (…, out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The same for an x the caller gives up (linear(relu_dropout(h, p), w), std::move(x)):
// under autocast, where the product reads only x's bfloat16 copy, x's float32 memory (if
// nothing else holds it) goes before the output is allocated. Same values and gradients.
Tensor linear(Tensor&& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---------------------------------------------------------------- shape
Tensor view(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// Slices of x along dim at the given int64 indices (negative counts from the end):
// x (…, N, …), index (K) -> (…, K, …); a 0-D index drops the dim.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
// A differentiable dtype conversion (gradient converted back); non-float targets cut the graph.
Tensor to_dtype(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device device);

// ---------------------------------------------------------------- structure ops, std, norm
// Composed from the differentiable ops above (ops/triangular.cpp, repeat.cpp,
// flip_roll.cpp, einsum.cpp, norms.cpp).
// x (…, M, N) -> (…, M, N) with the elements below (triu) / above (tril) the given
// diagonal zeroed (diagonal 0 is the main one, > 0 above it, < 0 below); any dtype.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
// x (s0, …) tiled: repeats (r0, …) with at least x.dim() entries (x gets leading 1-dims)
// -> (r0·s0, …).
Tensor repeat(const Tensor& x, const Shape& repeats);
// Each element repeated `repeats` times along dim: x (…, N, …) -> (…, N·repeats, …);
// without dim, x is flattened first -> (numel·repeats).
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
// Element i along dim repeated repeats[i] times: repeats int64 (N) or one count (1)/().
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
// repeats (N) int64 -> (sum(repeats)): index i repeated repeats[i] times.
Tensor repeat_interleave(const Tensor& repeats);
// The order of elements reversed along each of dims (same shape).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);
// Elements shifted along dim by `shifts` (wrapping around); without dim, over the
// flattened tensor (same shape).
Tensor roll(const Tensor& x, int64_t shifts, std::optional<int64_t> dim = std::nullopt);
// shifts[i] along dims[i]; with dims empty, shifts must hold one shift for the flattened tensor.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
// a (M), b (N) -> (M, N): a[i]·b[j].
Tensor outer(const Tensor& a, const Tensor& b);
// torch.einsum: "ij,jk->ik", "bij,bjk->bik", "...ij->...ji", "ii->i", implicit output
// (labels seen once, in ASCII order, after the "..." dims). Floating operands of one dtype;
// contracted pairwise, left to right, through bmm.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
// sqrt(var(x, dims, correction, keepdim)); the gradient is 0 where the result is 0.
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false);
template <DimIndex I> Tensor std(const Tensor& x, I dim, int64_t correction = 1, bool keepdim = false) {
  return kiln::std(x, detail::dims_of(dim), correction, keepdim);
}
// torch.linalg.vector_norm: (sum |x|^p)^(1/p) over dims (all when empty); p = inf / -inf
// give max / min |x|, p = 0 the count of non-zeros. The gradient at a zero norm is 0.
Tensor norm(const Tensor& x, double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// ---------------------------------------------------------------- indexing, scatter, scan,
// sort and sampling
// Index tensors are int64 with values in [0, size) (negative ones are errors, as in
// torch): "[gather] index 7 is out of bounds for dim 1 with size 4". For the rank rules a
// 0-D tensor counts as 1-D of size 1, as in torch.
//
// x (.., N, ..), index (.., n, ..) of x's rank, index.size(d) <= x.size(d) for d != dim
// -> (.., n, ..): out[.., j, ..] = x[.., index[.., j, ..], ..]. Gradient to x.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with x[.., index[.., j, ..], ..] = src[.., j, ..]: x (.., N, ..), index (.., n, ..),
// src (x's dtype) at least index's size in every dim (its leading window is read)
// -> x's shape. Repeated indices: the last one in index order wins (torch leaves it
// undefined). Gradients to x (zero where overwritten) and to src (its window).
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
// The same with src added in (repeats sum up, in index order: deterministic).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// x with alpha * source.select(dim, i) added to x.select(dim, index[i]): index (K) or 0-D,
// source (x's dtype) x's shape with K at dim -> x's shape. Gradients to x and source.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
// Running sum along dim -> x's shape, in `dtype` when given, else x's dtype (int64 for
// int64 and bool inputs). float32 accumulates in double, as torch on the CPU.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// x sorted along dim (x's shape) and where each value came from (int64). NaN sorts above
// every number. Kiln's sort is always stable (with stable = false torch may order ties
// either way). The gradient goes to the picked elements.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (or smallest) along dim: (.., k, ..) values and int64 indices, best first,
// ties in index order (sorted = false lets torch return any order; Kiln still sorts).
// NaN counts as the largest. The gradient goes to the picked elements.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// num_samples category indices (int64) per row of non-negative weights (not necessarily
// normalised): probs (C) -> (num_samples), (R, C) -> (R, num_samples). Without replacement
// a row's samples are distinct (num_samples <= C); categories of weight 0 come only once
// the positive ones are used up, as torch 1.13 does. Reproducible from `gen` (the default
// generator when null): see Backend::multinomial for the Philox stream it draws.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* gen = nullptr);
// F.one_hot: int64 indices (*) -> int64 (*, num_classes); num_classes = -1 takes max + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---------------------------------------------------------------- fused nn kernels
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// softmax over the last dim where a row whose every score is -inf gives zeros (and zero
// gradients) instead of NaN: torch's _safe_softmax, the rule of scaled_dot_product_attention.
Tensor safe_softmax(const Tensor& scores);
// Normalises over the last normalized_shape.size() dims; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// layer_norm(x + residual, …) in one pass: the residual add of a post-norm Transformer
// layer and its norm. residual has x's shape and dtype. The same bits as
// layer_norm(add(x, residual), …), gradients included (x and residual get one gradient
// tensor); the sum is kept for backward only when something requires grad.
Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                      const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), double eps = 1e-5);
// The same, returning the sum as well, for a pre-norm layer, which carries the sum on as
// its residual stream: {add(x, residual), layer_norm(that sum, …)}, one pass, the graph of
// the two ops.
struct SumAndNorm {
  Tensor sum, norm;
};
SumAndNorm add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Shape& normalized_shape,
                                   const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                                   double eps = 1e-5);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// dropout(relu(x), p, training), fused: keeps only its output for backward (half the
// memory of the two ops in a feed-forward block).
Tensor relu_dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// The same for an x the caller gives up (relu_dropout(linear1(x), p), or std::move(h)):
// where nothing else can reach x's memory, y is written over it, so that a feed-forward
// layer holds one d_ff-wide float32 tensor here instead of two. Same values and gradients.
Tensor relu_dropout(Tensor&& x, double p, bool training = true, Generator* gen = nullptr);
// torch.nn.functional.scaled_dot_product_attention, fused: softmax(q kᵀ · scale + mask) v
// with dropout on the weights; keeps no (L, S) tensor for backward.
// q (…, L, E), k (…, S, E), v (…, S, Ev) with equal batch dims -> (…, L, Ev).
// attn_mask broadcastable to (…, L, S): bool, true where a query MAY attend (torch's
// convention, the opposite of MultiheadAttention's masks), or q's dtype, added to the
// scores. is_causal: query i sees keys 0..i (not together with attn_mask). scale
// defaults to 1/sqrt(E). A query that may attend to nothing gets zeros (output and
// gradients), as current torch's _safe_softmax (pytorch/pytorch#133882), not NaN.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);
// weight (num, dim) rows picked by int64 indices of any shape -> (*indices, dim).
// Rows equal to padding_idx get no gradient (pass -1 for none; negative counts from num).
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = std::nullopt);

// BatchMean (torch's "batchmean": the sum divided by the input's first dim) is kl_div's
// only; the other losses reject it.
enum class Reduction { None, Mean, Sum, BatchMean };
Reduction reduction_from_string(const std::string& s);  // "none", "mean", "sum", "batchmean"
// logits (N, C) or (N, C, d1, …) or (C); targets int64 (N) or (N, d1, …) or ().
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
// With class weights: weight (C), the logits' dtype, no gradient (as torch).
// A row's loss is scaled by weight[target] (label smoothing: each class's term by its
// weight); Mean divides by the sum of weight[target] over the rows not ignored.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& weight, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
// cross_entropy(linear(input, weight, bias), target, …) without holding the logits: input
// (*, D), weight (V, D), bias (V) or undefined, target int64 (*). The rows go through in
// chunks of chunk_rows (0: about 16 MiB of float32 logits each); each chunk's logits give
// its losses and, when the inputs need gradients, its share of them at once, so no
// (rows, V) tensor outlives the call: what a generator and its loss keep until backward
// is the gradients (input's size, weight's and bias's), not the logits. Autocast applies
// as to linear. Same loss and gradients as the composition, to rounding (the products
// run per chunk; backward scales gradients made for an upstream gradient of 1, and
// autocast rounds the unscaled logits' gradient). reduction None is the composition
// itself (each row's weight in the gradient is known only in backward). PyTorch has it
// as a proposal (torch.nn.functional.linear_cross_entropy, pytorch/pytorch#124480).
Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            int64_t ignore_index = -100, double label_smoothing = 0.0,
                            Reduction reduction = Reduction::Mean, int64_t chunk_rows = 0);
// With class weights (C), as cross_entropy's.
Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& target,
                            const Tensor& class_weight, int64_t ignore_index = -100, double label_smoothing = 0.0,
                            Reduction reduction = Reduction::Mean, int64_t chunk_rows = 0);

// ---------------------------------------------------------------- operators
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
// == and != (elementwise, bool results, like < and >), and every
// comparison with the scalar on the left (0 == mask, 0.5 < x). Tensor == is never
// handle identity: use same_storage() or impl() for that.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator==(double a, const Tensor& b);
Tensor operator!=(double a, const Tensor& b);
Tensor operator<(double a, const Tensor& b);
Tensor operator<=(double a, const Tensor& b);
Tensor operator>(double a, const Tensor& b);
Tensor operator>=(double a, const Tensor& b);
Tensor operator~(const Tensor& a);                   // logical_not of a bool tensor
Tensor operator&(const Tensor& a, const Tensor& b);  // logical_and
Tensor operator|(const Tensor& a, const Tensor& b);  // logical_or

// ---------------------------------------------------------------- predicates
// Elementwise tests of floating values (integers are never NaN or infinite) -> bool.
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// Whether every / any element is nonzero (NaN counts as nonzero) -> 0-d bool, or bool
// over one dim.
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false);

// ---------------------------------------------------------------- misc
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and exactly equal values

}  // namespace kiln
