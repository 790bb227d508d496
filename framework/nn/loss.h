#pragma once
// The loss modules, with torch.nn's arguments and defaults; each calls its function, an
// op of ops/ops.h. Every loss takes a Reduction; BatchMean is kl_div's only, the others
// reject it.
#include <string>

#include "module.h"
#include "../ops/ops.h"

namespace kiln::nn {

// The loss functions are ops (core/op_records.inc: kiln::nll_loss, mse_loss, l1_loss,
// smooth_l1_loss, binary_cross_entropy_with_logits, kl_div, beside cross_entropy); the
// same functions by their nn:: names, as earlier code calls them.
using kiln::binary_cross_entropy_with_logits;
using kiln::kl_div;
using kiln::l1_loss;
using kiln::mse_loss;
using kiln::nll_loss;
using kiln::smooth_l1_loss;

// ---------------------------------------------------------------- modules
// weight (C) is a buffer (in the state_dict, as torch) when given.
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100, double label_smoothing = 0.0,
                            Reduction reduction = Reduction::Mean);
  explicit CrossEntropyLoss(const Tensor& weight, int64_t ignore_index = -100, double label_smoothing = 0.0,
                            Reduction reduction = Reduction::Mean);
  Tensor forward(const Tensor& logits, const Tensor& targets);
  Tensor operator()(const Tensor& logits, const Tensor& targets) { return forward(logits, targets); }

  Tensor weight;  // undefined: no class weights
  int64_t ignore_index;
  double label_smoothing;
  Reduction reduction;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);
  explicit NLLLoss(const Tensor& weight, int64_t ignore_index = -100, Reduction reduction = Reduction::Mean);
  Tensor forward(const Tensor& log_probs, const Tensor& targets);
  Tensor operator()(const Tensor& log_probs, const Tensor& targets) { return forward(log_probs, targets); }

  Tensor weight;  // undefined: no class weights
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

// ---- the elementwise losses
class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : Module("L1Loss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) { return l1_loss(input, target, reduction); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Reduction reduction;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0);
  Tensor forward(const Tensor& input, const Tensor& target) { return smooth_l1_loss(input, target, reduction, beta); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Reduction reduction;
  double beta;
};

// weight and pos_weight are buffers when given, as torch.
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(const Tensor& weight = Tensor(), Reduction reduction = Reduction::Mean,
                             const Tensor& pos_weight = Tensor());
  Tensor forward(const Tensor& input, const Tensor& target) {
    return binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Tensor weight;
  Reduction reduction;
  Tensor pos_weight;
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::Mean, bool log_target = false)
      : Module("KLDivLoss"), reduction(reduction), log_target(log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) { return kl_div(input, target, reduction, log_target); }
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }

  Reduction reduction;
  bool log_target;
};

}  // namespace kiln::nn
