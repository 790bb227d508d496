// libFuzzer target: io::load_checkpoint of arbitrary bytes into a small model (Linear
// 3→2) with Adam, StepLR and ReduceLROnPlateau, then one training step and evaluation as a
// resumed run would take.
// load_checkpoint reads a path only, so each input is written to a file of this process
// in the temporary directory first.
//
// Loading must succeed or throw kiln::Error. A checkpoint that loads is one Kiln has
// validated: its weights and optimizer state are finite (a NaN or an infinity there is a
// finding, reported as a crash), and the training step after it runs without undefined
// behaviour (the sanitizers watch it). That step's values are not checked: finite but
// huge weights may overflow a loss, which is arithmetic, not a bad file. With the
// environment variable KILN_FUZZ_ALLOW_NONFINITE=1 the finiteness check is off, to look
// for other crashes past a known one.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "fuzz_model.h"
#include "scratch_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "nn/loss.h"
#include "ops/ops.h"

namespace {

const kiln::fuzz::ScratchFile& input() {
  static const kiln::fuzz::ScratchFile file("checkpoint.safetensors");
  return file;
}

bool all_finite(const kiln::Tensor& t) { return kiln::isfinite(t).all().item<bool>(); }

[[noreturn]] void finding(const char* what, double value) {
  std::fprintf(stderr, "fuzz_checkpoint: a checkpoint that loads gives %s (%g)\n", what,
               value);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  static const bool allow_nonfinite = [] {
    const char* v = std::getenv("KILN_FUZZ_ALLOW_NONFINITE");
    return v && std::string(v) == "1";
  }();
  input().write(data, size);

  fuzz::FuzzModel m;
  Generator gen(1);
  try {
    io::load_checkpoint(input().path(), m.parts(&gen));
  } catch (const Error&) {
    return 0;  // refused with Kiln's error: fine
  }

  if (!allow_nonfinite) {
    for (const Tensor& p : m.model->parameters())
      if (!all_finite(p)) finding("weights that are not finite as loaded", 0.0);
    for (const auto& [key, t] : m.optimizer->state_dict())
      if (t.is_floating_point() && !all_finite(t)) finding("optimizer state that is not finite as loaded", 0.0);
  }
  // Resume: one step on a fixed batch.
  Tensor x = randn({4, 3}, {}, &gen);
  Tensor y = randn({4, 2}, {}, &gen);
  m.optimizer->zero_grad();
  Tensor loss = mse_loss((*m.model)(x), y);
  loss.backward();
  m.optimizer->step();
  m.scheduler->step();
  m.plateau->step(loss.item<double>());
  return 0;
}
