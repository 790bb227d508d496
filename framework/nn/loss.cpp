#include "nn/loss.h"

#include "nn/layers.h"
#include "ops/op_helpers.h"

namespace kiln::nn {

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  const char* op = "nll_loss";
  detail::check_floating(op, log_probs, "input");
  KILN_CHECK(targets.defined() && targets.dtype() == kInt64, op, "target must be an int64 tensor of class indices, got ",
             targets.defined() ? dtype_name(targets.dtype()) : "undefined");
  // Class dim last, flattened: rows (M, C); targets (M, 1).
  detail::ClassRows cr = detail::class_rows(op, log_probs, targets);
  const Tensor& rows = cr.rows;
  const Shape& expect = cr.target_shape;
  const int64_t C = rows.size(1);
  Tensor t = targets.reshape({-1, 1});
  for (int64_t v : targets.to_vector<int64_t>())
    KILN_CHECK(v == ignore_index || (v >= 0 && v < C), op, "target ", v, " out of range for ", C, " classes");
  // Pick logp[n, t_n] with a one-hot mask: (1, C) == (M, 1).
  Tensor hit = eq(arange(0, static_cast<double>(C), 1, TensorOptions(kInt64).device(rows.device())).reshape({1, C}), t);
  Tensor picked = neg(sum(where(hit, rows, 0.0), {1}));
  Tensor keep = ne(t.reshape({-1}), static_cast<double>(ignore_index));
  Tensor per_row = where(keep, picked, 0.0);
  switch (reduction) {
    case Reduction::None: return per_row.reshape(expect);
    case Reduction::Sum: return sum(per_row);
    case Reduction::Mean: break;
  }
  return div(sum(per_row), sum(keep).item());
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  KILN_CHECK(input.defined() && target.defined(), "mse_loss", "undefined input or target");
  detail::check_floating("mse_loss", input, "input");
  detail::check_floating("mse_loss", target, "target");
  KILN_CHECK(input.shape() == target.shape(), "mse_loss", "input of shape ", shape_str(input.shape()),
             " and target of shape ", shape_str(target.shape()), " differ");
  Tensor d = sub(input, target);
  Tensor sq = mul(d, d);
  switch (reduction) {
    case Reduction::None: return sq;
    case Reduction::Sum: return sum(sq);
    case Reduction::Mean: break;
  }
  return mean(sq);
}

CrossEntropyLoss::CrossEntropyLoss(int64_t ii, double ls, Reduction r)
    : Module("CrossEntropyLoss"), ignore_index(ii), label_smoothing(ls), reduction(r) {
  KILN_CHECK(ls >= 0 && ls <= 1, "CrossEntropyLoss", "label_smoothing must be in [0, 1], got ", ls);
}

Tensor CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(logits, targets, ignore_index, label_smoothing, reduction);
}

NLLLoss::NLLLoss(int64_t ii, Reduction r) : Module("NLLLoss"), ignore_index(ii), reduction(r) {}

Tensor NLLLoss::forward(const Tensor& log_probs, const Tensor& targets) {
  return nll_loss(log_probs, targets, ignore_index, reduction);
}

}  // namespace kiln::nn
