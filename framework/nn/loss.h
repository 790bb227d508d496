#pragma once
// Losses as functions and as modules, with torch.nn's arguments and defaults.
// (cross_entropy itself is in ops/ops.h: it is a fused kernel.) Every loss takes a
// Reduction; BatchMean is kl_div's only, the others reject it.
#include <string>

#include "module.h"
#include "../ops/ops.h"

namespace kiln::nn {

// ---------------------------------------------------------------- class-index losses
// log_probs (N, C) or (N, C, d1, …) or (C), targets int64 class indices.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
// With class weights: weight (C), log_probs' dtype, no gradient (as torch). A row's loss is
// -weight[t] · log_probs[t]; Mean divides by the sum of weight[t] over the rows not ignored.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& weight, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);

// ---------------------------------------------------------------- elementwise losses
// input and target broadcast together (torch warns when their shapes differ; Kiln does
// not); the result of Reduction::None has the broadcast shape. At least one of them is
// floating; both get a gradient when they require one.
// (input - target)²
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// |input - target|
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// Huber-like: 0.5 d² / beta where |d| < beta, else |d| - 0.5 beta (d = input - target);
// beta = 0 is l1_loss; beta >= 0.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0);

// Binary cross-entropy on logits, numerically stable (no exp overflow, no log 0):
//   l = (1 - t) x + (1 + (pos_weight - 1) t) · softplus(-x),  times weight,
// input x and target t (probabilities, floating) of one shape; weight and pos_weight
// (undefined for none) broadcast to it (pos_weight (C) weighs the positives of each class
// of a (N, C) input). Gradients for input and target; weight and pos_weight get none
// (as torch, they must not require grad).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = Tensor());

// Kullback-Leibler divergence with input = log q and target p (log p with log_target):
//   l = p (log p - input), 0 where p = 0 (torch's xlogy), NaN where p < 0;
//   log_target: exp(target) (target - input).
// input and target broadcast; both floating. BatchMean: the sum over input.size(0) (the
// sum for a 0-d input), the mathematically right KL; Mean averages over every element.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false);

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

// ---- more elementwise losses (nn/elementwise_loss.cpp)
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
