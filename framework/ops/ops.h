#pragma once
// Kiln's public functions, declared by their records in core/op_records.inc (one record an
// op: its function, its Tensor method where PyTorch has one, what it does). Each
// validates its arguments (throwing kiln::Error with "[op] ..."), runs a kernel of the
// inputs' backend and, when grad mode is on and an input requires grad, records its
// backward. Semantics follow PyTorch's functions of the same name.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../autograd/grad_mode.h"
#include "../backend/quant_blocks.h"
#include "../core/generator.h"
#include "../core/tensor.h"
#include "tensor_literal.h"

namespace kiln {

// What max/min along a dim, sort and topk return.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
// What add_layer_norm_with_sum returns: the sum x + residual and its layer_norm.
struct SumAndNorm {
  Tensor sum, norm;
};
// What rotary_tables returns: cos and sin (positions, head_dim / 2).
struct RotaryTables {
  Tensor cos, sin;
};
// BatchMean (torch's "batchmean": the sum divided by the input's first dim) is kl_div's
// only; the other losses reject it.
enum class Reduction { None, Mean, Sum, BatchMean };
Reduction reduction_from_string(const std::string& s);  // "none", "mean", "sum", "batchmean"

#define KILN_DEFAULT(...) = __VA_ARGS__
#define KILN_FUNCTION(ret, name, params, doc) ret name params;
#define KILN_FUNCTION_AND_METHOD(ret, name, params, args, doc) ret name params;
#define KILN_METHOD(ret, name, params, cv, doc)
#include "../core/op_records.inc"
#undef KILN_METHOD
#undef KILN_FUNCTION_AND_METHOD
#undef KILN_FUNCTION
#undef KILN_DEFAULT

// From data. The vector's length must equal the shape's numel.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts);
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape) {
  return from_vector<T>(data, shape, TensorOptions(dtype_of<T>::value));
}

// One dim as an integer, sum(x, -1); a braced list ({0, 1}, {}) always picks the list
// overload (shape.h, DimIndex).
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
template <DimIndex I> Tensor std(const Tensor& x, I dim, int64_t correction = 1, bool keepdim = false) {
  return kiln::std(x, detail::dims_of(dim), correction, keepdim);
}

}  // namespace kiln
