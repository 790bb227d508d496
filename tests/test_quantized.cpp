// Quantized weights (ops/quantized.cpp, backend/cpu/quant_matmul.cpp): quantize_matrix
// and dequantize against the block quantisers, and quantized_linear, whose 8-bit
// activations make it differ from the float product by a bound it must keep; every dot
// product path this CPU has against the portable one; the composed default (the
// reference backend); the input's gradient; SmolLM2's real q4_1 weights.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/quant_matmul.h"
#include "backend/reference/reference_backend.h"
#include "test_util.h"

using namespace kiln;

namespace {

const std::vector<GGMLType> kQuantized = {GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1};

// The bound on |x̂ @ ŵᵀ - x @ ŵᵀ| from x's 8-bit blocks: each x̂_k within (0.5 + 127 ·
// 2^-11) · d_b of x_k (half a step, and d rounded to float16), d_b = max|x| / 127 over
// its block of 32; summed against |ŵ|. Plus float32 summation slack.
Tensor activation_bound(const Tensor& x, const Tensor& w_hat) {
  const int64_t M = x.size(0), K = x.size(1);
  const Tensor d = div(amax(abs(x.reshape({M, K / 32, 32})), {2}, true), 127.0);  // (M, K/32, 1)
  const Tensor per_k = mul(d.expand({M, K / 32, 32}).reshape({M, K}), 0.5 + 127.0 / 2048);
  return add(matmul(per_k, abs(w_hat).t()), mul(matmul(abs(x), abs(w_hat).t()), 1e-5));
}

void check_within(const std::string& what, const Tensor& got, const Tensor& want, const Tensor& bound) {
  const Tensor excess = sub(abs(sub(got, want)), bound);
  CHECK_MESSAGE(amax(excess).item() <= 0.0, what, ": exceeds the bound by ", amax(excess).item());
}

}  // namespace

TEST_CASE("quantize_matrix keeps ggml's blocks; dequantize reads them back") {
  manual_seed(1);
  const Tensor w = randn({5, 64});
  for (GGMLType t : {GGMLType::F32, GGMLType::F16, GGMLType::BF16, GGMLType::Q8_0, GGMLType::Q4_0, GGMLType::Q4_1}) {
    CAPTURE(ggml_type_info(t).name);
    const QuantizedMatrix q = quantize_matrix(w, t);
    CHECK(q.rows == 5);
    CHECK(q.cols == 64);
    CHECK(q.row_bytes() == 64 / ggml_type_info(t).block_values * ggml_type_info(t).block_bytes);
    std::vector<uint8_t> blocks(static_cast<size_t>(q.row_bytes()));
    std::vector<float> row(64);
    const Tensor back = dequantize(q);
    for (int64_t r = 0; r < 5; ++r) {
      quantize_row(t, w.data<float>() + r * 64, blocks.data(), 64);
      CHECK(std::equal(blocks.begin(), blocks.end(), q.row(r)));
      dequantize_row(t, blocks.data(), row.data(), 64);
      CHECK(back.select(0, r).to_vector<float>() == row);
    }
  }
  CHECK(equal(dequantize(quantize_matrix(w, GGMLType::F32)), w));
  CHECK_ERROR_STARTS("[quantize_matrix]", quantize_matrix(randn({4, 40}), GGMLType::Q4_0), "q4_0", "in_features 40");
  CHECK_ERROR_STARTS("[quantize_matrix]", quantize_matrix(randn({64}), GGMLType::Q8_0), "2-D");
  CHECK_ERROR_STARTS("[quantize_matrix]", quantize_matrix(ones({2, 32}, kInt64), GGMLType::Q8_0), "int64");
}

TEST_CASE("quantized_linear stays within its 8-bit activations' bound of the float product") {
  manual_seed(2);
  for (GGMLType t : kQuantized) {
    for (const int64_t M : {int64_t{1}, int64_t{7}}) {
      CAPTURE(ggml_type_info(t).name);
      CAPTURE(M);
      const QuantizedMatrix q = quantize_matrix(randn({48, 96}), t);
      const Tensor w_hat = dequantize(q), x = randn({M, 96}), b = randn({48});
      const Tensor got = quantized_linear(x, q, b), want = linear(x, w_hat, b);
      CHECK(got.shape() == Shape{M, 48});
      check_within("quantized_linear", got, want, activation_bound(x, w_hat));
      // Leading dims and bfloat16 input.
      const Tensor x3 = randn({2, 3, 96});
      check_within("3-D input", quantized_linear(x3, q).reshape({6, 48}), linear(x3, w_hat).reshape({6, 48}),
                   activation_bound(x3.reshape({6, 96}), w_hat));
      CHECK(quantized_linear(x3.to(kBFloat16), q).dtype() == kFloat32);
    }
  }
  const QuantizedMatrix q = quantize_matrix(randn({8, 64}), GGMLType::Q8_0);
  CHECK_ERROR_STARTS("[quantized_linear]", quantized_linear(randn({2, 32}), q), "(2, 32)", "in_features = 64");
  CHECK_ERROR_STARTS("[quantized_linear]", quantized_linear(randn({2, 64}), q, randn({7})), "bias must be float32 (8)");
  CHECK_ERROR_STARTS("[quantized_linear]", quantized_linear(ones({2, 64}, kInt64), q), "int64");
  CHECK_ERROR_STARTS("[quantized_linear]", quantized_linear(randn({2, 64}), QuantizedMatrix{}), "no data");
  CHECK(quantized_linear(randn({0, 64}), q).shape() == Shape{0, 8});
}

TEST_CASE("every quantized dot path of this CPU gives the portable path's products") {
  manual_seed(3);
  // 1 and 2 rows take the fused kernels (blocks read in place), 5 and 9 the unpacked rows
  // with tiles of four and a remainder.
  for (GGMLType t : kQuantized) {
    for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}}) {
      CAPTURE(ggml_type_info(t).name);
      CAPTURE(M);
      const QuantizedMatrix q = quantize_matrix(randn({37, 160}), t);
      const Tensor x = randn({M, 160});
      Tensor want = empty({M, 37});
      cpu::quantized_matmul(x.data<float>(), M, 160, q, want.data<float>(), cpu::QuantDotPath::kPortable);
      for (const auto path : {cpu::QuantDotPath::kAvx2, cpu::QuantDotPath::kAvxVnni, cpu::QuantDotPath::kBest}) {
        if (!cpu::quant_dot_path_available(path)) continue;
        CAPTURE(static_cast<int>(path));
        Tensor got = empty({M, 37});
        cpu::quantized_matmul(x.data<float>(), M, 160, q, got.data<float>(), path);
        // The same integer sums, scaled and added in another order.
        testing::check_matches("path", got, want, {1e-5, 1e-5});
      }
    }
  }
  MESSAGE("quantized dot path on this CPU: ", std::string(cpu::quant_dot_path_name()));
}

TEST_CASE("quantized_linear on a backend without the kernel: the composed default, the float product") {
  manual_seed(4);
  const QuantizedMatrix q = quantize_matrix(randn({16, 64}), GGMLType::Q4_1);
  const Tensor x = randn({3, 64});
  const Tensor want = linear(x, dequantize(q));
  register_backend(DeviceType::CPU, &reference_backend());
  const Tensor got = quantized_linear(x, q);
  register_backend(DeviceType::CPU, nullptr);
  testing::check_matches("reference backend", got, want, {1e-5, 1e-5});
}

TEST_CASE("quantized_linear's gradients: the input's through the dequantised weight, the bias's summed") {
  manual_seed(5);
  const QuantizedMatrix q = quantize_matrix(randn({12, 32}), GGMLType::Q8_0);
  const Tensor x = randn({2, 3, 32}).requires_grad_(), b = randn({12}).requires_grad_();
  const Tensor g = randn({2, 3, 12});
  mul(quantized_linear(x, q, b), g).sum().backward();
  testing::check_matches("grad x", x.grad(), matmul(g, dequantize(q)), {1e-6, 1e-6});
  testing::check_matches("grad bias", b.grad(), g.sum({0, 1}), {1e-6, 1e-6});
}

TEST_CASE("quantized_linear with SmolLM2's q4_1 feed-forward weight") {
  const std::string dir = testing::pretrained_dir("smollm2-135m");
  if (dir.empty()) return;
  const io::GGUFFile f = io::read_gguf(dir + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  const io::GGUFTensorInfo& t = f.tensor("blk.0.ffn_down.weight");  // (576, 1536)
  QuantizedMatrix q{t.type, t.shape()[0], t.shape()[1], f.data(t), f.keep_alive()};
  manual_seed(6);
  const Tensor x = randn({4, 1536});
  const Tensor w_hat = f.to_float(t);
  check_within("ffn_down", quantized_linear(x, q), linear(x, w_hat), activation_bound(x, w_hat));
}
