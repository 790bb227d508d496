#include "optim/optimizer.h"

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
}  // namespace

double ParamGroup::get(const std::string& key) const {
  auto it = options.find(key);
  KILN_CHECK(it != options.end(), "optimizer", "parameter group has no option '", key, "'");
  return it->second;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults, std::string name)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  KILN_CHECK(!groups.empty(), name_.c_str(), "optimizer got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_)
    for (const auto& p : g.params) seen.insert(p.impl());
  for (const auto& p : group.params) {
    KILN_CHECK(p.defined(), name_.c_str(), "parameter group holds an undefined tensor");
    KILN_CHECK(p.is_leaf() && is_floating(p.dtype()), name_.c_str(), "can't optimize a non-leaf or non-float tensor");
    KILN_CHECK(seen.insert(p.impl()).second, name_.c_str(), "some parameters appear in more than one parameter group");
  }
  for (const auto& [k, v] : group.options)
    KILN_CHECK(defaults_.count(k), name_.c_str(), "unknown option '", k, "'");
  for (const auto& [k, v] : defaults_) group.options.emplace(k, v);
  groups_.push_back(std::move(group));
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
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.", 0) == 0) {
      size_t dot = key.find('.', 13);
      KILN_CHECK(dot != std::string::npos, "load_state_dict", "malformed optimizer key '", key, "'");
      size_t g = parse_index(key, 13, dot);
      KILN_CHECK(g < groups_.size(), "load_state_dict", "state has parameter group ", g, " but the optimizer has ",
                 groups_.size());
      KILN_CHECK(t.numel() == 1, "load_state_dict", "option '", key, "' must hold one value");
    } else if (key.rfind("state.", 0) == 0) {
      size_t dot = key.find('.', 6);
      KILN_CHECK(dot != std::string::npos, "load_state_dict", "malformed optimizer key '", key, "'");
      size_t i = parse_index(key, 6, dot);
      KILN_CHECK(i < params.size(), "load_state_dict", "state for parameter ", i, " but the optimizer has ",
                 params.size(), " parameters");
      std::string name = key.substr(dot + 1);
      if (name != "step")
        KILN_CHECK(t.shape() == params[i]->shape(), "load_state_dict", "state '", key, "' has shape ",
                   shape_str(t.shape()), " but parameter ", i, " has shape ", shape_str(params[i]->shape()));
    } else {
      KILN_FAIL("load_state_dict", "unexpected optimizer key '", key, "'");
    }
  }
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  check_state_dict(state);
  std::vector<const Tensor*> params;
  for (const auto& g : groups_)
    for (const auto& p : g.params) params.push_back(&p);
  state_.clear();
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.", 0) == 0) {
      size_t dot = key.find('.', 13);
      groups_[parse_index(key, 13, dot)].options[key.substr(dot + 1)] = t.item();
    } else {
      size_t dot = key.find('.', 6);
      const Tensor& p = *params[parse_index(key, 6, dot)];
      Tensor copy = t.to(t.dtype() == kInt64 ? kInt64 : p.dtype()).to(p.device()).clone().detach();
      state_[p.impl()][key.substr(dot + 1)] = copy;
    }
  }
}

}  // namespace kiln::optim
