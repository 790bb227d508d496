#include "optim/sgd.h"

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln::optim {

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions o)
    : Optimizer(std::move(groups),
                {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
                 {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov ? 1.0 : 0.0},
                 {"maximize", o.maximize ? 1.0 : 0.0}},
                "SGD") {
  state_names_ = required_state_ = {"momentum_buffer"};
  for (const auto& g : groups_) check_options(g);
}

void SGD::check_options(const ParamGroup& g) const {
  KILN_CHECK(g.get("lr") >= 0, "SGD", "invalid learning rate: ", g.get("lr"));
  KILN_CHECK(g.get("momentum") >= 0, "SGD", "invalid momentum value: ", g.get("momentum"));
  KILN_CHECK(g.get("weight_decay") >= 0, "SGD", "invalid weight_decay value: ", g.get("weight_decay"));
  check_flag(g, "nesterov");
  check_flag(g, "maximize");
  KILN_CHECK(!(g.get("nesterov") != 0 && (g.get("momentum") <= 0 || g.get("dampening") != 0)), "SGD",
             "nesterov momentum requires a momentum and zero dampening, got momentum ", g.get("momentum"),
             " and dampening ", g.get("dampening"));
}

void SGD::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    const double lr = group.get("lr"), momentum = group.get("momentum"), dampening = group.get("dampening"),
                 wd = group.get("weight_decay");
    const bool nesterov = group.get("nesterov") != 0, maximize = group.get("maximize") != 0;
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (maximize) g = neg(g);
      if (wd != 0) g = add(g, p, wd);
      if (momentum != 0) {
        auto& st = state_for(p);
        auto it = st.find("momentum_buffer");
        if (it == st.end()) {
          it = st.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(momentum).add_(g, 1.0 - dampening);
        }
        g = nesterov ? add(g, it->second, momentum) : it->second;
      }
      p.add_(g, -lr);
    }
  }
}

}  // namespace kiln::optim
