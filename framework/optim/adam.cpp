#include "optim/adam.h"

#include <array>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "autograd/grad_mode.h"
#include "backend/backend.h"
#include "ops/ops.h"

namespace kiln::optim {

namespace {

// A group's default options from AdamOptions or AdamWOptions (the same fields).
template <class Options>
std::map<std::string, double> group_defaults(const Options& o) {
  return {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions o)
    : Adam(std::move(groups), group_defaults(o), "Adam", false) {}

Adam::Adam(std::vector<ParamGroup> groups, std::map<std::string, double> defaults, std::string name,
           bool decoupled)
    : Optimizer(std::move(groups), std::move(defaults), std::move(name)), decoupled_(decoupled) {
  state_names_ = {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  required_state_ = {"step", "exp_avg", "exp_avg_sq"};  // max_exp_avg_sq is made when missing
  for (const auto& g : groups_) check_options(g);
}

void Adam::check_options(const ParamGroup& g) const {
  KILN_CHECK(g.get("lr") >= 0, name_.c_str(), "invalid learning rate: ", g.get("lr"));
  KILN_CHECK(g.get("eps") >= 0, name_.c_str(), "invalid epsilon value: ", g.get("eps"));
  KILN_CHECK(g.get("beta1") >= 0 && g.get("beta1") < 1, name_.c_str(), "invalid beta parameter at index 0: ",
             g.get("beta1"));
  KILN_CHECK(g.get("beta2") >= 0 && g.get("beta2") < 1, name_.c_str(), "invalid beta parameter at index 1: ",
             g.get("beta2"));
  KILN_CHECK(g.get("weight_decay") >= 0, name_.c_str(), "invalid weight_decay value: ", g.get("weight_decay"));
  check_flag(g, "amsgrad");
  check_flag(g, "maximize");
}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions o)
    : Adam(std::move(groups), group_defaults(o), "AdamW", true) {}

namespace {

// A run of parameters in one group that the fused kernel takes with the same step count,
// dtype and device: one Backend::adam_step_many call (torch's multi-tensor path).
struct FusedRun {
  std::vector<AdamTensors> params;
  // Storages the run writes (parameters, moments) and reads (gradients): a parameter whose
  // writes meet either, or whose gradient meets the writes, starts a new run, so that
  // overlapping tensors are updated in the parameters' order. (Gradients may share one
  // storage, as DistributedDataParallel's buckets do.)
  std::set<const Storage*> written, read;
  int64_t step = 0;
  DType dtype = kFloat32;
  Device device;

  // The storages an update of t writes (undefined entries: null).
  static std::array<const Storage*, 4> writes_of(const AdamTensors& t) {
    std::array<const Storage*, 4> out{};
    const Tensor* w[] = {&t.param, &t.exp_avg, &t.exp_avg_sq, &t.max_exp_avg_sq};
    for (size_t i = 0; i < out.size(); ++i) out[i] = w[i]->defined() ? w[i]->impl()->storage.get() : nullptr;
    return out;
  }
  bool takes(const AdamTensors& t, int64_t s) const {
    if (params.empty()) return true;
    if (s != step || t.param.dtype() != dtype || !(t.param.device() == device)) return false;
    for (const Storage* w : writes_of(t)) {
      if (w && (written.count(w) || read.count(w))) return false;
    }
    return !written.count(t.grad.impl()->storage.get());
  }
  void add(AdamTensors t, int64_t s) {
    if (params.empty()) {
      step = s;
      dtype = t.param.dtype();
      device = t.param.device();
    }
    for (const Storage* w : writes_of(t)) {
      if (w) written.insert(w);
    }
    read.insert(t.grad.impl()->storage.get());
    params.push_back(std::move(t));
  }
};

// The tensors of the backend's fused kernel when the layouts allow it (every tensor
// contiguous, one dtype and device): about ten times less memory traffic than the
// composed form in step(), which stays for the other layouts.
bool fusable(const Tensor& p, const Tensor& g, std::map<std::string, Tensor>& st, bool amsgrad,
             AdamTensors& out) {
  out = {p, g, st["exp_avg"], st["exp_avg_sq"], amsgrad ? st["max_exp_avg_sq"] : Tensor()};
  for (const Tensor* t : {&out.param, &out.grad, &out.exp_avg, &out.exp_avg_sq, &out.max_exp_avg_sq}) {
    if (!t->defined()) continue;
    if (!t->is_contiguous() || t->dtype() != p.dtype() || t->device() != p.device() || t->numel() != p.numel()) {
      return false;
    }
  }
  return true;
}

// The update as elementwise ops, for the layouts the fused kernel does not take: torch's
// single-tensor Adam, op for op.
void composed_step(Tensor p, Tensor g, std::map<std::string, Tensor>& st, const AdamStepParams& hp) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, step = static_cast<double>(hp.step);
  if (hp.maximize) g = neg(g);
  if (hp.weight_decay != 0) {
    if (hp.decoupled) p.mul_(1.0 - lr * hp.weight_decay);
    else g = add(g, p, hp.weight_decay);
  }
  Tensor& m = st["exp_avg"];
  Tensor& v = st["exp_avg_sq"];
  m.mul_(b1).add_(g, 1.0 - b1);
  v.mul_(b2).add_(mul(g, g), 1.0 - b2);
  const double bc1 = 1.0 - std::pow(b1, step), bc2 = 1.0 - std::pow(b2, step);
  Tensor second = v;
  if (hp.amsgrad) {
    Tensor& vmax = st["max_exp_avg_sq"];
    vmax.copy_(maximum(vmax, v));
    second = vmax;
  }
  Tensor denom = add(div(sqrt(second), std::sqrt(bc2)), hp.eps);
  p.add_(div(m, denom), -lr / bc1);
}

}  // namespace

void Adam::step() {
  NoGradGuard no_grad;
  for (auto& group : groups_) {
    // The group's hyper-parameters; each update sets its step count.
    AdamStepParams hp{.lr = group.get("lr"), .beta1 = group.get("beta1"), .beta2 = group.get("beta2"),
                      .eps = group.get("eps"), .weight_decay = group.get("weight_decay"), .step = 0,
                      .decoupled = decoupled_, .amsgrad = group.get("amsgrad") != 0,
                      .maximize = group.get("maximize") != 0};
    FusedRun run;
    auto flush = [&] {
      if (run.params.empty()) return;
      hp.step = run.step;
      backend_of(name_.c_str(), {&run.params[0].param}).adam_step_many(run.params, hp);
      for (const AdamTensors& t : run.params) {
        for (const Tensor* w : {&t.param, &t.exp_avg, &t.exp_avg_sq, &t.max_exp_avg_sq}) {
          if (w->defined()) w->bump_version();
        }
      }
      run = FusedRun();
    };
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      auto& st = state_for(p);
      if (!st.count("step")) {
        st["step"] = zeros({}, TensorOptions(kFloat64));
        st["exp_avg"] = zeros_like(p);
        st["exp_avg_sq"] = zeros_like(p);
      }
      // Also when amsgrad was switched on after some steps (or the state came without it).
      if (hp.amsgrad && !st.count("max_exp_avg_sq")) st["max_exp_avg_sq"] = zeros_like(p);
      Tensor& step_t = st["step"];
      if (!step_t.device().is_cpu()) step_t = step_t.to(kCPU);  // read on the host below
      // A 0-d float64 counter on the CPU: bumped directly, not through an op per parameter.
      step_t.data<double>()[0] += 1.0;
      step_t.bump_version();
      const double step = step_t.data<double>()[0];
      // Loaded counters are checked to be whole numbers up to 2^53; the kernels take an int64.
      KILN_CHECK(step >= 1 && step <= 0x1p53, name_.c_str(), "step counter ", step, " of parameter is out of range");
      AdamTensors fused;
      if (fusable(p, g, st, hp.amsgrad, fused)) {
        // Runs keep the parameters' order where it could matter (overlapping storages).
        if (!run.takes(fused, static_cast<int64_t>(step))) flush();
        run.add(std::move(fused), static_cast<int64_t>(step));
        continue;
      }
      flush();
      hp.step = static_cast<int64_t>(step);
      composed_step(p, g, st, hp);
    }
    flush();
  }
}

}  // namespace kiln::optim
