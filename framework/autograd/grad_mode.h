#pragma once

namespace kiln {

// Whether ops record the graph on this thread (on by default).
bool is_grad_enabled();
void set_grad_enabled(bool on);

// Turns recording off for its scope: inference, optimizer steps, initialisers.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Inference on this thread only, like torch.inference_mode: while a guard lives, ops record
// no graph (as under NoGradGuard) and every module behaves as in eval mode (no dropout)
// whatever its training flag, which is left untouched. Nothing shared is written, so
// several threads may run one model at once, each under its own guard.
//   { kiln::InferenceMode guard; auto out = model.forward(x); }
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

  // Whether an enabled guard is alive on this thread.
  static bool is_enabled();

 private:
  bool prev_mode_;
  bool prev_grad_;
};

}  // namespace kiln
