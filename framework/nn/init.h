#pragma once
// Parameter initialisers, as torch.nn.init. Each fills the tensor in place (without
// recording) from the default generator (see kiln::manual_seed) and returns it.
#include <string>

#include "../core/tensor.h"

namespace kiln::nn::init {

// (fan_in, fan_out) of a weight: (in, out) for (out, in); receptive field for more dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
// The recommended gain for a nonlinearity: linear/sigmoid 1, tanh 5/3, relu sqrt(2),
// leaky_relu sqrt(2/(1+a^2)).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor uniform_(Tensor t, double a = 0.0, double b = 1.0);
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
Tensor xavier_uniform_(Tensor t, double gain = 1.0);
Tensor xavier_normal_(Tensor t, double gain = 1.0);
// mode "fan_in" or "fan_out"; nonlinearity as calculate_gain.
Tensor kaiming_uniform_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu");
Tensor kaiming_normal_(Tensor t, double a = 0.0, const std::string& mode = "fan_in",
                       const std::string& nonlinearity = "leaky_relu");

}  // namespace kiln::nn::init
