#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"

namespace kiln::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  KILN_CHECK(t.dim() >= 2, "init", "fan in and fan out can not be computed for a tensor with fewer than 2 dimensions (shape ",
             shape_str(t.shape()), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "identity" || nl == "sigmoid" || nl == "conv1d" || nl == "conv2d") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  KILN_FAIL("calculate_gain", "unsupported nonlinearity '", nl, "'");
}

namespace {
thread_local bool t_skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }
bool is_init_skipped() { return t_skip_init; }

Tensor uniform_(Tensor t, double a, double b) {
  NoGradGuard g;
  return t_skip_init ? t.zero_() : t.uniform_(a, b);
}

Tensor normal_(Tensor t, double mean, double std) {
  NoGradGuard g;
  return t_skip_init ? t.zero_() : t.normal_(mean, std);
}

Tensor constant_(Tensor t, double value) {
  NoGradGuard g;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(t, 0.0); }
Tensor ones_(Tensor t) { return constant_(t, 1.0); }

Tensor xavier_uniform_(Tensor t, double gain) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -bound, bound);
}

Tensor xavier_normal_(Tensor t, double gain) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

namespace {
double kaiming_std(const Tensor& t, double a, const std::string& mode, const std::string& nl) {
  KILN_CHECK(mode == "fan_in" || mode == "fan_out", "kaiming", "mode must be fan_in or fan_out, got '", mode, "'");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  int64_t fan = mode == "fan_in" ? fan_in : fan_out;
  return calculate_gain(nl, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

Tensor kaiming_uniform_(Tensor t, double a, const std::string& mode, const std::string& nl) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return uniform_(t, -bound, bound);
}

Tensor kaiming_normal_(Tensor t, double a, const std::string& mode, const std::string& nl) {
  return normal_(t, 0.0, kaiming_std(t, a, mode, nl));
}

}  // namespace kiln::nn::init
