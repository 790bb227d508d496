#pragma once
// Losses as functions and as modules, with torch.nn's arguments and defaults.
#include <string>

#include "nn/module.h"
#include "ops/ops.h"

namespace kiln::nn {

// log_probs (N, C) or (N, C, d1, …) or (C), targets int64 class indices.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100, double label_smoothing = 0.0,
                            Reduction reduction = Reduction::Mean);
  Tensor forward(const Tensor& logits, const Tensor& targets);
  Tensor operator()(const Tensor& logits, const Tensor& targets) { return forward(logits, targets); }

  int64_t ignore_index;
  double label_smoothing;
  Reduction reduction;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);
  Tensor forward(const Tensor& log_probs, const Tensor& targets);
  Tensor operator()(const Tensor& log_probs, const Tensor& targets) { return forward(log_probs, targets); }

  int64_t ignore_index;
  Reduction reduction;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Module("MSELoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) { return mse_loss(input, target, reduction); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Reduction reduction;
};

}  // namespace kiln::nn
