#pragma once
// Parameter initialisers, as torch.nn.init. Each fills the tensor in place (without
// recording) from the default generator (see kiln::manual_seed) and returns it.
#include <memory>
#include <string>
#include <utility>

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

// While one is alive on this thread, uniform_ and normal_ (and so every initialiser above
// and every module's default init) fill zeros instead of drawing, and leave the
// generator where it was: for a model built only to have every parameter loaded from a
// file next (transformers' no_init_weights, torch.nn.utils.skip_init). Drawing
// all-MiniLM-L6-v2's 22.7M values took longer than reading its file. Zeros rather than
// uninitialised memory: a parameter that a non-strict load leaves alone holds no garbage.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};
// Whether a SkipInitGuard is alive on this thread.
bool is_init_skipped();

}  // namespace kiln::nn::init

namespace kiln::nn {

// torch.nn.utils.skip_init(M, *args): a module M(args...) built under a SkipInitGuard,
// its parameters zeros, for a load to set them next.
template <class M, class... Args>
std::shared_ptr<M> skip_init(Args&&... args) {
  init::SkipInitGuard no_init;
  return std::make_shared<M>(std::forward<Args>(args)...);
}

}  // namespace kiln::nn
