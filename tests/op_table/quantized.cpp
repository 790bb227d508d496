// Rows of the quantized-weight ops: quantize_matrix's blocks are the block quantiser's
// (quantize_row) byte for byte, dequantize reads them back as dequantize_row does, and
// quantized_linear, whose 8-bit activations make it differ from the float product by a
// bound it must keep, takes its gradients through the dequantised weight. (Every dot
// product path of the CPU against the portable one, the composed default and SmolLM2's
// real blocks: test_quantized.cpp.)
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

const std::vector<GGMLType> kAllTypes = {GGMLType::F32,  GGMLType::F16,  GGMLType::BF16,
                                         GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1};
const std::vector<GGMLType> kQuantized = {GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1};

std::string name(GGMLType t) { return ggml_type_info(t).name; }

// A quantized matrix's bytes as a (rows, row_bytes) int64 tensor.
Tensor bytes_of(const QuantizedMatrix& q) {
  std::vector<int64_t> v;
  for (int64_t r = 0; r < q.rows; ++r) v.insert(v.end(), q.row(r), q.row(r) + q.row_bytes());
  return from_vector<int64_t>(v, {q.rows, q.row_bytes()});
}

// w (rows, cols) through the row quantiser, as bytes and as the floats read back.
std::vector<uint8_t> blocks_of_rows(const Tensor& w, GGMLType t) {
  const Tensor f = w.detach().to(kFloat32).contiguous();
  const int64_t rows = f.size(0), cols = f.size(1);
  const int64_t row_bytes = cols / ggml_type_info(t).block_values * ggml_type_info(t).block_bytes;
  std::vector<uint8_t> b(static_cast<size_t>(rows * row_bytes));
  for (int64_t r = 0; r < rows; ++r) quantize_row(t, f.data<float>() + r * cols, b.data() + r * row_bytes, cols);
  return b;
}

std::vector<OpTest> matrix_rows() {
  std::vector<OpTest> rows;
  for (GGMLType t : kAllTypes) {
    rows.push_back({.op = "quantize_matrix",
                    .sample = "(5, 64) " + name(t),
                    .fn = [t](V x) { return bytes_of(quantize_matrix(x[0], t)); },
                    .made = {R({5, 64})},
                    .gradcheck = false,
                    .cuda = false,
                    .reference = [t](V x) {
                      const std::vector<uint8_t> b = blocks_of_rows(x[0], t);
                      return from_vector<int64_t>(std::vector<int64_t>(b.begin(), b.end()),
                                                  {5, static_cast<int64_t>(b.size()) / 5});
                    },
                    .holds = [t](const Tensor&, V x) {
                      const QuantizedMatrix q = quantize_matrix(x[0], t);
                      CHECK(q.rows == 5);
                      CHECK(q.cols == 64);
                      CHECK(q.row_bytes() == 64 / ggml_type_info(t).block_values * ggml_type_info(t).block_bytes);
                    }});
    rows.push_back({.op = "dequantize",
                    .sample = "(5, 64) " + name(t),
                    .fn = [t](V x) { return dequantize(quantize_matrix(x[0], t)); },
                    .made = {R({5, 64})},
                    .tol64 = {0, 0},
                    .tol32 = {0, 0},
                    .gradcheck = false,
                    .cuda = false,
                    .reference = [t](V x) {
                      const std::vector<uint8_t> b = blocks_of_rows(x[0], t);
                      const int64_t row_bytes = static_cast<int64_t>(b.size()) / 5;
                      Tensor out = empty({5, 64});
                      for (int64_t r = 0; r < 5; ++r)
                        dequantize_row(t, b.data() + r * row_bytes, out.data<float>() + r * 64, 64);
                      return out;
                    }});
  }
  // float32 blocks are the values themselves.
  rows.push_back({.op = "dequantize",
                  .sample = "f32 blocks give the matrix back",
                  .fn = [](V x) { return dequantize(quantize_matrix(x[0], GGMLType::F32)); },
                  .made = {R({3, 32})},
                  .tags = {"f32"},
                  .tol32 = {0, 0},
                  .gradcheck = false,
                  .cuda = false,
                  .reference = [](V x) { return x[0].detach(); }});
  rows.back().errors = {{"a matrix without data", [] { (void)dequantize(QuantizedMatrix{GGMLType::Q8_0, 2, 32, nullptr, {}}); },
                         {"[dequantize]", "no data"}}};
  rows.front().errors = {
      {"rows not in whole blocks", [] { (void)quantize_matrix(randn({4, 40}), GGMLType::Q4_0); },
       {"[quantize_matrix]", "q4_0", "in_features 40"}},
      {"1-D", [] { (void)quantize_matrix(randn({64}), GGMLType::Q8_0); }, {"[quantize_matrix]", "2-D"}},
      {"int64", [] { (void)quantize_matrix(ones({2, 32}, kInt64), GGMLType::Q8_0); }, {"[quantize_matrix]", "int64"}},
  };
  return rows;
}

std::vector<OpTest> linear_rows() {
  std::vector<OpTest> rows;
  Generator g(2);
  for (GGMLType t : kQuantized) {
    // Captured by the rows: the matrix holds its blocks alive.
    const QuantizedMatrix q = quantize_matrix(randn({48, 96}, {}, &g), t);
    const Tensor w_hat = dequantize(q);
    for (const int64_t M : {int64_t{1}, int64_t{7}}) {
      rows.push_back({.op = "quantized_linear",
                      .sample = "(" + std::to_string(M) + ", 96) by (48, 96) " + name(t) + " with bias",
                      .fn = [q](V x) { return quantized_linear(x[0], q, x[1]); },
                      .made = {R({M, 96}), R({48})},
                      .tags = {"f32"},
                      .gradcheck = false,  // its forward rounds the input: not differentiable as computed
                      .cuda = false,
                      .reference = [w_hat](V x) { return linear(x[0], w_hat, x[1]); },
                      .reference_forward = false,
                      .holds = [w_hat](const Tensor& out, V x) {
                        CHECK(out.shape() == Shape{x[0].size(0), 48});
                        testing::check_within("8-bit activations", out, linear(x[0], w_hat, x[1]),
                                              testing::quantized_activation_bound(x[0], w_hat));
                      }});
    }
    rows.push_back({.op = "quantized_linear",
                    .sample = "(2, 3, 96) by (48, 96) " + name(t),
                    .fn = [q](V x) { return quantized_linear(x[0], q); },
                    .made = {R({2, 3, 96})},
                    .tags = {"f32"},
                    .gradcheck = false,
                    .cuda = false,
                    .reference = [w_hat](V x) { return linear(x[0], w_hat); },
                    .reference_forward = false,
                    .holds = [q, w_hat](const Tensor& out, V x) {
                      testing::check_within("8-bit activations", out.reshape({6, 48}),
                                            linear(x[0], w_hat).reshape({6, 48}),
                                            testing::quantized_activation_bound(x[0].reshape({6, 96}), w_hat));
                      CHECK(quantized_linear(x[0].to(kBFloat16), q).dtype() == kFloat32);  // bfloat16 in, float32 out
                    }});
  }
  const QuantizedMatrix q = quantize_matrix(randn({8, 64}, {}, &g), GGMLType::Q8_0);
  rows.front().errors = {
      {"in_features differ", [q] { (void)quantized_linear(randn({2, 32}), q); },
       {"[quantized_linear]", "(2, 32)", "in_features = 64"}},
      {"a bias of another size", [q] { (void)quantized_linear(randn({2, 64}), q, randn({7})); },
       {"[quantized_linear]", "bias must be float32 (8)"}},
      {"int64 input", [q] { (void)quantized_linear(ones({2, 64}, kInt64), q); }, {"[quantized_linear]", "int64"}},
      {"a matrix without data", [] { (void)quantized_linear(randn({2, 64}), QuantizedMatrix{}); },
       {"[quantized_linear]", "no data"}},
  };
  return rows;
}

}  // namespace

std::vector<OpTest> quantized_rows() {
  std::vector<OpTest> rows = matrix_rows();
  for (OpTest& t : linear_rows()) rows.push_back(std::move(t));
  return rows;
}

}  // namespace kiln::optable
