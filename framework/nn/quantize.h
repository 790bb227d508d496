#pragma once
// Post-training quantisation of a model's layers into ggml's blocks for inference, as
// MLX's nn.quantize: every Linear (and, when asked, every Embedding) whose input size is a
// whole number of blocks gets its weight replaced by Q8_0, Q4_0 or Q4_1 blocks
// (Linear::quantize), and the report says what each layer lost against float32.
//
//   nn::QuantizeReport r = nn::quantize(*model, GGMLType::Q8_0);
//   std::cout << r.str();   // per layer: shape, relative RMS error, max |error|; bytes saved
#include <cstdint>
#include <string>
#include <vector>

#include "../backend/quant_blocks.h"
#include "module.h"

namespace kiln::nn {

struct QuantizeReport {
  struct Layer {
    std::string name;      // dotted, as named_modules() names it
    int64_t rows = 0, cols = 0;
    double rel_rms_error = 0;  // ||W - dequantize(Q)|| / ||W|| (Frobenius)
    double max_abs_error = 0;  // max |W - dequantize(Q)|
  };
  std::vector<Layer> layers;          // quantized
  std::vector<std::string> skipped;   // "<name>: why" (input size not a whole number of blocks, ...)
  int64_t float_bytes = 0;            // the quantized layers' weights before (their dtype's size) ...
  int64_t quantized_bytes = 0;        // ... and after
  std::string str() const;
};

// type: Q8_0, Q4_0 or Q4_1 (F16/BF16 also work). Layers already quantized are skipped.
QuantizeReport quantize(Module& model, GGMLType type, bool embeddings = false);

}  // namespace kiln::nn
