#pragma once
// Kiln's public functions. Each validates its arguments (throwing kiln::Error with
// "[op] …"), runs a kernel of the inputs' backend and, when grad mode is on and an input
// requires grad, records its backward. Semantics follow PyTorch's functions of the
// same name.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/generator.h"
#include "core/tensor.h"

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
// tensor({1, 2, 3}) and tensor({{1, 2}, {3, 4}}); float32 unless opts say otherwise.
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions opts = {});

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

// ---------------------------------------------------------------- fused nn kernels
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Normalises over the last normalized_shape.size() dims; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// dropout(relu(x), p, training), fused: keeps only its output for backward (half the
// memory of the two ops in a feed-forward block).
Tensor relu_dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
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

enum class Reduction { None, Mean, Sum };
Reduction reduction_from_string(const std::string& s);  // "none", "mean", "sum"
// logits (N, C) or (N, C, d1, …) or (C); targets int64 (N) or (N, d1, …) or ().
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);

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
Tensor operator~(const Tensor& a);                   // logical_not of a bool tensor
Tensor operator&(const Tensor& a, const Tensor& b);  // logical_and
Tensor operator|(const Tensor& a, const Tensor& b);  // logical_or

// ---------------------------------------------------------------- misc
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and exactly equal values

}  // namespace kiln
