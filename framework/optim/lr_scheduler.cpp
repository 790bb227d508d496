#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kiln::optim {
namespace {

// How far `step` is through `total` steps, from 0 to 1 and then 1.
double fraction_done(int64_t step, int64_t total) {
  return static_cast<double>(std::min(step, total)) / static_cast<double>(total);
}

// The cosine from base (at 0) down to eta_min (at period) of CosineAnnealingLR and SGDR.
double cosine_annealed(double base, double eta_min, int64_t at, int64_t period) {
  const double phase = M_PI * static_cast<double>(at) / static_cast<double>(period);
  return eta_min + (base - eta_min) * (1.0 + std::cos(phase)) / 2.0;
}

}  // namespace

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

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  for (int64_t m : milestones_) KILN_CHECK(m >= 0, "MultiStepLR", "milestones must be non-negative, got ", m);
  KILN_CHECK(std::isfinite(gamma), "MultiStepLR", "gamma must be finite, got ", gamma);
  std::sort(milestones_.begin(), milestones_.end());
  apply();
}

double MultiStepLR::lr_at(int64_t step, double base) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return base * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) {
  KILN_CHECK(std::isfinite(gamma), "ExponentialLR", "gamma must be finite, got ", gamma);
  apply();
}

double ExponentialLR::lr_at(int64_t step, double base) const {
  return base * std::pow(gamma_, static_cast<double>(step));
}

ConstantLR::ConstantLR(Optimizer& opt, double factor, int64_t total_iters)
    : LRScheduler(opt), factor_(factor), total_(total_iters) {
  // torch's bounds: a factor of 0 or more and at most 1.
  KILN_CHECK(factor >= 0.0 && factor <= 1.0, "ConstantLR", "factor must be in [0, 1], got ", factor);
  KILN_CHECK(total_iters >= 0, "ConstantLR", "total_iters must be non-negative, got ", total_iters);
  apply();
}

double ConstantLR::lr_at(int64_t step, double base) const { return step < total_ ? base * factor_ : base; }

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
  // torch's bounds: the start above 0 (a schedule from 0 would stay at 0 in torch's
  // step-by-step update), both at most 1.
  KILN_CHECK(start_factor > 0.0 && start_factor <= 1.0, "LinearLR", "start_factor must be in (0, 1], got ",
             start_factor);
  KILN_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR", "end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters > 0, "LinearLR", "total_iters must be positive, got ", total_iters);
  apply();
}

double LinearLR::lr_at(int64_t step, double base) const {
  const double t = fraction_done(step, total_);
  return base * (start_ + (end_ - start_) * t);
}

PolynomialLR::PolynomialLR(Optimizer& opt, int64_t total_iters, double power)
    : LRScheduler(opt), total_(total_iters), power_(power) {
  KILN_CHECK(total_iters > 0, "PolynomialLR", "total_iters must be positive, got ", total_iters);
  KILN_CHECK(std::isfinite(power), "PolynomialLR", "power must be finite, got ", power);
  apply();
}

double PolynomialLR::lr_at(int64_t step, double base) const {
  const double t = fraction_done(step, total_);
  return base * std::pow(1.0 - t, power_);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt), t_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR", "T_max must be positive, got ", T_max);
  KILN_CHECK(std::isfinite(eta_min), "CosineAnnealingLR", "eta_min must be finite, got ", eta_min);
  apply();
}

double CosineAnnealingLR::lr_at(int64_t step, double base) const {
  return cosine_annealed(base, eta_min_, step, t_max_);
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& opt, int64_t T_0, int64_t T_mult, double eta_min)
    : LRScheduler(opt), t_0_(T_0), t_mult_(T_mult), eta_min_(eta_min) {
  KILN_CHECK(T_0 > 0, "CosineAnnealingWarmRestarts", "T_0 must be positive, got ", T_0);
  KILN_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts", "T_mult must be at least 1, got ", T_mult);
  KILN_CHECK(std::isfinite(eta_min), "CosineAnnealingWarmRestarts", "eta_min must be finite, got ", eta_min);
  apply();
}

double CosineAnnealingWarmRestarts::lr_at(int64_t step, double base) const {
  // The cycle `step` falls in, in whole steps as torch counts them: cur steps into a cycle
  // of length len (the lengths grow geometrically, so the walk is short).
  int64_t cur = step, len = t_0_;
  if (t_mult_ == 1) {
    cur = step % t_0_;
  } else {
    while (cur >= len) {
      cur -= len;
      len *= t_mult_;
    }
  }
  return cosine_annealed(base, eta_min_, cur, len);
}

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedulers_.empty(), "SequentialLR", "needs at least one schedule");
  KILN_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR", "needs one milestone fewer than schedules, got ",
             schedulers_.size(), " schedules and ", milestones_.size(), " milestones");
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    KILN_CHECK(schedulers_[i] != nullptr, "SequentialLR", "schedule ", i, " is null");
    KILN_CHECK(&schedulers_[i]->optimizer() == &opt, "SequentialLR", "schedule ", i,
               " drives another optimizer than this one");
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > (i ? milestones_[i - 1] : 0), "SequentialLR",
               "milestones must be positive and rise strictly, got ", milestones_[i], " at ", i);
  apply();
}

double SequentialLR::lr_at(int64_t step, double base) const {
  const auto i = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  const int64_t start = i ? milestones_[static_cast<size_t>(i) - 1] : 0;
  return schedulers_[static_cast<size_t>(i)]->lr_at(step - start, base);
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

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options)
    : optimizer_(opt), options_(std::move(options)) {
  const auto& o = options_;
  KILN_CHECK(o.factor >= 0.0 && o.factor < 1.0, "ReduceLROnPlateau", "factor must be in [0, 1), got ", o.factor);
  KILN_CHECK(o.patience >= 0, "ReduceLROnPlateau", "patience must be non-negative, got ", o.patience);
  KILN_CHECK(o.cooldown >= 0, "ReduceLROnPlateau", "cooldown must be non-negative, got ", o.cooldown);
  KILN_CHECK(std::isfinite(o.threshold) && o.threshold >= 0.0, "ReduceLROnPlateau",
             "threshold must be finite and non-negative, got ", o.threshold);
  KILN_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, "ReduceLROnPlateau", "eps must be finite and non-negative, got ",
             o.eps);
  const size_t groups = optimizer_.param_groups().size();
  KILN_CHECK(o.min_lr.size() == 1 || o.min_lr.size() == groups, "ReduceLROnPlateau", "expected 1 or ", groups,
             " min_lr values (one per parameter group), got ", o.min_lr.size());
  for (double m : o.min_lr)
    KILN_CHECK(std::isfinite(m) && m >= 0.0, "ReduceLROnPlateau", "min_lr must be finite and non-negative, got ", m);
  state_.best = o.mode == ReduceLROnPlateauOptions::Mode::Min ? INFINITY : -INFINITY;
}

bool ReduceLROnPlateau::is_better(double metric) const {
  using O = ReduceLROnPlateauOptions;
  const double best = state_.best, t = options_.threshold;
  const bool rel = options_.threshold_mode == O::ThresholdMode::Rel;
  if (options_.mode == O::Mode::Min) return rel ? metric < best * (1.0 - t) : metric < best - t;
  return rel ? metric > best * (t + 1.0) : metric > best + t;
}

void ReduceLROnPlateau::step(double metric) {
  State& s = state_;
  ++s.last_step;
  if (is_better(metric)) {
    s.best = metric;
    s.num_bad_epochs = 0;
  } else {
    ++s.num_bad_epochs;
  }
  if (s.cooldown_counter > 0) {  // failures in the cooldown do not count
    --s.cooldown_counter;
    s.num_bad_epochs = 0;
  }
  if (s.num_bad_epochs > options_.patience) {
    auto& groups = optimizer_.param_groups();
    KILN_CHECK(options_.min_lr.size() == 1 || options_.min_lr.size() == groups.size(), "ReduceLROnPlateau",
               "the optimizer has ", groups.size(), " parameter groups, but min_lr has ", options_.min_lr.size(),
               " values");
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].get("lr");
      const double floor = options_.min_lr[options_.min_lr.size() == 1 ? 0 : i];
      const double new_lr = std::max(old_lr * options_.factor, floor);
      if (old_lr - new_lr > options_.eps) groups[i].options["lr"] = new_lr;
    }
    s.cooldown_counter = options_.cooldown;
    s.num_bad_epochs = 0;
  }
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.get("lr"));
  return out;
}

void ReduceLROnPlateau::load_state(const State& state) {
  KILN_CHECK(!std::isnan(state.best) && state.num_bad_epochs >= 0 && state.cooldown_counter >= 0 &&
                 state.last_step >= 0,
             "ReduceLROnPlateau", "a state needs a best that is a number and non-negative counts, got best ",
             state.best, ", num_bad_epochs ", state.num_bad_epochs, ", cooldown_counter ", state.cooldown_counter,
             ", last_step ", state.last_step);
  state_ = state;
}

}  // namespace kiln::optim

