#pragma once
// Optimizers hold parameter groups (each with its own options, e.g. lr and
// weight_decay) and per-parameter state (momentum buffers, Adam moments). Options a
// group does not set take the optimizer's defaults, as in torch.optim.
#include <map>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace kiln::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options;  // e.g. {"lr", 1e-3}, {"weight_decay", 0.01}

  ParamGroup() = default;
  ParamGroup(std::vector<Tensor> p, std::map<std::string, double> o = {})
      : params(std::move(p)), options(std::move(o)) {}
  double get(const std::string& key) const;  // throws if absent
};

// Optimizer state as named tensors, ready for a safetensors file:
// "state.<i>.<name>" for parameter i (counted across groups in order) and
// "param_groups.<g>.<option>" (0-d float64) for each group's options (and "initial_lr",
// the base lr a schedule started from, once an LRScheduler has driven the group).
using OptimizerState = std::map<std::string, Tensor>;

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults, std::string name);
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);

  OptimizerState state_dict() const;
  // Checks that the state fits these parameters before changing anything: one entry per
  // option of every group (no more groups, no fewer; an option newer than the file, such
  // as maximize, may be absent and takes torch's default then, false), options this
  // optimizer accepts,
  // per-parameter state with the names this optimizer keeps, all of them, in the
  // parameter's shape. Loaded tensors are copied.
  void load_state_dict(const OptimizerState& state);
  // The checks of load_state_dict without changing anything.
  void check_state_dict(const OptimizerState& state) const;

 protected:
  // Throws if a group's options are out of range. Called for every group added after
  // construction and for the options of a state being loaded; the constructors of
  // subclasses call it for the groups they were given (a base constructor cannot).
  virtual void check_options(const ParamGroup&) const {}
  // options with every option newer than some state files (optimizer.cpp's
  // load_defaults()) that this optimizer has and group g of `state` lacks set to torch's
  // default for it.
  std::map<std::string, double> with_load_defaults(std::map<std::string, double> options,
                                                   const OptimizerState& state, size_t g) const;
  // Throws unless option `key` of g is a flag: 0 (false) or 1 (true).
  void check_flag(const ParamGroup& g, const char* key) const;

  // The named state tensors of a parameter, created on first use.
  std::map<std::string, Tensor>& state_for(const Tensor& p);

  std::string name_;
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  std::map<const TensorImpl*, std::map<std::string, Tensor>> state_;
  // The names a parameter's state may hold; if it holds any, it holds all the required
  // ones. A "step" is one value, any other state has the parameter's shape.
  std::vector<std::string> state_names_, required_state_;
};

}  // namespace kiln::optim
