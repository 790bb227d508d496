#pragma once
#include "optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;  // ascend the objective (torch's maximize: the gradient's sign flipped)
};

// torch.optim.Adam: weight decay is L2 added to the gradient.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults);
  Adam(std::vector<Tensor> params, AdamOptions defaults) : Adam({ParamGroup(std::move(params))}, defaults) {}
  void step() override;

 protected:
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults, std::string name, bool decoupled);
  void check_options(const ParamGroup& g) const override;
  bool decoupled_;

};

// torch.optim.AdamW: decoupled weight decay (default 0.01).
class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamOptions defaults);
  AdamW(std::vector<Tensor> params, AdamOptions defaults) : AdamW({ParamGroup(std::move(params))}, defaults) {}
};

// AdamOptions with AdamW's default weight decay.
inline AdamOptions adamw_defaults() {
  AdamOptions o;
  o.weight_decay = 0.01;
  return o;
}

}  // namespace kiln::optim
