#pragma once
#include "optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;  // ascend the objective (torch's maximize: the gradient's sign flipped)
};

// torch.optim.SGD: g = -g when maximizing; g += wd·p; buf = momentum·buf + (1 - dampening)·g (buf = g at the
// first step); g = nesterov ? g + momentum·buf : buf; p -= lr·g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults);
  SGD(std::vector<Tensor> params, SGDOptions defaults) : SGD({ParamGroup(std::move(params))}, defaults) {}
  void step() override;

 protected:
  void check_options(const ParamGroup& g) const override;
};

}  // namespace kiln::optim
