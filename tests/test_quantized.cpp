// Quantized weights beyond their op-table rows (tests/op_table/quantized.cpp: the blocks,
// dequantize, quantized_linear's bound, gradients and errors): every dot product path of
// this CPU against the portable one (backend/cpu/quant_matmul.cpp), the composed default
// (the reference backend), and SmolLM2's real q4_1 weights within the 8-bit bound.
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

}  // namespace

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

TEST_CASE("quantized_linear with SmolLM2's q4_1 feed-forward weight") {
  const std::string dir = testing::pretrained_dir("smollm2-135m");
  if (dir.empty()) return;
  const io::GGUFFile f = io::read_gguf(dir + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  const io::GGUFTensorInfo& t = f.tensor("blk.0.ffn_down.weight");  // (576, 1536)
  QuantizedMatrix q{t.type, t.shape()[0], t.shape()[1], f.data(t), f.keep_alive()};
  manual_seed(6);
  const Tensor x = randn({4, 1536});
  const Tensor w_hat = f.to_float(t);
  testing::check_within("ffn_down", quantized_linear(x, q), linear(x, w_hat),
                        testing::quantized_activation_bound(x, w_hat));
}
