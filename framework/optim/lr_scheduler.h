#pragma once
// Learning-rate schedules that drive any optimizer: call step() once per optimizer
// step (after it); the learning rate of every group is set from the schedule. The base
// lr of a group is its option "initial_lr", which the first schedule sets from the
// group's lr (as in torch.optim); groups added to the optimizer later are not driven.
#include <functional>
#include <memory>
#include <vector>

#include "optimizer.h"

namespace kiln::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  void step();  // advances last_step by one and sets the groups' lr
  int64_t last_step() const { return last_step_; }
  std::vector<double> get_last_lr() const;
  // The learning rate of a group with base lr `base` at `step` (0 at construction).
  virtual double lr_at(int64_t step, double base) const = 0;

  // For checkpoints: the schedule's position; setting it also sets the groups' lr.
  void set_last_step(int64_t step);

  const Optimizer& optimizer() const { return optimizer_; }

 protected:
  void apply();  // must be called by subclasses' constructors once they are set up
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_step_ = 0;
};

// lr = base · fn(step).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> fn);
  double lr_at(int64_t step, double base) const override { return base * fn_(step); }

 private:
  std::function<double(int64_t)> fn_;
};

// lr = base · gamma^(step / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base · gamma^(the number of milestones <= step), a milestone listed twice counting
// twice (torch.optim.lr_scheduler.MultiStepLR).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t step, double base) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base · gamma^step (torch.optim.lr_scheduler.ExponentialLR).
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(int64_t step, double base) const override;

 private:
  double gamma_;
};

// lr = base · factor for step < total_iters, then base (torch's ConstantLR).
class ConstantLR : public LRScheduler {
 public:
  explicit ConstantLR(Optimizer& opt, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  double lr_at(int64_t step, double base) const override;

 private:
  double factor_;
  int64_t total_;
};

// lr = base · (start_factor + (end_factor - start_factor) · min(step, total_iters) /
// total_iters): a straight line from start to end, then flat (torch's LinearLR).
class LinearLR : public LRScheduler {
 public:
  explicit LinearLR(Optimizer& opt, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
                    int64_t total_iters = 5);
  double lr_at(int64_t step, double base) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// lr = base · (1 - min(step, total_iters) / total_iters)^power (torch's PolynomialLR).
class PolynomialLR : public LRScheduler {
 public:
  explicit PolynomialLR(Optimizer& opt, int64_t total_iters = 5, double power = 1.0);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t total_;
  double power_;
};

// lr = eta_min + (base - eta_min) · (1 + cos(pi · step / T_max)) / 2: from base down to
// eta_min at T_max, then up again, a period of 2 · T_max (torch's CosineAnnealingLR, whose
// step-by-step update follows this formula; no restarts: that is SGDR's
// CosineAnnealingWarmRestarts).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// SGDR's cosine with warm restarts (torch's CosineAnnealingWarmRestarts): the cosine of
// CosineAnnealingLR from base down towards eta_min over a cycle of T_0 steps, then back at
// base, each cycle T_mult times as long as the one before.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& opt, int64_t T_0, int64_t T_mult = 1, double eta_min = 0.0);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t t_0_, t_mult_;
  double eta_min_;
};

// One schedule after another (torch's SequentialLR): schedulers[i] from milestones[i - 1]
// on, at its own step 0 there. The milestones rise strictly, one fewer than the
// schedules, which must drive the same optimizer; step this schedule only, not the ones
// it holds. E.g. a linear warm-up over 5 steps, then a cosine over 95:
//   SequentialLR s(opt, {std::make_shared<LinearLR>(opt, 0.1, 1.0, 5),
//                        std::make_shared<CosineAnnealingLR>(opt, 95)}, {5});
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_at(int64_t step, double base) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Which step number the k-th optimizer update (k = 1, 2, …) is given by the warm-up schedule.
enum class WarmupStepIndexing {
  // As LambdaLR(opt, rate) in PyTorch (The Annotated Transformer): the lr of update k is
  // computed at step k - 1, with step 0 read as 1 (updates 1 and 2 both get rate(1)).
  LambdaLR,
  // As the paper's formula: update k uses step_num = k (update 1 gets rate(1), update 2
  // rate(2)); the peak is reached at update warmup_steps exactly.
  Paper,
};

// "Attention Is All You Need" §5.3, ignoring the base lr:
//   lr = factor · d_model^-0.5 · min(s^-0.5, s · warmup^-1.5),
// s = max(step, 1) (LambdaLR indexing) or step + 1 (Paper indexing), where step is
// last_step(): the number of scheduler steps taken so far.
class WarmupInverseSqrtLR : public LRScheduler {
 public:
  WarmupInverseSqrtLR(Optimizer& opt, int64_t d_model, int64_t warmup_steps, double factor = 1.0,
                      WarmupStepIndexing indexing = WarmupStepIndexing::LambdaLR);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t d_model_, warmup_;
  double factor_;
  WarmupStepIndexing indexing_;
};

// Linear warm-up from 0 to base over warmup_steps, then cosine decay to
// base · min_ratio at total_steps (and flat after).
class CosineWarmupLR : public LRScheduler {
 public:
  CosineWarmupLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_ratio = 0.0);
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t warmup_, total_;
  double min_ratio_;
};

// torch's ReduceLROnPlateau: each group's lr times `factor` (not below its min_lr) once a
// metric (a validation loss, say) has failed to improve for more than `patience` steps in
// a row, then `cooldown` steps in which failures do not count. Improving means beating the
// best so far by `threshold`: relatively (min: below best · (1 - threshold); max: above
// best · (1 + threshold)) or absolutely (below best - threshold; above best + threshold).
// A NaN metric never improves. A reduction smaller than eps is not made.
struct ReduceLROnPlateauOptions {
  enum class Mode { Min, Max };
  enum class ThresholdMode { Rel, Abs };
  Mode mode = Mode::Min;
  double factor = 0.1;  // in [0, 1)
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::Rel;
  int64_t cooldown = 0;
  std::vector<double> min_lr = {0.0};  // one for every group, or one per group
  double eps = 1e-8;
};

class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& opt, ReduceLROnPlateauOptions options = {});

  // One evaluation's metric: call it once per evaluation, after the optimizer's steps.
  void step(double metric);
  std::vector<double> get_last_lr() const;
  const ReduceLROnPlateauOptions& options() const { return options_; }

  // Where it stands (torch's state_dict names), for checkpoints: best starts at +inf
  // (Min) or -inf (Max).
  struct State {
    double best = 0.0;
    int64_t num_bad_epochs = 0, cooldown_counter = 0, last_step = 0;
  };
  State state() const { return state_; }
  void load_state(const State& state);

 private:
  bool is_better(double metric) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  State state_;
};

}  // namespace kiln::optim
