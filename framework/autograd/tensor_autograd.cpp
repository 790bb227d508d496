// Tensor's autograd methods: they reach the graph (views refreshed, the engine run), so
// they live here rather than in core, which only holds the fields.
#include "autograd/node.h"
#include "autograd/views.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace kiln {

bool Tensor::requires_grad() const { return checked().requires_grad || grad_fn() != nullptr; }

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  TensorImpl& t = checked();
  refresh_view(t);
  return t.grad_fn;
}

void Tensor::zero_grad(bool set_to_none) const {
  TensorImpl& t = checked();
  if (!t.grad) return;
  if (set_to_none) {
    t.grad.reset();
  } else {
    Tensor(t.grad).zero_();
  }
}

Tensor& Tensor::retain_grad() {
  TensorImpl& t = checked();
  KILN_CHECK(requires_grad(), "retain_grad", "can't retain_grad on a tensor that doesn't require grad");
  if (t.grad_fn) t.grad_fn->retained_output = impl_;
  return *this;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  KILN_CHECK(requires_grad(), "backward",
             "tensor does not require grad and does not have a grad_fn");
  Tensor g = gradient;
  if (!g.defined()) {
    KILN_CHECK(numel() == 1, "backward",
               "grad can be implicitly created only for scalar outputs; got a tensor of shape ",
               shape_str(shape()), " (pass a gradient of that shape)");
    g = ones(shape(), TensorOptions(dtype()).device(device()));
  } else {
    KILN_CHECK(g.shape() == shape(), "backward", "gradient of shape ", shape_str(g.shape()),
               " for a tensor of shape ", shape_str(shape()));
  }
  run_backward({*this}, {g}, retain_graph);
}


}  // namespace kiln
