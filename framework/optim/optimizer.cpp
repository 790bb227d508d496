#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln::optim {
namespace {
// The decimal index in key[from, to), or a kiln::Error naming the key.
size_t parse_index(const std::string& key, size_t from, size_t to) {
  std::string digits = key.substr(from, to - from);
  KILN_CHECK(!digits.empty() && digits.size() < 10 && digits.find_first_not_of("0123456789") == std::string::npos,
             "load_state_dict", "malformed optimizer key '", key, "'");
  return std::stoul(digits);
}

// A step counter from a file: a whole number in [0, 2^53] (a float64 counts exactly up
// to there; 2^53 steps are far beyond any run), so that pow(beta, step) and the int64 the
// kernels take are defined. NaN, -5, 2.5 and 1e214 are refused, naming the key.
void check_step_value(const std::string& key, const Tensor& t) {
  const double v = t.to(kFloat64).item();
  KILN_CHECK(std::isfinite(v) && v >= 0 && v == std::floor(v) && v <= 0x1p53, "load_state_dict", "state '", key,
             "' must be a whole number of steps in [0, 2^53], got ", v);
}

// A per-parameter buffer (momentum, moments) from a file: the parameter's shape and
// dtype, every value finite; second moments (square averages) also non-negative, or the
// next step would take the square root of a negative number.
void check_buffer(const std::string& key, const std::string& name, const Tensor& t, const Tensor& param, size_t i) {
  KILN_CHECK(t.shape() == param.shape(), "load_state_dict", "state '", key, "' has shape ", shape_str(t.shape()),
             " but parameter ", i, " has shape ", shape_str(param.shape()));
  KILN_CHECK(t.dtype() == param.dtype(), "load_state_dict", "state '", key, "' has dtype ", dtype_name(t.dtype()),
             " but parameter ", i, " has dtype ", dtype_name(param.dtype()));
  KILN_CHECK(isfinite(t).all().item() != 0, "load_state_dict", "state '", key, "' holds ",
             isnan(t).any().item() != 0 ? "NaN" : "an infinite value", " (shape ", shape_str(t.shape()), ")");
  const bool square = name == "exp_avg_sq" || name == "max_exp_avg_sq";
  KILN_CHECK(!square || (t.numel() == 0 || min(t).item() >= 0), "load_state_dict", "state '", key,
             "' is an average of squares but holds a negative value (", t.numel() ? min(t).item() : 0.0, ")");
}

// Options a state dict may lack (written before they existed), with the value a group
// loaded from it takes: torch's __setstate__ defaults.
const std::map<std::string, double>& load_defaults() {
  static const std::map<std::string, double> d{{"maximize", 0.0}};
  return d;
}
}  // namespace

std::map<std::string, double> Optimizer::with_load_defaults(std::map<std::string, double> options,
                                                            const OptimizerState& state, size_t g) const {
  for (const auto& [option, v] : load_defaults()) {
    if (defaults_.count(option) && !state.count("param_groups." + std::to_string(g) + "." + option))
      options[option] = v;
  }
  return options;
}

double ParamGroup::get(const std::string& key) const {
  auto it = options.find(key);
  KILN_CHECK(it != options.end(), "optimizer", "parameter group has no option '", key, "'");
  return it->second;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults, std::string name)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  size_t count = 0;
  for (const auto& g : groups) count += g.params.size();
  KILN_CHECK(count > 0, name_.c_str(), "optimizer got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  const size_t g = groups_.size();
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    KILN_CHECK(p.defined(), name_.c_str(), "parameter ", i, " of group ", g, " is an undefined tensor");
    KILN_CHECK(p.is_leaf(), name_.c_str(), "can't optimize a non-leaf tensor (parameter ", i, " of group ", g, ")");
    KILN_CHECK(is_floating(p.dtype()), name_.c_str(), "can't optimize a tensor of dtype ", dtype_name(p.dtype()),
               " (parameter ", i, " of group ", g, ")");
    KILN_CHECK(seen.insert(p.impl()).second, name_.c_str(), "some parameters appear in more than one parameter group");
  }
  for (const auto& [k, v] : group.options)
    KILN_CHECK(defaults_.count(k), name_.c_str(), "unknown option '", k, "'");
  for (const auto& [k, v] : defaults_) group.options.emplace(k, v);
  check_options(group);
  groups_.push_back(std::move(group));
}

void Optimizer::check_flag(const ParamGroup& g, const char* key) const {
  const double v = g.get(key);
  KILN_CHECK(v == 0 || v == 1, name_.c_str(), "invalid ", key, " value: ", v, " (a flag is 0 or 1)");
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_)
    for (auto& p : g.params) p.zero_grad(set_to_none);
}

std::map<std::string, Tensor>& Optimizer::state_for(const Tensor& p) { return state_[p.impl()]; }

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  int64_t i = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [k, v] : groups_[g].options)
      out["param_groups." + std::to_string(g) + "." + k] = full({}, v, TensorOptions(kFloat64));
    for (const auto& p : groups_[g].params) {
      auto it = state_.find(p.impl());
      if (it != state_.end())
        for (const auto& [k, t] : it->second) out["state." + std::to_string(i) + "." + k] = t.detach();
      ++i;
    }
  }
  return out;
}

void Optimizer::check_state_dict(const OptimizerState& state) const {
  std::vector<const Tensor*> params;
  for (const auto& g : groups_)
    for (const auto& p : g.params) params.push_back(&p);
  // The groups' options as they would be after loading, and each parameter's state names.
  std::vector<ParamGroup> loaded(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) loaded[g].options = with_load_defaults(groups_[g].options, state, g);
  std::vector<std::set<std::string>> names(params.size());
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.", 0) == 0) {
      size_t dot = key.find('.', 13);
      KILN_CHECK(dot != std::string::npos, "load_state_dict", "malformed optimizer key '", key, "'");
      size_t g = parse_index(key, 13, dot);
      KILN_CHECK(g < groups_.size(), "load_state_dict", "state has parameter group ", g, " but the optimizer has ",
                 groups_.size(), " groups");
      std::string option = key.substr(dot + 1);
      KILN_CHECK(defaults_.count(option) || option == "initial_lr", "load_state_dict", "unknown option '", key,
                 "' for ", name_);
      KILN_CHECK(t.defined() && t.numel() == 1, "load_state_dict", "option '", key, "' must hold one value");
      const double v = t.item();
      KILN_CHECK(std::isfinite(v), "load_state_dict", "option '", key, "' must be finite, got ", v);
      loaded[g].options[option] = v;
    } else if (key.rfind("state.", 0) == 0) {
      size_t dot = key.find('.', 6);
      KILN_CHECK(dot != std::string::npos, "load_state_dict", "malformed optimizer key '", key, "'");
      size_t i = parse_index(key, 6, dot);
      KILN_CHECK(i < params.size(), "load_state_dict", "state for parameter ", i, " but the optimizer has ",
                 params.size(), " parameters");
      std::string name = key.substr(dot + 1);
      KILN_CHECK(std::find(state_names_.begin(), state_names_.end(), name) != state_names_.end(), "load_state_dict",
                 "unexpected state '", key, "' for ", name_);
      KILN_CHECK(t.defined(), "load_state_dict", "state '", key, "' is an undefined tensor");
      if (name == "step") {
        KILN_CHECK(t.numel() == 1, "load_state_dict", "state '", key, "' must hold one value, got shape ",
                   shape_str(t.shape()));
        check_step_value(key, t);
      } else {
        check_buffer(key, name, t, *params[i], i);
      }
      names[i].insert(name);
    } else {
      KILN_FAIL("load_state_dict", "unexpected optimizer key '", key, "'");
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& [option, v] : defaults_) {
      std::string key = "param_groups." + std::to_string(g) + "." + option;
      KILN_CHECK(state.count(key) || load_defaults().count(option), "load_state_dict", "state lacks '", key,
                 "' (the optimizer has ", groups_.size(), " parameter groups)");
    }
    check_options(loaded[g]);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (names[i].empty()) continue;  // no step has updated this parameter yet
    for (const auto& name : required_state_)
      KILN_CHECK(names[i].count(name), "load_state_dict", "state lacks 'state.", i, ".", name, "'");
  }
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  check_state_dict(state);
  std::vector<const Tensor*> params;
  for (const auto& g : groups_)
    for (const auto& p : g.params) params.push_back(&p);
  state_.clear();
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = with_load_defaults(groups_[g].options, state, g);
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.", 0) == 0) {
      size_t dot = key.find('.', 13);
      groups_[parse_index(key, 13, dot)].options[key.substr(dot + 1)] = t.item();
    } else {
      size_t dot = key.find('.', 6);
      const Tensor& p = *params[parse_index(key, 6, dot)];
      std::string name = key.substr(dot + 1);
      // A step count stays a float64 on the CPU (exact to 2^53; the optimizer reads it on
      // the host); other state takes the parameter's dtype and device.
      const bool step = name == "step";
      Tensor copy = t.to(step ? kFloat64 : p.dtype()).to(step ? kCPU : p.device()).clone().detach();
      state_[p.impl()][name] = copy;
    }
  }
}

}  // namespace kiln::optim
