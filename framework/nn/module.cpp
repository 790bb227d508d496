#include "nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "core/generator.h"
#include "ops/ops.h"

namespace kiln::nn {
namespace {

// "kiln::transformer::Foo<kiln::Bar>" -> "Foo<kiln::Bar>", "f()::Local" -> "Local": the
// text after the last "::" that is outside template arguments and parentheses.
std::string strip_qualifiers(const std::string& name) {
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    const char c = name[i];
    if (c == '<' || c == '(') ++depth;
    else if ((c == '>' || c == ')') && depth > 0) --depth;
    else if (depth == 0 && c == ':' && name[i + 1] == ':') start = i + 2;
  }
  return name.substr(start);
}

std::string demangled_class_name(const std::type_info& type) {
  int status = 0;
  char* d = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string full = status == 0 && d ? d : type.name();
  std::free(d);
  return strip_qualifiers(full);
}

}  // namespace

std::string Module::type_name() const {
  return type_name_.empty() ? demangled_class_name(typeid(*this)) : type_name_;
}

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
             "' is already registered in ", type_name());
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  if (t.defined() && requires_grad) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return params_.back().second;
}

Tensor& Module::parameter_slot(const std::string& name) {
  for (auto& [n, t] : params_)
    if (n == name) return t;
  throw Error("[Module] " + type_name() + " has no parameter named '" + name + "'");
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
  apply([dtype](Module& m) { m.converted_to(dtype); });
}

// ---- clone

namespace {
using CloneMemo = std::map<const Module*, std::shared_ptr<Module>>;
// The clones of children made so far by the clone() in progress on this thread (keyed by
// original), so that a child reached twice in its tree is cloned once; null outside.
thread_local CloneMemo* t_clones = nullptr;

// Held by every clone(): a memo of its own (a clone() that a constructor calls inside
// another clone, TransformerEncoder(layer, n)'s, is a deep copy as anywhere else, not
// one of the outer tree's children), the outer one's put back at the end (returning
// or throwing). The outermost also puts the random generator back where it was: the
// fresh modules' initialisation draws numbers that their copied values then replace.
class CloneScope {
 public:
  CloneScope() : outer_(t_clones) {
    if (!outer_) rng_ = default_generator().get_state();
    t_clones = &memo_;
  }
  ~CloneScope() {
    t_clones = outer_;
    if (!outer_) default_generator().set_state(rng_);
  }
  CloneScope(const CloneScope&) = delete;
  CloneScope& operator=(const CloneScope&) = delete;

 private:
  CloneMemo* outer_;
  CloneMemo memo_;
  GeneratorState rng_;
};
}  // namespace

std::shared_ptr<Module> Module::make_fresh() const {
  const std::string name = type_name();
  KILN_FAIL("Module.clone", name, " cannot be cloned: derive it from nn::Cloneable<", name,
            "> (which default-constructs it) or override make_fresh() to build one with the same configuration");
}

std::shared_ptr<Module> Module::clone() const {
  CloneScope scope;
  return clone_in_scope();
}

std::shared_ptr<Module> Module::clone_in_scope() const {
  NoGradGuard no_grad;
  std::shared_ptr<Module> copy = make_fresh();
  KILN_CHECK(copy != nullptr, "Module.clone", "make_fresh() of ", type_name(), " returned null");
  copy->copy_state_from(*this);
  return copy;
}

std::shared_ptr<Module> Module::clone_once(const Module& child) {
  if (!t_clones) return child.clone();  // called outside a clone(): nothing to share
  if (auto it = t_clones->find(&child); it != t_clones->end()) return it->second;
  std::shared_ptr<Module> copy = child.clone_in_scope();
  (*t_clones)[&child] = copy;
  return copy;
}

namespace {
// dst's own tensors (params or buffers) get deep copies of src's, matched by name.
void copy_tensors(const char* what, const std::string& type, NamedTensors& dst, const NamedTensors& src) {
  auto names = [](const NamedTensors& list) {
    std::string s;
    for (const auto& [n, t] : list) s += (s.empty() ? "" : ", ") + n + (t.defined() ? "" : " (undefined)");
    return "[" + s + "]";
  };
  bool same = dst.size() == src.size();
  for (size_t i = 0; same && i < dst.size(); ++i)
    same = dst[i].first == src[i].first && dst[i].second.defined() == src[i].second.defined();
  KILN_CHECK(same, "Module.clone", "make_fresh() of ", type, " built ", what, " ", names(dst), ", the original has ",
             names(src));
  for (size_t i = 0; i < dst.size(); ++i) {
    const Tensor& s = src[i].second;
    if (!s.defined()) continue;
    Tensor& d = dst[i].second;
    set_data(d, s.detach().clone());
    d.requires_grad_(s.requires_grad());
    if (s.grad().defined()) d.set_grad(s.grad().detach().clone());
  }
}
}  // namespace

void Module::copy_state_from(const Module& src) {
  const std::string type = type_name();
  KILN_CHECK(type == src.type_name(), "Module.clone", "make_fresh() of ", src.type_name(), " built a ", type);
  copy_tensors("parameters", type, params_, src.params_);
  copy_tensors("buffers", type, buffers_, src.buffers_);
  training_ = src.training_;
  KILN_CHECK(children_.size() == src.children_.size(), "Module.clone", "make_fresh() of ", type, " built ",
             children_.size(), " submodules, the original has ", src.children_.size());
  for (size_t i = 0; i < children_.size(); ++i) {
    auto& [name, child] = children_[i];
    const auto& [src_name, src_child] = src.children_[i];
    KILN_CHECK(name == src_name && (child == nullptr) == (src_child == nullptr), "Module.clone", "make_fresh() of ",
               type, " built submodule '", name, "' where the original has '", src_name, "'");
    // Also when the child is already a clone (containers clone their children): the
    // parent's constructor may have changed it since (nn.Transformer re-initialises).
    if (child) child->copy_state_from(*src_child);
  }
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
    os << "Error(s) in loading state_dict for " << type_name() << ":";
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
    // Any conversion torch's copy_ makes, except floating values into an integer or bool
    // tensor: those would truncate silently (and a NaN has no integer value).
    KILN_CHECK(is_floating(dst.dtype()) || !is_floating(src.dtype()), "load_state_dict", "dtype mismatch for ", n,
               ": checkpoint has ", dtype_name(src.dtype()), ", the model has ", dtype_name(dst.dtype()),
               " (floating values do not convert to an integer or bool tensor)");
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
    d.copy_(it->second);  // converts the dtype, as torch's copy_
  }
  return r;
}

void Module::str_into(std::string& out, int indent) const {
  out += type_name() + "(";
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
