#pragma once
// The recorded graph. Each op result that requires grad points to its Node; a Node
// points to the Nodes of its inputs (`next`), and a leaf's Node is an AccumulateGrad.
// Edges point only backwards (towards the inputs) and saved tensors are detached, so
// the graph holds no shared_ptr cycle and is freed with the last result that uses it.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "recompute.h"
#include "saved_hooks.h"

namespace kiln {

using TensorList = std::vector<Tensor>;

class Node {
 public:
  explicit Node(const char* name) : name_(name) {}
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const char* name() const { return name_; }
  // One entry per input of the op; null where that input needs no gradient.
  std::vector<std::shared_ptr<Node>> next;
  // Set by Tensor::retain_grad(): the output whose .grad() keeps what reaches this node.
  std::weak_ptr<TensorImpl> retained_output;

  // Gradients of the inputs (one per `next` entry; undefined where not needed) from
  // the gradient of the output.
  virtual TensorList apply(const Tensor& grad_output) = 0;
  // apply() with the gradients already gathered for the inputs: acc[i], when not null,
  // is input i's, held by the engine alone (contiguous, nothing else sees it). A node
  // may add its gradient for input i into *acc[i] in place and return an undefined
  // tensor for it, saving a new tensor and a sum: a slice adds into its window (so the
  // q, k, v chunks of one projection share one buffer), linear's GEMM accumulates
  // (BLAS beta = 1). The default ignores acc.
  virtual TensorList apply_accumulating(const Tensor& grad_output, const std::vector<Tensor*>& /*acc*/) {
    return apply(grad_output);
  }
  // Frees what backward needed (saved tensors); a later apply() throws.
  virtual void release() {}

 private:
  const char* name_;
};

// True when nothing but this handle sees t's memory, all of it: t may then be changed
// in place or kept, as a gradient buffer the engine owns.
bool is_exclusive(const Tensor& t);

// Throws the "backward through the graph a second time" error for node `name` when its
// saved tensors were released.
void check_not_released(const char* name, bool released);

// owner.grad += g, or owner.grad = g (or a private copy of it) when there is none yet.
void accumulate_grad(TensorImpl& owner, const Tensor& g);

// Sums incoming gradients into a leaf's .grad().
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf)
      : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}
  TensorList apply(const Tensor& grad_output) override;
  TensorImpl* leaf() const { return leaf_.get(); }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// A tensor kept for backward: detached (no history, so no cycles), with the version it
// had when saved so that an in-place change before backward is caught. A tensor whose
// storage carries a recipe (autograd/recompute.h) is kept as the recipe and a weak
// reference: get() returns it while something else keeps it alive, and the same bits
// written again by the recipe once it is gone. Under a SavedTensorsHooks guard
// (autograd/saved_hooks.h) it is kept as what the guard's pack returned, and get() calls
// its unpack.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  // Throws torch's "[op] one of the variables needed for gradient computation has been
  // modified by an inplace operation: float32 tensor of shape (2, 3), is at version 1;
  // expected version 0 instead" if it was changed since.
  Tensor get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  void check_version(const Tensor& t) const;

  Tensor get_packed() const;

  Tensor tensor_;  // the tensor; kept by recipe or hooks: its geometry only, over no storage
  std::weak_ptr<Storage> storage_;                // kept by recipe: the storage while alive
  std::shared_ptr<const Recompute> recompute_;   // kept by recipe: how to write it again
  std::shared_ptr<const detail::SavedHooksPair> hooks_;  // kept by hooks: whose unpack
  std::shared_ptr<const std::any> packed_;               // kept by hooks: what pack returned
  uint64_t version_ = 0;
  const char* op_ = "";
};

using BackwardFn = std::function<TensorList(const Tensor& grad_output)>;

// A node whose backward is a closure; what the closure captures is its saved state.
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : Node(name), fn_(std::move(fn)) {}
  TensorList apply(const Tensor& grad_output) override;
  void release() override;

 private:
  BackwardFn fn_;
  bool released_ = false;
};

// True when grad mode is on and any of the inputs requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `result` an op's own tensor: an op that builds its result as a view of its own
// temporaries (under its NoGradGuard or not) returns no view of anything the caller
// holds, so the result carries no view record (views.h). Does nothing when `result` is
// one of `inputs` (an op that returned its input itself).
void own_result(const Tensor& result, const std::vector<Tensor>& inputs);

// Makes `result` the output of a node named `op` over `inputs` with backward `fn`, when
// recording is on and some input requires grad; otherwise returns `result` as the op's
// own tensor (own_result).
// fn returns one gradient per input (undefined tensors for inputs without one).
Tensor record(const char* op, Tensor result, const std::vector<Tensor>& inputs, BackwardFn fn);
// The same with a node of the op's own class (its edges to `inputs` are set here).
Tensor record_node(Tensor result, const std::vector<Tensor>& inputs, std::shared_ptr<Node> node);

// The node that receives gradients for `t`: its grad_fn, or its leaf accumulator.
std::shared_ptr<Node> gradient_edge(const Tensor& t);

// Runs backward from `roots` with the matching `grads`.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

// torch's Variable._execution_engine.queue_callback: fn runs once the backward pass in
// progress on this thread has run its last node, before backward() returns (callbacks in
// the order queued; one may queue another). Only while a backward pass runs (from a
// node or a hook): "[queue_backward_callback] no backward pass is running on this
// thread" otherwise. An exception from fn comes out of backward().
void queue_backward_callback(std::function<void()> fn);
// A number for the backward pass running on this thread, different for every pass of the
// process (0 when none runs): tells a hook whether an earlier call of it saw the same pass.
uint64_t backward_pass_id();

}  // namespace kiln
