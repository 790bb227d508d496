#include "optim/adam.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln::optim {

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, "Adam", false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o, std::string name, bool decoupled)
    : Optimizer(std::move(groups),
                {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                 {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0}},
                name),
      decoupled_(decoupled) {
  for (const auto& g : groups_) {
    KILN_CHECK(g.get("lr") >= 0, name_.c_str(), "invalid learning rate: ", g.get("lr"));
    KILN_CHECK(g.get("eps") >= 0, name_.c_str(), "invalid epsilon value: ", g.get("eps"));
    KILN_CHECK(g.get("beta1") >= 0 && g.get("beta1") < 1, name_.c_str(), "invalid beta parameter at index 0: ",
               g.get("beta1"));
    KILN_CHECK(g.get("beta2") >= 0 && g.get("beta2") < 1, name_.c_str(), "invalid beta parameter at index 1: ",
               g.get("beta2"));
    KILN_CHECK(g.get("weight_decay") >= 0, name_.c_str(), "invalid weight_decay value: ", g.get("weight_decay"));
  }
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions o) : Adam(std::move(groups), o, "AdamW", true) {}

void Adam::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const double lr = group.get("lr"), b1 = group.get("beta1"), b2 = group.get("beta2"), eps = group.get("eps"),
                 wd = group.get("weight_decay");
    const bool amsgrad = group.get("amsgrad") != 0;
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& st = state_for(p);
      if (!st.count("step")) {
        st["step"] = zeros({}, TensorOptions(kFloat64));
        st["exp_avg"] = zeros_like(p);
        st["exp_avg_sq"] = zeros_like(p);
        if (amsgrad) st["max_exp_avg_sq"] = zeros_like(p);
      }
      Tensor& step_t = st["step"];
      step_t.add_(1.0);
      const double step = step_t.item();
      if (wd != 0) {
        if (decoupled_) p.mul_(1.0 - lr * wd);
        else g = add(g, p, wd);
      }
      Tensor& m = st["exp_avg"];
      Tensor& v = st["exp_avg_sq"];
      m.mul_(b1).add_(g, 1.0 - b1);
      v.mul_(b2).add_(mul(g, g), 1.0 - b2);
      const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
      Tensor second = v;
      if (amsgrad) {
        Tensor& vmax = st["max_exp_avg_sq"];
        vmax.copy_(maximum(vmax, v));
        second = vmax;
      }
      Tensor denom = add(div(sqrt(second), std::sqrt(bc2)), eps);
      p.add_(div(m, denom), -lr / bc1);
    }
  }
}

}  // namespace kiln::optim
