#pragma once
// Module: the base of every layer. Parameters, buffers and submodules are registered by
// name, so that named_parameters() yields PyTorch's dotted names
// ("layers.0.linear1.weight") and a state_dict saved by PyTorch maps onto Kiln's.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../autograd/grad_mode.h"
#include "../core/tensor.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StateDict = std::map<std::string, Tensor>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  // A user module needs no name: `struct MyNet : nn::Module { MyNet() { … } };` prints as
  // "MyNet" (its demangled class name without namespaces). Passing a name overrides it.
  Module() = default;
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The class name shown when printing ("Linear"): the name given to the constructor, or
  // the dynamic type's name, looked up when asked (in a base constructor typeid would
  // still say "Module").
  std::string type_name() const;

  // A deep copy, as libtorch's Cloneable::clone and Python's copy.deepcopy: new parameters
  // and buffers with the same values, dtype, device and requires_grad (and a copy of any
  // gradient), the same training flags, children cloned; a submodule shared inside this
  // one is cloned once and stays shared in the copy. The copy is built by make_fresh()
  // (same type, same configuration) and then given this module's state; the random
  // generator is left as it was (as deepcopy draws nothing). Throws for a module type
  // that cannot say how to build itself (see nn::Cloneable below).
  std::shared_ptr<Module> clone() const;

  // ---- the tree
  // A tensor shared by several submodules is listed once, under its first name (as torch).
  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module's own parameters and buffers (registration order, undefined ones included).
  const NamedTensors& own_parameters() const { return params_; }
  const NamedTensors& own_buffers() const { return buffers_; }
  // Every module below and including this one, with dotted names ("" for this one);
  // a shared submodule once. The entries share ownership of the submodules; the root's
  // entry owns nothing when this module is not held by a shared_ptr.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t num_parameters(bool only_trainable = false) const;

  // ---- modes and bulk operations
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Whether forward should act as in training (dropout on): the training flag, unless an
  // InferenceMode guard is alive on this thread. Every training-dependent behaviour reads
  // this, never is_training(), so that inference needs no write to the shared flag.
  bool training_effective() const { return training_ && !InferenceMode::is_enabled(); }
  void zero_grad(bool set_to_none = true);
  // fn(module) on every submodule (children first) and then this one, like torch's apply.
  void apply(const std::function<void(Module&)>& fn);
  // Converts floating parameters and buffers in place (handles stay valid).
  void to(DType dtype);
  // Moves parameters and buffers to a device in place (handles stay valid).
  void to(Device device);

  // ---- state
  // Parameters and buffers by dotted name (tensors share storage with the module); a
  // shared tensor appears under each of its names, as in torch.
  StateDict state_dict() const;
  struct LoadResult {
    std::vector<std::string> missing_keys;
    std::vector<std::string> unexpected_keys;
  };
  // Copies values in. strict: any missing or unexpected key is an error listing them all.
  // A shape mismatch is always an error naming the key and both shapes. Values convert to
  // the model's dtype as torch's copy_ does (a float64 file loads into a float32 model);
  // only a conversion copy_ refuses (say floating values into a bool buffer) is an error.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);
  // The checks of load_state_dict without copying anything (throws as it would).
  LoadResult check_state_dict(const StateDict& state, bool strict = true) const;

  // The registered parameter `name` (throws when there is none), to replace its tensor:
  // by an undefined one when a layer's weight moves into quantized blocks, or by another
  // module's to tie the two (a language model's head and its embeddings).
  Tensor& parameter_slot(const std::string& name);

  // ---- printing, as PyTorch prints a model
  virtual std::string extra_repr() const { return ""; }
  std::string str() const;

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Replaces a registered submodule (e.g. the optional final norm).
  void add_child(const std::string& name, std::shared_ptr<Module> m);

  // For clone(): a new module of this type and configuration, freshly built (its values
  // are overwritten by clone). Built-in modules build themselves from their options;
  // nn::Cloneable<Derived> default-constructs Derived. A user module whose constructor
  // takes arguments overrides it: `return std::make_shared<MyBlock>(d_model);`.
  virtual std::shared_ptr<Module> make_fresh() const;
  // Called on every module by to(DType) after its tensors were converted: a module whose
  // buffer is a function of its configuration (a positional table) recomputes it at the
  // new precision instead of keeping a rounded copy.
  virtual void converted_to(DType) {}
  // clone() of a child from make_fresh(), as the child's type (null for null): a child
  // reached twice in the tree being cloned is cloned once.
  template <class M>
  static std::shared_ptr<M> clone_child(const std::shared_ptr<M>& child) {
    if (!child) return nullptr;
    std::shared_ptr<M> copy = std::dynamic_pointer_cast<M>(clone_once(*child));
    KILN_CHECK(copy != nullptr, "Module.clone", "make_fresh() of ", child->type_name(),
               " built a module of another type");
    return copy;
  }

 private:
  void check_new_name(const std::string& name) const;
  // clone()'s second half: this module's (and its children's) values, flags and training
  // mode from `src`, matched by name; a different layout is an error naming the key.
  void copy_state_from(const Module& src);
  // clone() without opening a scope: make_fresh() and copy_state_from(), with the memo of
  // the clone() in progress.
  std::shared_ptr<Module> clone_in_scope() const;
  // clone_child's untyped half: child's clone, made once per clone() in progress.
  static std::shared_ptr<Module> clone_once(const Module& child);
  // Every parameter and buffer under every name (no de-duplication): what state_dict holds.
  NamedTensors state_tensors() const;
  void str_into(std::string& out, int indent) const;

  std::string type_name_;  // empty: the dynamic type's name
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

// ---- user modules: clone() and module(args…) with one line
// `struct MyNet : nn::Cloneable<MyNet> { MyNet() { … } Tensor forward(…); };` (or
// Cloneable<MyNet, nn::UnaryModule>) gives
//  - net(args…): calls net.forward(args…), whatever forward's arguments are (resolved at
//    compile time, so forward need not be virtual);
//  - net.clone() -> std::shared_ptr<MyNet>: a deep copy; make_fresh() default-constructs
//    MyNet (a module without a default constructor overrides make_fresh()).
template <class Derived, class Base = Module>
class Cloneable : public Base {
 public:
  using Base::Base;

  std::shared_ptr<Derived> clone() const {
    std::shared_ptr<Derived> copy = std::dynamic_pointer_cast<Derived>(Module::clone());
    KILN_CHECK(copy != nullptr, "Module.clone", "make_fresh() of ", this->type_name(),
               " built a module of another type");
    return copy;
  }

  template <class... Args>
  decltype(auto) operator()(Args&&... args) {
    return static_cast<Derived&>(*this).forward(std::forward<Args>(args)...);
  }

 protected:
  std::shared_ptr<Module> make_fresh() const override {
    if constexpr (std::is_default_constructible_v<Derived>) {
      return std::make_shared<Derived>();
    } else {
      return Module::make_fresh();  // throws, saying what to do
    }
  }
};

// Puts a module in training or eval mode for a scope and restores its mode after:
//   { nn::TrainingModeGuard eval(model, false); … }
// It writes the module's flags: for inference on a model other threads may be using, take
// kiln::InferenceMode instead, which changes nothing shared.
class TrainingModeGuard {
 public:
  TrainingModeGuard(Module& m, bool training) : m_(m), was_training_(m.is_training()) { m_.train(training); }
  ~TrainingModeGuard() { m_.train(was_training_); }
  TrainingModeGuard(const TrainingModeGuard&) = delete;
  TrainingModeGuard& operator=(const TrainingModeGuard&) = delete;

 private:
  Module& m_;
  bool was_training_;
};

// Replaces the contents of `dst`'s TensorImpl with `src`'s data (shape, dtype, device),
// keeping dst's identity and autograd flags: what `param.data = src` does in PyTorch.
void set_data(const Tensor& dst, const Tensor& src);

}  // namespace kiln::nn
