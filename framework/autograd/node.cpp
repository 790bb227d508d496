#include "autograd/node.h"

#include <atomic>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln {

Node::~Node() {
  // Destroying a long chain recursively (each node dropping the last reference to the
  // next) would overflow the stack at ~100k ops. Nodes whose last reference we hold are
  // moved to a per-thread list and destroyed by the outermost destructor in a loop.
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (auto& n : next)
    if (n && n.use_count() == 1) pending.push_back(std::move(n));
  next.clear();
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // may push more nodes onto `pending`
  }
  draining = false;
}

bool is_exclusive(const Tensor& t) {
  return t.is_contiguous() && t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 &&
         t.offset() == 0 && t.impl()->storage->nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
}

void accumulate_grad(TensorImpl& owner, const Tensor& g) {
  if (owner.grad) {
    Tensor acc(owner.grad);
    acc.add_(g);
    return;
  }
  // Keep g itself only if nothing else can see its memory and it is exactly a contiguous
  // tensor of the owner's dtype: the incoming buffer may be shared with other nodes, or be
  // a slice of a larger one (cat's backward) that the owner must not keep alive.
  const bool exclusive = g.dtype() == owner.dtype && is_exclusive(g);
  owner.grad = exclusive ? g.impl_ptr() : g.to(owner.dtype).clone().impl_ptr();
}

TensorList AccumulateGrad::apply(const Tensor& grad_output) {
  TensorImpl& leaf = *leaf_;
  KILN_CHECK(grad_output.shape() == leaf.shape, "backward", "gradient of shape ",
             shape_str(grad_output.shape()), " for a leaf of shape ", shape_str(leaf.shape));
  accumulate_grad(leaf, grad_output);
  if (!leaf.post_accumulate_grad_hooks.empty()) {
    // A copy: a hook may remove itself (or register another, which waits for the next pass).
    auto hooks = leaf.post_accumulate_grad_hooks;
    const Tensor tensor(leaf_);
    for (auto& [id, hook] : hooks) hook(tensor);
  }
  return {};
}

HookHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  KILN_CHECK(defined(), "register_post_accumulate_grad_hook", "the tensor is undefined");
  KILN_CHECK(is_leaf(), "register_post_accumulate_grad_hook",
             "post accumulate grad hooks cannot be registered on non-leaf tensors");
  KILN_CHECK(requires_grad(), "register_post_accumulate_grad_hook",
             "cannot register a hook on a tensor that doesn't require gradient");
  KILN_CHECK(hook != nullptr, "register_post_accumulate_grad_hook", "the hook is an empty function");
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id.fetch_add(1);
  impl()->post_accumulate_grad_hooks.emplace_back(id, std::move(hook));
  return HookHandle(impl_ptr(), id);
}

void HookHandle::remove() {
  std::shared_ptr<TensorImpl> impl = impl_.lock();
  impl_.reset();
  if (!impl) return;
  auto& hooks = impl->post_accumulate_grad_hooks;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    if (it->first == id_) {
      hooks.erase(it);
      return;
    }
  }
}

namespace {

// t's shape, strides, offset and dtype over no storage: what a SavedTensor that does not
// keep t's memory remembers of it.
Tensor geometry_of(const Tensor& t) {
  auto geometry = std::make_shared<TensorImpl>();
  geometry->shape = t.shape();
  geometry->strides = t.strides();
  geometry->offset = t.offset();
  geometry->dtype = t.dtype();
  return Tensor(std::move(geometry));
}

}  // namespace

SavedTensor::SavedTensor(const Tensor& t, const char* op) : version_(t.defined() ? t.version() : 0), op_(op) {
  if (!t.defined()) return;
  if ((hooks_ = detail::current_saved_hooks())) {
    NoGradGuard no_grad;  // what pack computes is no part of the graph
    packed_ = std::make_shared<const std::any>(hooks_->pack(t.detach()));
    tensor_ = geometry_of(t);
    return;
  }
  recompute_ = t.impl()->storage->recompute();
  if (!recompute_) {
    tensor_ = t.detach();
    return;
  }
  storage_ = t.impl()->storage;
  tensor_ = geometry_of(t);
}

Tensor SavedTensor::get_packed() const {
  Tensor t = hooks_->unpack(*packed_);
  KILN_CHECK(t.defined() && t.shape() == tensor_.shape() && t.dtype() == tensor_.dtype(), op_,
             "the unpack hook of SavedTensorsHooks returned ",
             t.defined() ? std::string(dtype_name(t.dtype())) + " tensor of shape " + shape_str(t.shape())
                         : std::string("an undefined tensor"),
             " for a saved ", dtype_name(tensor_.dtype()), " tensor of shape ", shape_str(tensor_.shape()));
  return t.detach();
}

Tensor SavedTensor::get() const {
  if (!tensor_.defined()) return tensor_;
  if (hooks_) return get_packed();
  if (recompute_) {
    std::shared_ptr<Storage> storage = storage_.lock();
    const bool rebuilt = storage == nullptr;
    if (rebuilt) {
      const Tensor fresh = recompute_->rebuild();
      storage = fresh.impl()->storage;
      KILN_CHECK(storage->nbytes() == static_cast<size_t>(fresh.numel()) * fresh.element_size(), op_,
                 "internal: a recomputed saved tensor does not fill its storage");
    }
    auto impl = std::make_shared<TensorImpl>(*tensor_.impl());
    impl->storage = std::move(storage);
    Tensor t(std::move(impl));
    if (!rebuilt) check_version(t);
    return t;
  }
  check_version(tensor_);
  return tensor_;
}

void SavedTensor::check_version(const Tensor& t) const {
  KILN_CHECK(t.version() == version_, op_,
             "one of the variables needed for gradient computation has been modified by an inplace "
             "operation: ",
             dtype_name(t.dtype()), " tensor of shape ", shape_str(t.shape()), ", is at version ", t.version(),
             "; expected version ", version_, " instead");
}

void check_not_released(const char* name, bool released) {
  KILN_CHECK(!released, "backward",
             "trying to backward through the graph a second time (through ", name,
             "); its saved tensors were freed after the first backward. Pass retain_graph=true "
             "to the first backward if you need to backward twice");
}

TensorList FunctionNode::apply(const Tensor& grad_output) {
  check_not_released(name(), released_);
  return fn_(grad_output);
}

void FunctionNode::release() {
  fn_ = nullptr;
  released_ = true;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  TensorImpl& impl = *t.impl();
  if (impl.grad_fn) return impl.grad_fn;
  std::shared_ptr<Node> acc = impl.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = acc;
  }
  return acc;
}

void own_result(const Tensor& result, const std::vector<Tensor>& inputs) {
  TensorImpl& r = *result.impl();
  for (const Tensor& in : inputs)
    if (in.impl() == &r) return;
  r.view_base.reset();
  r.view_no_grad = false;
}

Tensor record(const char* op, Tensor result, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) {
    own_result(result, inputs);
    return result;
  }
  return record_node(std::move(result), inputs, std::make_shared<FunctionNode>(op, std::move(fn)));
}

Tensor record_node(Tensor result, const std::vector<Tensor>& inputs, std::shared_ptr<Node> node) {
  if (!any_requires_grad(inputs)) {
    own_result(result, inputs);
    return result;
  }
  node->next.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next.push_back(gradient_edge(in));
  result.impl()->grad_fn = std::move(node);
  own_result(result, inputs);  // a view op marks its result after this
  return result;
}

}  // namespace kiln
