#include "core/tensor.h"

#include <new>
#include <sstream>


namespace kiln {

Tensor Tensor::empty(const Shape& shape, TensorOptions opts) { return detail::empty_for("empty", shape, opts); }

namespace {
// "4.0 TiB": the size of a refused allocation, for a reader.
std::string readable_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  std::ostringstream os;
  os.precision(u == 0 ? 0 : 1);
  os << std::fixed << v << ' ' << units[u];
  return os.str();
}
}  // namespace

Tensor detail::empty_for(const char* op, const Shape& shape, TensorOptions opts) {
  const size_t nbytes = checked_nbytes(op, shape, dtype_size(opts.dtype_));
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = std::make_shared<Storage>(nbytes, opts.device_);
  } catch (const OutOfMemoryError& e) {
    KILN_FAIL_OUT_OF_MEMORY(op, "cannot allocate a tensor of shape ", shape_str(shape), " and dtype ",
                            dtype_name(opts.dtype_), ": ", nbytes, " bytes (", readable_bytes(nbytes), ") on ",
                            opts.device_.str(), "; ", e.what());
  } catch (const std::bad_alloc&) {  // the Storage object itself
    KILN_FAIL_OUT_OF_MEMORY(op, "cannot allocate a tensor of shape ", shape_str(shape), " and dtype ",
                            dtype_name(opts.dtype_), ": ", nbytes, " bytes (", readable_bytes(nbytes), ") on ",
                            opts.device_.str());
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype_;
  Tensor t(std::move(impl));
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

// wrap_dim accepts dim 0 of a 0-d tensor (as PyTorch's reductions do); there is no size there.
int64_t Tensor::size(int64_t d) const {
  KILN_CHECK(dim() > 0, "size", "dimension specified as ", d, " but the tensor has no dimensions");
  return shape()[wrap_dim("size", d, dim())];
}
int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK(dim() > 0, "stride", "dimension specified as ", d, " but the tensor has no dimensions");
  return strides()[wrap_dim("stride", d, dim())];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = checked();
  if (shape_numel(t.shape) == 0) return true;  // as PyTorch: no elements, nothing out of place
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = checked();
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

Tensor& Tensor::requires_grad_(bool on) {
  TensorImpl& t = checked();
  KILN_CHECK(t.grad_fn == nullptr || on, "requires_grad_",
             "you can only change requires_grad flags of leaf tensors");
  KILN_CHECK(!on || is_floating(t.dtype), "requires_grad_",
             "only floating-point tensors can require gradients, got ", dtype_name(t.dtype));
  t.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = checked();
  return t.grad ? Tensor(t.grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  TensorImpl& t = checked();
  if (g.defined()) {
    KILN_CHECK(g.shape() == t.shape, "set_grad", "gradient of shape ", shape_str(g.shape()),
               " for a tensor of shape ", shape_str(t.shape));
  }
  t.grad = g.defined() ? g.impl_ptr() : nullptr;
}

Tensor Tensor::detach() const {
  const TensorImpl& t = checked();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->shape = t.shape;
  impl->strides = t.strides;
  impl->offset = t.offset;
  impl->dtype = t.dtype;
  return Tensor(std::move(impl));
}

}  // namespace kiln
