#include "optim/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln::optim {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  KILN_CHECK(max_norm >= 0, "clip_grad_norm_", "max_norm must be non-negative, got ", max_norm);
  const bool inf_norm = norm_type == std::numeric_limits<double>::infinity();
  KILN_CHECK(norm_type == 2.0 || inf_norm, "clip_grad_norm_", "norm_type must be 2 or inf, got ", norm_type);
  NoGradGuard no_grad;
  double total = 0;
  // Gradients on a GPU are summed (or maxed) there and read back once per device, not
  // once per parameter: each read waits for the device.
  std::vector<std::pair<Device, Tensor>> on_device;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (!g.device().is_cpu()) {
      Tensor g64 = g.to(kFloat64);
      Tensor part = inf_norm ? amax(abs(g64)) : sum(mul(g64, g64));
      auto it = std::find_if(on_device.begin(), on_device.end(), [&](const auto& e) { return e.first == g.device(); });
      if (it == on_device.end()) on_device.emplace_back(g.device(), part);
      else it->second = inf_norm ? maximum(it->second, part) : add(it->second, part);  // maximum keeps a NaN
      continue;
    }
    if (inf_norm) {
      double m = amax(abs(g)).item();
      if (std::isnan(m) || m > total) total = m;  // a NaN gradient makes the norm NaN, as with L2
    } else if (g.dtype() == kFloat32) {
      // The squares in float32 (as torch's norm), summed in double (sum_accumulator.h):
      // one float32 temporary where a float64 copy and its squares took four times the
      // memory traffic, a few percent of a small model's step.
      total += sum(mul(g, g)).item();
    } else {
      Tensor g64 = g.to(kFloat64);
      total += sum(mul(g64, g64)).item();
    }
  }
  for (const auto& entry : on_device) {
    double m = entry.second.item();
    if (!inf_norm) total += m;
    else if (std::isnan(m) || m > total) total = m;
  }
  if (!inf_norm) total = std::sqrt(total);
  double coef = max_norm / (total + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_", "clip_value must be non-negative, got ", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace kiln::optim
