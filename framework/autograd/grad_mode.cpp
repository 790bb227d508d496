#include "autograd/grad_mode.h"

namespace kiln {
namespace {
// Both per thread, as in PyTorch: one thread's mode never changes another's.
thread_local bool g_grad_enabled = true;
thread_local bool g_inference_mode = false;
}  // namespace
bool is_grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }

InferenceMode::InferenceMode(bool enabled) : prev_mode_(g_inference_mode), prev_grad_(g_grad_enabled) {
  g_inference_mode = enabled;
  // Leaving it off (InferenceMode(false)) restores recording, as in torch.
  g_grad_enabled = !enabled;
}

InferenceMode::~InferenceMode() {
  g_inference_mode = prev_mode_;
  g_grad_enabled = prev_grad_;
}

bool InferenceMode::is_enabled() { return g_inference_mode; }
}  // namespace kiln
