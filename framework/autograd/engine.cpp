// The backward pass: count how many gradients each node waits for, then run nodes whose
// count reached zero. Iterative throughout, so the depth of the graph is not limited by
// the stack.
#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace kiln {
namespace {

std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (Node* r : roots) {
    if (deps.emplace(r, 0).second) stack.push_back(r);
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& nx : n->next) {
      if (!nx) continue;
      auto [it, inserted] = deps.emplace(nx.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(nx.get());
    }
  }
  return deps;
}

// buffers[n] += g. In place when the engine alone holds the buffer (the backward pass
// runs without recording, so nothing can observe it), which saves a full-size tensor.
void accumulate(std::unordered_map<Node*, Tensor>& buffers, Node* n, const Tensor& g) {
  auto [it, inserted] = buffers.emplace(n, g);
  if (inserted) return;
  Tensor& acc = it->second;
  if (is_exclusive(acc) && acc.shape() == g.shape() && acc.dtype() == g.dtype() && acc.device() == g.device()) {
    acc.add_(g);
  } else {
    acc = add(acc, g);
  }
}

// The gradients already gathered for n's inputs that n may add into in place: those
// the engine alone holds. (Map values do not move while the node runs.)
std::vector<Tensor*> accumulators(std::unordered_map<Node*, Tensor>& buffers, const Node& n) {
  std::vector<Tensor*> acc(n.next.size(), nullptr);
  for (size_t i = 0; i < n.next.size(); ++i) {
    if (!n.next[i]) continue;
    auto it = buffers.find(n.next[i].get());
    if (it != buffers.end() && is_exclusive(it->second)) acc[i] = &it->second;
  }
  return acc;
}

// The callbacks queued during the backward pass running on this thread (null when none
// runs); a backward started inside one (a hook's own backward) has its own list.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
thread_local uint64_t t_pass_id = 0;
std::atomic<uint64_t> g_next_pass_id{1};

class CallbackScope {
 public:
  CallbackScope() : prev_(t_callbacks), prev_id_(t_pass_id) {
    t_callbacks = &list_;
    t_pass_id = g_next_pass_id.fetch_add(1);
  }
  ~CallbackScope() {
    t_callbacks = prev_;
    t_pass_id = prev_id_;
  }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  // Runs the queued callbacks in order, those they queue too.
  void run() {
    for (size_t i = 0; i < list_.size(); ++i) {
      std::function<void()> fn = std::move(list_[i]);
      fn();
    }
    list_.clear();
  }

 private:
  std::vector<std::function<void()>> list_;
  std::vector<std::function<void()>>* prev_;
  uint64_t prev_id_;
};

}  // namespace

void queue_backward_callback(std::function<void()> fn) {
  KILN_CHECK(t_callbacks != nullptr, "queue_backward_callback", "no backward pass is running on this thread");
  KILN_CHECK(fn != nullptr, "queue_backward_callback", "the callback is an empty function");
  t_callbacks->push_back(std::move(fn));
}

uint64_t backward_pass_id() { return t_pass_id; }

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph) {
  std::vector<Node*> root_nodes;
  std::vector<std::shared_ptr<Node>> keep_alive;  // roots stay valid during the pass
  std::unordered_map<Node*, Tensor> buffers;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KILN_CHECK(r.requires_grad(), "backward",
               "element ", i, " of tensors does not require grad and does not have a grad_fn");
    std::shared_ptr<Node> node = gradient_edge(r);
    keep_alive.push_back(node);
    root_nodes.push_back(node.get());
    accumulate(buffers, node.get(), grads[i]);
  }

  NoGradGuard no_grad;
  CallbackScope callbacks;
  std::unordered_map<Node*, int> deps = count_dependencies(root_nodes);
  std::vector<Node*> ready;
  for (Node* r : root_nodes)
    if (deps[r] == 0) ready.push_back(r);
  // A root reachable from another root waits for it; keep each root only once.
  std::sort(ready.begin(), ready.end());
  ready.erase(std::unique(ready.begin(), ready.end()), ready.end());

  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    TensorList input_grads;
    auto buf = buffers.find(n);
    if (buf != buffers.end()) {  // a node no gradient reached still releases its inputs
      Tensor g = std::move(buf->second);
      buffers.erase(buf);
      if (auto out = n->retained_output.lock()) accumulate_grad(*out, g);
      input_grads = n->apply_accumulating(g, accumulators(buffers, *n));
    }
    if (!retain_graph) n->release();
    for (size_t i = 0; i < n->next.size(); ++i) {
      Node* nx = n->next[i].get();
      if (!nx) continue;
      if (i < input_grads.size() && input_grads[i].defined()) accumulate(buffers, nx, input_grads[i]);
      if (--deps[nx] == 0) ready.push_back(nx);
    }
  }
  callbacks.run();
}

}  // namespace kiln
