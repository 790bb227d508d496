#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

namespace kiln::optim {

// As torch.optim's schedulers: a group's base lr is its "initial_lr", set from its lr by the
// first schedule to drive it. So it survives in the optimizer's state dict, and a schedule
// made after loading one starts from the original lr, not from the lr it had reached.
LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& g : optimizer_.param_groups()) {
    auto it = g.options.find("initial_lr");
    if (it == g.options.end()) it = g.options.emplace("initial_lr", g.get("lr")).first;
    base_lrs_.push_back(it->second);
  }
}

void LRScheduler::apply() {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i)
    groups[i].options["lr"] = lr_at(last_step_, base_lrs_[i]);
}

void LRScheduler::step() {
  ++last_step_;
  apply();
}

void LRScheduler::set_last_step(int64_t step) {
  KILN_CHECK(step >= 0, "LRScheduler", "step must be non-negative, got ", step);
  last_step_ = step;
  apply();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.get("lr"));
  return out;
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> fn) : LRScheduler(opt), fn_(std::move(fn)) {
  KILN_CHECK(fn_ != nullptr, "LambdaLR", "needs a function");
  apply();
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma) : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR", "step_size must be positive, got ", step_size);
  apply();
}

double StepLR::lr_at(int64_t step, double base) const {
  return base * std::pow(gamma_, static_cast<double>(step / step_size_));
}

WarmupInverseSqrtLR::WarmupInverseSqrtLR(Optimizer& opt, int64_t d_model, int64_t warmup, double factor,
                                         WarmupStepIndexing indexing)
    : LRScheduler(opt), d_model_(d_model), warmup_(warmup), factor_(factor), indexing_(indexing) {
  KILN_CHECK(d_model > 0 && warmup > 0, "WarmupInverseSqrtLR", "d_model and warmup_steps must be positive, got ",
             d_model, " and ", warmup);
  apply();
}

double WarmupInverseSqrtLR::lr_at(int64_t step, double) const {
  // last_step() is k - 1 while update k runs.
  const int64_t n = indexing_ == WarmupStepIndexing::Paper ? step + 1 : std::max<int64_t>(step, 1);
  const double s = static_cast<double>(n);
  return factor_ * std::pow(static_cast<double>(d_model_), -0.5) *
         std::min(std::pow(s, -0.5), s * std::pow(static_cast<double>(warmup_), -1.5));
}

CosineWarmupLR::CosineWarmupLR(Optimizer& opt, int64_t warmup, int64_t total, double min_ratio)
    : LRScheduler(opt), warmup_(warmup), total_(total), min_ratio_(min_ratio) {
  KILN_CHECK(warmup >= 0 && total > warmup, "CosineWarmupLR", "need 0 <= warmup_steps < total_steps, got ", warmup,
             " and ", total);
  apply();
}

double CosineWarmupLR::lr_at(int64_t step, double base) const {
  if (step < warmup_) return base * static_cast<double>(step) / static_cast<double>(warmup_);
  double progress = std::min(1.0, static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_));
  double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return base * (min_ratio_ + (1.0 - min_ratio_) * cosine);
}

}  // namespace kiln::optim
