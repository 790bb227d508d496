// nll_loss (records in core/op_records.inc): the class-index loss of log-probabilities,
// with and without class weights. Composed of the differentiable ops.
#include "ops/op_helpers.h"
#include "ops/ops.h"

namespace kiln {
namespace {

// log_probs (N, C, d1, …) or (C), targets (N, d1, …) or (), weight (C) or undefined ->
// per-target losses -weight[t] · log_probs[t], reduced.
Tensor nll_loss_impl(const Tensor& log_probs, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                     Reduction reduction) {
  const char* op = "nll_loss";
  detail::check_floating(op, log_probs, "input");
  KILN_CHECK(targets.defined() && targets.dtype() == kInt64, op, "target must be an int64 tensor of class indices, got ",
             targets.defined() ? dtype_name(targets.dtype()) : "undefined");
  detail::check_reduction(op, reduction);
  // Class dim last, flattened: rows (M, C); targets (M, 1).
  detail::ClassRows cr = detail::class_rows(op, log_probs, targets);
  const Tensor& rows = cr.rows;
  const Shape& expect = cr.target_shape;
  const int64_t C = rows.size(1);
  if (weight.defined()) detail::check_class_weight(op, weight, log_probs, C);
  Tensor t = targets.reshape({-1, 1});
  for (int64_t v : targets.to_vector<int64_t>())
    KILN_CHECK(v == ignore_index || (v >= 0 && v < C), op, "target ", v, " out of range for ", C, " classes");
  // Pick logp[n, t_n] with a one-hot mask: (1, C) == (M, 1).
  Tensor hit = eq(arange(0, static_cast<double>(C), 1, TensorOptions(kInt64).device(rows.device())).reshape({1, C}), t);
  Tensor picked = neg(sum(where(hit, rows, 0.0), {1}));
  Tensor keep = ne(t.reshape({-1}), static_cast<double>(ignore_index));
  Tensor per_row = where(keep, picked, 0.0);
  // Each counted row's weight: weight[t_n], or 1.
  Tensor row_weight;
  if (weight.defined()) {
    row_weight = where(keep, sum(where(hit, weight.detach().reshape({1, C}), 0.0), {1}), 0.0);
    per_row = mul(per_row, row_weight);
  }
  switch (reduction) {
    case Reduction::None: return per_row.reshape(expect);
    case Reduction::Sum: return sum(per_row);
    case Reduction::Mean:
    case Reduction::BatchMean: break;  // BatchMean was rejected above
  }
  // The sum of the counted rows' weights (their number without weights); none gives NaN.
  double total = weight.defined() ? sum(row_weight).item() : sum(keep).item();
  return div(sum(per_row), total);
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, int64_t ignore_index, Reduction reduction) {
  return nll_loss_impl(log_probs, targets, Tensor(), ignore_index, reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  detail::check_defined("nll_loss", weight, "weight");
  return nll_loss_impl(log_probs, targets, weight, ignore_index, reduction);
}

}  // namespace kiln
