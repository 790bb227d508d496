// nn::quantize: each eligible layer's weight through Linear/Embedding::quantize, with the
// error of its blocks against the float weight it replaced.
#include "nn/quantize.h"

#include <cmath>
#include <sstream>

#include "nn/layers.h"

namespace kiln::nn {

namespace {

// Why `w` cannot be stored as `type`'s blocks, or "" when it can.
std::string quantize_obstacle(const Tensor& w, const GGMLTypeInfo& info) {
  if (!w.defined()) return "no float weight";
  if (!is_floating(w.dtype())) return std::string("a ") + dtype_name(w.dtype()) + " weight";
  if (w.size(1) % info.block_values != 0)
    return "input size " + std::to_string(w.size(1)) + " is not a multiple of " + std::to_string(info.block_values);
  return "";
}

QuantizeReport::Layer error_of(const std::string& name, const Tensor& w, const QuantizedMatrix& q) {
  const Tensor before = w.detach().to(kCPU).to(kFloat64);
  const Tensor diff = sub(before, dequantize(q).to(kFloat64));
  QuantizeReport::Layer l{name, q.rows, q.cols};
  const double norm = std::sqrt(sum(mul(before, before)).item<double>());
  const double err = std::sqrt(sum(mul(diff, diff)).item<double>());
  l.rel_rms_error = norm > 0 ? err / norm : err;
  l.max_abs_error = diff.numel() > 0 ? amax(abs(diff), std::vector<int64_t>{}).item<double>() : 0.0;
  return l;
}

}  // namespace

QuantizeReport quantize(Module& model, GGMLType type, bool embeddings) {
  const GGMLTypeInfo& info = ggml_type_info(type);
  QuantizeReport report;
  NoGradGuard no_grad;
  for (auto& [name, m] : model.named_modules()) {
    const std::string shown = name.empty() ? "<root>" : name;
    auto* linear = dynamic_cast<Linear*>(m.get());
    auto* table = embeddings ? dynamic_cast<Embedding*>(m.get()) : nullptr;
    if (!linear && !table) continue;
    // A LoRA adapter's own layers stay float: they are what trains.
    if (name.find("lora_A") != std::string::npos || name.find("lora_B") != std::string::npos) continue;
    if ((linear && linear->is_quantized()) || (table && table->is_quantized())) continue;
    const Tensor w = linear ? linear->weight : table->weight;
    const std::string why = quantize_obstacle(w, info);
    if (!why.empty()) {
      report.skipped.push_back(shown + ": " + why);
      continue;
    }
    const QuantizedMatrix& q = linear ? linear->quantize(type) : table->quantize(type);
    report.layers.push_back(error_of(shown, w, q));
    report.float_bytes += w.numel() * static_cast<int64_t>(dtype_size(w.dtype()));
    report.quantized_bytes += q.rows * q.row_bytes();
  }
  return report;
}

std::string QuantizeReport::str() const {
  std::ostringstream os;
  os << layers.size() << " layers quantized, " << float_bytes << " -> " << quantized_bytes << " bytes";
  if (!skipped.empty()) os << ", " << skipped.size() << " skipped";
  os << "\n";
  for (const Layer& l : layers)
    os << "  " << l.name << " (" << l.rows << ", " << l.cols << "): relative RMS error " << l.rel_rms_error
       << ", max |error| " << l.max_abs_error << "\n";
  for (const std::string& s : skipped) os << "  skipped " << s << "\n";
  return os.str();
}

}  // namespace kiln::nn
