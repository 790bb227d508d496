#pragma once
// Tensor: a cheap handle (one shared_ptr) to shape, strides, offset and dtype over a
// shared Storage. Copying a Tensor copies the handle; views share storage.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "shape.h"
#include "storage.h"

// A record's method parameters: its function's, less the first (the tensor itself).
#define KILN_RECORD_METHOD_PARAMS(self, ...) (__VA_ARGS__)

namespace kiln {

class Node;
class Tensor;
class Generator;
class TensorLiteral;
struct ValuesIndices;  // ops/ops.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;

  // Autograd. A leaf requires grad when `requires_grad` is set; a result of an op
  // requires grad when it has a grad_fn.
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Node> grad_fn;
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that sums into `grad`
  std::shared_ptr<TensorImpl> grad;
  // Leaves: Tensor::register_post_accumulate_grad_hook's functions, by id, called in
  // registration order after each accumulation into `grad`.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_grad_hooks;

  // Views (autograd/views.h). A tensor made by a view op (view, reshape, permute,
  // expand, slice, …) keeps the tensor that owns its storage's history, never itself a
  // view: an in-place op on the view rebases that base's history, and a view whose
  // storage was written in place since `view_version` gets a grad_fn that is a window of
  // its base's current history. `view_no_grad`: made under NoGradGuard (or from such
  // a view); it keeps no base and is never rebased, as in torch.
  std::shared_ptr<TensorImpl> view_base;
  uint64_t view_version = 0;
  bool view_no_grad = false;
};

// What a factory builds: dtype, device and whether the result is a leaf requiring grad.
struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = Device();
  bool requires_grad_ = false;
  bool has_dtype_ = false;  // a dtype was given (tensor() literals infer theirs otherwise)

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t), has_dtype_(true) {}  // NOLINT: implicit like torch's
  TensorOptions(Device d) : device_(d) {}         // NOLINT
  TensorOptions dtype(DType t) const { auto o = *this; o.dtype_ = t; o.has_dtype_ = true; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
};

// What register_post_accumulate_grad_hook returns (torch's RemovableHandle): remove()
// unregisters the hook; the handle does not keep the tensor alive.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<TensorImpl> impl, uint64_t id) : impl_(std::move(impl)), id_(id) {}
  void remove();  // once; later calls (and a tensor gone) do nothing

 private:
  std::weak_ptr<TensorImpl> impl_;
  uint64_t id_ = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A fresh contiguous tensor with uninitialised contents. Throws "[empty] …" for a
  // negative size or a shape whose element count or bytes overflow, and
  // OutOfMemoryError "[empty] cannot allocate …" naming shape and bytes when memory
  // cannot be had (detail::empty_for names the op that asked instead).
  static Tensor empty(const Shape& shape, TensorOptions opts = {});

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata
  const Shape& shape() const { return checked().shape; }
  const Shape& sizes() const { return shape(); }
  const Strides& strides() const { return checked().strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape()); }
  int64_t offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  bool same_storage(const Tensor& o) const { return checked().storage == o.checked().storage; }
  uint64_t version() const { return checked().storage->version(); }
  void bump_version() const { checked().storage->bump_version(); }

  // ---- raw data: data<T>() checks the dtype and points at element 0 of the view, in the
  // tensor's device memory (a GPU address for a CUDA tensor, for kernels only: the host
  // reads one through item, at, to_vector or .to(kCPU)).
  void* data_ptr() const;
  template <class T> T* data() const;

  // ---- element access for tests and small programs (any layout, any device)
  double item() const;                                    // a one-element tensor
  // item<int64_t>() (any integer type) reads an int64 tensor exactly and throws
  // "[item] value nan of a float32 tensor cannot be converted to int64" where a float's
  // value does not fit (a cast would be undefined behaviour).
  template <class T> T item() const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      return static_cast<T>(item_int64());
    } else {
      return static_cast<T>(item());
    }
  }
  int64_t item_int64() const;
  double at(const std::vector<int64_t>& index) const;     // one element, as double
  void set(const std::vector<int64_t>& index, double v);  // write one element (bumps version)
  template <class T> std::vector<T> to_vector() const;    // all elements in row-major order

  std::string str() const;  // printed as PyTorch prints, "tensor([...])"

  // ---- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return grad_fn() == nullptr; }
  // The node that made this tensor (null for a leaf). A view whose storage was written
  // in place since gets a fresh one first (a window of its base's history).
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor grad() const;  // undefined until a backward reaches it
  void set_grad(const Tensor& g) const;
  void zero_grad(bool set_to_none = true) const;
  Tensor& retain_grad();  // keep .grad() of a non-leaf after backward
  // torch's register_post_accumulate_grad_hook: hook(tensor) runs each time a backward
  // pass has accumulated a gradient into this leaf's .grad() (which it may read or
  // change), on the thread running backward. Leaves that require grad only (autograd/node.cpp).
  HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  // Back-propagates from this tensor. Without `gradient` the tensor must have one element.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no history

  // ---- the ops' methods, declared by their records (core/op_records.inc) and defined above
  // the ops (ops/tensor_methods.cpp, and beside their op for the in-place ones)
#define KILN_DEFAULT(...) = __VA_ARGS__
#define KILN_FUNCTION(ret, name, params, doc)
#define KILN_FUNCTION_AND_METHOD(ret, name, params, args, doc) ret name KILN_RECORD_METHOD_PARAMS params const;
#define KILN_METHOD(ret, name, params, cv, doc) ret name params cv;
#include "op_records.inc"
#undef KILN_METHOD
#undef KILN_FUNCTION_AND_METHOD
#undef KILN_FUNCTION
#undef KILN_DEFAULT

  // ---- conveniences over the ops' methods
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  // One dim as an integer, x.sum(-1); a braced list ({0, 1}, {}) picks the list overload.
  template <DimIndex I> Tensor sum(I dim, bool keepdim = false) const { return sum(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor mean(I dim, bool keepdim = false) const { return mean(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor amax(I dim, bool keepdim = false) const { return amax(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor amin(I dim, bool keepdim = false) const { return amin(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor logsumexp(I dim, bool keepdim = false) const { return logsumexp(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor var(I dim, int64_t correction = 1, bool keepdim = false) const {
    return var(detail::dims_of(dim), correction, keepdim);
  }
  template <DimIndex I> Tensor std(I dim, int64_t correction = 1, bool keepdim = false) const {
    return std(detail::dims_of(dim), correction, keepdim);
  }
  // x += y is x.add_(y), and so on: in place, under the in-place rules (ops/op_helpers.h).
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator+=(double v) { return add_(v); }
  Tensor& operator-=(double v) { return sub_(v); }
  Tensor& operator*=(double v) { return mul_(v); }
  Tensor& operator/=(double v) { return div_(v); }

 private:
  TensorImpl& checked() const {
    KILN_CHECK(impl_ != nullptr, "tensor", "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

template <class T>
T* Tensor::data() const {
  KILN_CHECK(dtype() == dtype_of<T>::value, "data", "tensor has dtype ", dtype_name(dtype()),
             ", asked for ", dtype_name(dtype_of<T>::value));
  return static_cast<T*>(data_ptr());
}

namespace detail {
// Tensor::empty for op `op`: its errors start with "[op]".
Tensor empty_for(const char* op, const Shape& shape, TensorOptions opts);
}  // namespace detail

}  // namespace kiln
