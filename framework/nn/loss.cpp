// The loss modules. (Their functions are ops: nll_loss in ops/nll_loss.cpp, the
// elementwise losses in ops/elementwise_loss.cpp, cross_entropy in ops/nn_functional.cpp.)
#include "nn/loss.h"

#include "nn/layers.h"

namespace kiln::nn {

// ---------------------------------------------------------------- modules
CrossEntropyLoss::CrossEntropyLoss(int64_t ii, double ls, Reduction r) : CrossEntropyLoss(Tensor(), ii, ls, r) {}

CrossEntropyLoss::CrossEntropyLoss(const Tensor& w, int64_t ii, double ls, Reduction r)
    : Module("CrossEntropyLoss"), ignore_index(ii), label_smoothing(ls), reduction(r) {
  KILN_CHECK(ls >= 0 && ls <= 1, "CrossEntropyLoss", "label_smoothing must be in [0, 1], got ", ls);
  if (w.defined()) weight = register_buffer("weight", w);
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets) {
  if (weight.defined()) return cross_entropy(logits, targets, weight, ignore_index, label_smoothing, reduction);
  return cross_entropy(logits, targets, ignore_index, label_smoothing, reduction);
}

NLLLoss::NLLLoss(int64_t ii, Reduction r) : NLLLoss(Tensor(), ii, r) {}

NLLLoss::NLLLoss(const Tensor& w, int64_t ii, Reduction r) : Module("NLLLoss"), ignore_index(ii), reduction(r) {
  if (w.defined()) weight = register_buffer("weight", w);
}

Tensor NLLLoss::forward(const Tensor& log_probs, const Tensor& targets) {
  if (weight.defined()) return nll_loss(log_probs, targets, weight, ignore_index, reduction);
  return nll_loss(log_probs, targets, ignore_index, reduction);
}

SmoothL1Loss::SmoothL1Loss(Reduction r, double b) : Module("SmoothL1Loss"), reduction(r), beta(b) {
  KILN_CHECK(beta >= 0, "SmoothL1Loss", "beta must be non-negative, got ", beta);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(const Tensor& w, Reduction r, const Tensor& pw)
    : Module("BCEWithLogitsLoss"), reduction(r) {
  if (w.defined()) weight = register_buffer("weight", w);
  if (pw.defined()) pos_weight = register_buffer("pos_weight", pw);
}

}  // namespace kiln::nn
