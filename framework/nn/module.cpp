#include "nn/module.h"

#include <set>
#include <sstream>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln::nn {

void set_data(const Tensor& dst, const Tensor& src) {
  TensorImpl& d = *dst.impl();
  const TensorImpl& s = *src.impl();
  d.storage = s.storage;
  d.shape = s.shape;
  d.strides = s.strides;
  d.offset = s.offset;
  d.dtype = s.dtype;
  d.grad.reset();
}

void Module::check_new_name(const std::string& name) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, "register", "invalid name '", name,
             "' (names must be non-empty and contain no '.')");
  auto taken = [&](const auto& list) {
    for (const auto& [n, _] : list)
      if (n == name) return true;
    return false;
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "register", "'", name,
             "' is already registered in ", type_name_);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  if (t.defined() && requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  buffers_.emplace_back(name, t);
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  for (auto& [n, c] : children_) {
    if (n == name) {
      c = std::move(m);
      return;
    }
  }
  check_new_name(name);
  children_.emplace_back(name, std::move(m));
}

namespace {
// Own tensors first, then each child's under "<child>.": PyTorch's order. With `seen`,
// a tensor reached a second time (shared between submodules) is skipped, as in
// torch's named_parameters(); state_dict keeps every name.
void collect(const Module& m, const std::string& prefix, bool recurse, NamedTensors& out,
             const std::function<const NamedTensors&(const Module&)>& own, std::set<const TensorImpl*>* seen) {
  for (const auto& [n, t] : own(m))
    if (t.defined() && (!seen || seen->insert(t.impl()).second)) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, c] : m.named_children())
    if (c) collect(*c, prefix + n + ".", recurse, out, own, seen);
}
const NamedTensors& params_of(const Module& m) { return m.own_parameters(); }
const NamedTensors& buffers_of(const Module& m) { return m.own_buffers(); }
}  // namespace

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  collect(*this, "", recurse, out, params_of, &seen);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  collect(*this, "", recurse, out, buffers_of, &seen);
  return out;
}

NamedTensors Module::state_tensors() const {
  NamedTensors out;
  collect(*this, "", true, out, params_of, nullptr);
  collect(*this, "", true, out, buffers_of, nullptr);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [_, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // The root as it is held; a module not owned by a shared_ptr (on the stack, a member)
  // gets a non-owning handle rather than std::bad_weak_ptr.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(std::shared_ptr<Module>(), this);
  out.emplace_back("", std::move(self));
  std::set<const Module*> seen{this};
  // Pre-order, children in registration order.
  std::function<void(const std::string&, Module&)> walk = [&](const std::string& prefix, Module& m) {
    for (auto& [n, c] : m.children_) {
      if (!c || !seen.insert(c.get()).second) continue;  // a shared submodule once, as torch
      std::string name = prefix.empty() ? n : prefix + "." + n;
      out.emplace_back(name, c);
      walk(name, *c);
    }
  };
  walk("", *this);
  return out;
}

int64_t Module::num_parameters(bool only_trainable) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!only_trainable || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [_, c] : children_)
    if (c) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) p.zero_grad(set_to_none);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [_, c] : children_)
    if (c) c->apply(fn);
  fn(*this);
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module.to", "modules convert to floating dtypes only, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [_, t] : named_parameters())
    if (is_floating(t.dtype())) set_data(t, t.detach().to(dtype));
  for (auto& [_, t] : named_buffers())
    if (is_floating(t.dtype())) set_data(t, t.detach().to(dtype));
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [_, t] : named_parameters()) set_data(t, t.detach().to(device));
  for (auto& [_, t] : named_buffers()) set_data(t, t.detach().to(device));
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, t] : state_tensors()) out[n] = t.detach();
  return out;
}

Module::LoadResult Module::check_state_dict(const StateDict& state, bool strict) const {
  LoadResult r;
  NamedTensors mine = state_tensors();
  std::map<std::string, Tensor> by_name(mine.begin(), mine.end());
  for (auto& [n, _] : mine)
    if (!state.count(n)) r.missing_keys.push_back(n);
  for (auto& [n, _] : state)
    if (!by_name.count(n)) r.unexpected_keys.push_back(n);
  if (strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty())) {
    std::ostringstream os;
    os << "Error(s) in loading state_dict for " << type_name_ << ":";
    if (!r.missing_keys.empty()) {
      os << " missing keys:";
      for (auto& k : r.missing_keys) os << " \"" << k << "\"";
      os << ".";
    }
    if (!r.unexpected_keys.empty()) {
      os << " unexpected keys:";
      for (auto& k : r.unexpected_keys) os << " \"" << k << "\"";
      os << ".";
    }
    KILN_FAIL("load_state_dict", os.str());
  }
  for (auto& [n, dst] : mine) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    const Tensor& src = it->second;
    KILN_CHECK(src.defined(), "load_state_dict", "tensor for ", n, " is undefined");
    KILN_CHECK(src.shape() == dst.shape(), "load_state_dict", "size mismatch for ", n, ": copying a param with shape ",
               shape_str(src.shape()), " from checkpoint, the shape in current model is ", shape_str(dst.shape()));
    KILN_CHECK(src.dtype() == dst.dtype(), "load_state_dict", "dtype mismatch for ", n, ": checkpoint has ",
               dtype_name(src.dtype()), ", the model has ", dtype_name(dst.dtype()));
  }
  return r;
}

Module::LoadResult Module::load_state_dict(const StateDict& state, bool strict) {
  // Every key, shape and dtype is checked before anything is copied: never half-load.
  LoadResult r = check_state_dict(state, strict);
  NoGradGuard no_grad;
  for (auto& [n, dst] : state_tensors()) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    Tensor d = dst;
    d.copy_(it->second);
  }
  return r;
}

void Module::str_into(std::string& out, int indent) const {
  out += type_name_ + "(";
  std::string extra = extra_repr();
  if (children_.empty()) {
    out += extra + ")";
    return;
  }
  std::string pad(indent + 2, ' ');
  out += "\n";
  if (!extra.empty()) out += pad + extra + "\n";
  for (auto& [n, c] : children_) {
    out += pad + "(" + n + "): ";
    if (c) c->str_into(out, indent + 2);
    else out += "None";
    out += "\n";
  }
  out += std::string(indent, ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace kiln::nn
