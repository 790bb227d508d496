// Weights in ggml's quantized blocks (backend/quant_blocks.h): made from a float matrix,
// read back as floats, and multiplied by float activations without dequantising them.
#include <cstring>
#include <memory>

#include "ops/op_helpers.h"

namespace kiln {

QuantizedMatrix quantize_matrix(const Tensor& weight, GGMLType type) {
  const char* op = "quantize_matrix";
  detail::check_floating(op, weight);
  KILN_CHECK(weight.dim() == 2, op, "weight must be 2-D (out_features, in_features), got shape ",
             shape_str(weight.shape()));
  const GGMLTypeInfo& info = ggml_type_info(type);
  KILN_CHECK(weight.size(1) % info.block_values == 0, op, info.name, " stores rows in blocks of ",
             info.block_values, " values; in_features ", weight.size(1), " is not a multiple");
  const Tensor w = weight.detach().to(kCPU).to(kFloat32).contiguous();
  QuantizedMatrix q;
  q.type = type;
  q.rows = w.size(0);
  q.cols = w.size(1);
  auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(q.rows * q.row_bytes()));
  for (int64_t r = 0; r < q.rows; ++r)
    quantize_row(type, w.data<float>() + r * q.cols, bytes->data() + r * q.row_bytes(), q.cols);
  q.data = bytes->data();
  q.owner = std::move(bytes);
  return q;
}

Tensor dequantize(const QuantizedMatrix& weight) {
  KILN_CHECK(weight.data != nullptr || weight.rows * weight.cols == 0, "dequantize", "the matrix has no data");
  Tensor out = Tensor::empty({weight.rows, weight.cols}, TensorOptions(kFloat32));
  for (int64_t r = 0; r < weight.rows; ++r)
    dequantize_row(weight.type, weight.row(r), out.data<float>() + r * weight.cols, weight.cols);
  return out;
}

// (rows, K) @ wᵀ on the input's backend; float32 out.
Tensor quantized_linear(const Tensor& input, const QuantizedMatrix& weight, const Tensor& bias) {
  const char* op = "quantized_linear";
  detail::check_floating(op, input);
  KILN_CHECK(weight.data != nullptr, op, "the weight has no data");
  const int64_t K = weight.cols, N = weight.rows;
  KILN_CHECK(input.dim() >= 1 && input.size(-1) == K, op, "input of shape ", shape_str(input.shape()),
             " does not end in in_features = ", K, " (weight ", ggml_type_info(weight.type).name, " (", N, ", ", K,
             "))");
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == N && bias.dtype() == kFloat32, op, "bias must be float32 (", N,
               "), got shape ", shape_str(bias.shape()), " and dtype ", dtype_name(bias.dtype()));
    KILN_CHECK(bias.device() == input.device(), op, "bias on ", bias.device().str(), ", input on ",
               input.device().str());
  }
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < input.dim(); ++d) rows *= input.size(d);
  const Tensor x2 = input.detach().to(kFloat32).contiguous().reshape({rows, K});
  Tensor y2 = detail::new_tensor({rows, N}, kFloat32, input, op);
  if (rows > 0 && N > 0) {
    if (K == 0) {
      y2.fill_(0.0);
    } else {
      backend_of(op, {&input}).quantized_matmul(x2, weight, y2);
    }
  }
  Shape y_shape = input.shape();
  y_shape.back() = N;
  Tensor y = y2.view(y_shape);
  if (bias.defined()) y = add(y, bias.detach());
  if (!any_requires_grad({&input, &bias})) return y;
  const DType in_dtype = input.dtype();
  return record(op, y, {input, bias}, [weight, in_dtype](const Tensor& g) -> TensorList {
    const Tensor w = dequantize(weight).to(g.device());
    Tensor gx = matmul(g, w).to(in_dtype);
    Tensor gb = g.reshape({-1, g.size(-1)}).sum({0});
    return {gx, gb};
  });
}

// Rows of the blocks at the indices, on the host (where the blocks live), then moved to
// the indices' device.
Tensor quantized_embedding(const QuantizedMatrix& weight, const Tensor& indices) {
  const char* op = "quantized_embedding";
  KILN_CHECK(weight.data != nullptr || weight.rows * weight.cols == 0, op, "the weight has no data");
  KILN_CHECK(indices.defined() && indices.dtype() == kInt64, op, "indices must be int64, got ",
             indices.defined() ? dtype_name(indices.dtype()) : "undefined");
  const Tensor idx = indices.to(kCPU).contiguous();
  const int64_t n = idx.numel(), dim = weight.cols;
  Tensor out = Tensor::empty({n, dim}, TensorOptions(kFloat32));
  const int64_t* ids = idx.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = ids[i];
    KILN_CHECK(r >= 0 && r < weight.rows, op, "index ", r, " is out of range for ", weight.rows, " rows");
    dequantize_row(weight.type, weight.row(r), out.data<float>() + i * dim, dim);
  }
  Shape shape = indices.shape();
  shape.push_back(dim);
  return out.view(shape).to(indices.device());
}

}  // namespace kiln
