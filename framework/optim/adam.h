#pragma once
#include "optimizer.h"

namespace kiln::optim {

// torch.optim.AdamW's defaults: those of Adam but weight_decay 0.01, so that
// AdamW(params, {.lr = 1e-4}) decays as torch.optim.AdamW(params, lr=1e-4) does.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool amsgrad = false;
  bool maximize = false;  // ascend the objective (torch's maximize: the gradient's sign flipped)
};

// torch.optim.Adam's defaults (weight_decay 0).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;  // ascend the objective (torch's maximize: the gradient's sign flipped)

  // An AdamOptions given to AdamW means what it says: its own weight_decay (0 unless set),
  // not AdamW's default. (A conversion operator, not a constructor of AdamWOptions, keeps
  // both aggregates, for designated initializers.)
  operator AdamWOptions() const {
    return {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay,
            .amsgrad = amsgrad, .maximize = maximize};
  }
};

// torch.optim.Adam: weight decay is L2 added to the gradient.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  Adam(std::vector<Tensor> params, AdamOptions defaults) : Adam({ParamGroup(std::move(params))}, defaults) {}
  void step() override;

 protected:
  // For AdamW: the group defaults as Optimizer keeps them, its name, decoupled decay.
  Adam(std::vector<ParamGroup> groups, std::map<std::string, double> defaults, std::string name, bool decoupled);
  void check_options(const ParamGroup& g) const override;
  bool decoupled_;

};

// torch.optim.AdamW: decoupled weight decay, p *= 1 - lr · weight_decay (default 0.01).
// Options braced at the call take AdamWOptions' defaults; an AdamOptions converts field
// for field (its weight_decay, 0 unless set).
class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults);
  AdamW(std::vector<Tensor> params, AdamWOptions defaults) : AdamW({ParamGroup(std::move(params))}, defaults) {}
};

// AdamOptions with AdamW's default weight decay (0.01): the same options as AdamWOptions{}.
inline AdamOptions adamw_defaults() {
  AdamOptions o;
  o.weight_decay = AdamWOptions{}.weight_decay;
  return o;
}

}  // namespace kiln::optim
