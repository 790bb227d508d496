#include "autograd/views.h"

#include "autograd/grad_mode.h"
#include "backend/backend.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {

// Where a view sits in its base: the base's layout over its storage and the view's,
// both in elements of the same storage. A gradient buffer laid out like the base holds
// the view's window at the same place.
struct Window {
  Shape base_shape;
  Strides base_strides;
  int64_t base_offset;
  size_t storage_bytes;
  Shape shape;
  Strides strides;
  int64_t offset;
  DType dtype;

  // A tensor of the base's shape, strides and offset over fresh storage (zero-filled if
  // asked); usually just a contiguous tensor of the base's shape.
  Tensor new_base(Device device, bool zero) const {
    const size_t esize = dtype_size(dtype);
    const bool plain = base_offset == 0 && storage_bytes == static_cast<size_t>(shape_numel(base_shape)) * esize &&
                       base_strides == contiguous_strides(base_shape);
    TensorOptions opts = TensorOptions(dtype).device(device);
    if (plain) return zero ? zeros(base_shape, opts) : Tensor::empty(base_shape, opts);
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = std::make_shared<Storage>(storage_bytes, device);
    impl->shape = base_shape;
    impl->strides = base_strides;
    impl->offset = base_offset;
    impl->dtype = dtype;
    Tensor t(std::move(impl));
    if (zero) {
      const auto n = static_cast<int64_t>(storage_bytes / esize);
      backend_for(device).fill(detail::make_view(t, {n}, {1}, 0), 0.0);
    }
    return t;
  }
  // The view's window in a tensor made by new_base.
  Tensor in(const Tensor& base_like) const { return detail::make_view(base_like, shape, strides, offset); }
};

Window window_of(const TensorImpl& view) {
  const TensorImpl& b = *view.view_base;
  return {b.shape, b.strides, b.offset, b.storage->nbytes(), view.shape, view.strides, view.offset, b.dtype};
}

// A view's history as a window of its base's (torch's AsStridedBackward):
// g (view's shape) -> the base's shape, g in the window and zeros elsewhere.
class ViewOfBase final : public Node {
 public:
  explicit ViewOfBase(Window w) : Node("as_strided"), w_(std::move(w)) {}
  TensorList apply(const Tensor& g) override {
    Tensor b = w_.new_base(g.device(), /*zero=*/true);
    backend_for(g.device()).copy(g, w_.in(b));
    return {b};
  }

 private:
  Window w_;
};

// The base's history after an in-place op on one of its views (torch's CopySlices):
// g (base's shape) -> {the base's old value: g outside the window, the op's gradient of
// the view's old value inside it; then the op's operands' gradients}.
class CopySlices final : public Node {
 public:
  CopySlices(const char* op, Window w, BackwardFn fn) : Node(op), w_(std::move(w)), fn_(std::move(fn)) {}
  TensorList apply(const Tensor& g) override {
    check_not_released(name(), released_);
    Backend& be = backend_for(g.device());
    Tensor out = w_.new_base(g.device(), /*zero=*/false);
    be.copy(g, out);
    Tensor window = w_.in(out);
    TensorList r = fn_(window.clone());  // the view's new value's gradient, before it is overwritten
    if (!r.empty() && r[0].defined()) {
      be.copy(r[0].shape() == window.shape() ? r[0] : r[0].expand(window.shape()), window);
    } else {
      be.fill(window, 0.0);
    }
    TensorList grads{out};
    for (size_t i = 1; i < next.size(); ++i) grads.push_back(i < r.size() ? r[i] : Tensor());
    return grads;
  }
  void release() override {
    fn_ = nullptr;
    released_ = true;
  }

 private:
  Window w_;
  BackwardFn fn_;
  bool released_ = false;
};

}  // namespace

void mark_view(const Tensor& view, const Tensor& of) {
  TensorImpl& v = *view.impl();
  const TensorImpl& src = *of.impl();
  if (&v == &src) return;  // the op returned its input itself
  // A view made under NoGradGuard (or of one) keeps only that fact, not its base: its
  // base's history never follows it (rebasing it is an error), and backward, which
  // runs without grad mode, makes its gradient views without holding their buffers.
  v.view_no_grad = !is_grad_enabled() || src.view_no_grad;
  if (v.view_no_grad) return;
  v.view_base = src.view_base ? src.view_base : of.impl_ptr();
  v.view_version = v.storage->version();
}

void refresh_view_slow(TensorImpl& v) {
  v.view_version = v.storage->version();
  const TensorImpl& b = *v.view_base;
  if (!b.requires_grad && !b.grad_fn) return;
  KILN_CHECK(b.storage == v.storage, "autograd", "a view and its base must share storage");
  auto node = std::make_shared<ViewOfBase>(window_of(v));
  node->next.push_back(gradient_edge(Tensor(v.view_base)));
  v.grad_fn = std::move(node);
}

void rebase_view(const char* op, const Tensor& view, std::shared_ptr<Node> base_edge,
                 std::vector<std::shared_ptr<Node>> operand_edges, BackwardFn fn) {
  TensorImpl& v = *view.impl();
  TensorImpl& b = *v.view_base;
  Window w = window_of(v);
  auto copy_slices = std::make_shared<CopySlices>(op, w, std::move(fn));
  copy_slices->next.reserve(1 + operand_edges.size());
  copy_slices->next.push_back(std::move(base_edge));
  for (auto& e : operand_edges) copy_slices->next.push_back(std::move(e));
  b.grad_fn = std::move(copy_slices);
  auto window = std::make_shared<ViewOfBase>(std::move(w));
  window->next.push_back(b.grad_fn);
  v.grad_fn = std::move(window);
  v.view_version = v.storage->version();
}

}  // namespace kiln
