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

namespace kiln {

class Node;
class Tensor;

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

  // ---- conversion and copies
  Tensor to(DType t) const;     // a copy in that dtype (self if already that dtype)
  Tensor to(Device d) const;    // a copy on that device (self if already there)
  Tensor clone() const;         // a contiguous copy that keeps the graph
  Tensor contiguous() const;    // self if contiguous, else a copy that keeps the graph

  // ---- shape (views where possible)
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- math (see ops/ for the semantics)
  Tensor add(const Tensor& o, double alpha = 1.0) const;
  Tensor sub(const Tensor& o, double alpha = 1.0) const;
  Tensor mul(const Tensor& o) const;
  Tensor div(const Tensor& o) const;
  Tensor neg() const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu(const std::string& approximate = "none") const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  // pointwise math (ops/elementwise_unary.cpp)
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor erf() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  // ---- comparisons with a scalar, single int dims, in-place operators
  Tensor eq(double v) const;
  Tensor ne(double v) const;
  Tensor lt(double v) const;
  Tensor le(double v) const;
  Tensor gt(double v) const;
  Tensor ge(double v) const;
  template <DimIndex I> Tensor sum(I dim, bool keepdim = false) const { return sum(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor mean(I dim, bool keepdim = false) const { return mean(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor amax(I dim, bool keepdim = false) const { return amax(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor amin(I dim, bool keepdim = false) const { return amin(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor logsumexp(I dim, bool keepdim = false) const { return logsumexp(detail::dims_of(dim), keepdim); }
  template <DimIndex I> Tensor var(I dim, int64_t correction = 1, bool keepdim = false) const {
    return var(detail::dims_of(dim), correction, keepdim);
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
  Tensor& sub_(double v);
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor matmul(const Tensor& o) const;
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- predicates (ops/predicates.cpp)
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;

  // ---- structure ops, std and norm (ops/triangular.cpp, repeat.cpp, flip_roll.cpp,
  // einsum.cpp, norms.cpp)
  Tensor triu(int64_t diagonal = 0) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor flip(const std::vector<int64_t>& dims) const;
  Tensor roll(int64_t shifts, std::optional<int64_t> dim = std::nullopt) const;
  Tensor roll(const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {}) const;
  Tensor outer(const Tensor& other) const;
  Tensor std(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  template <DimIndex I> Tensor std(I dim, int64_t correction = 1, bool keepdim = false) const {
    return std(detail::dims_of(dim), correction, keepdim);
  }
  Tensor norm(double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;

  // ---- indexing, scatter, scan, sort and sampling (semantics in ops/ops.h).
  // `struct ValuesIndices` and `class Generator` name the types of ops/ops.h
  // and core/generator.h without including them here.
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  struct ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  struct ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, class Generator* gen = nullptr) const;
  // In place, like the in-place ops below (bump the version; refused on a tensor that
  // requires grad while grad mode is on).
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& scatter_(int64_t dim, const Tensor& index, double value);
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src);
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);

  // ---- in place: for optimizers and initialisers. Each bumps the version counter;
  // under grad mode, as in torch, an op on a tensor in the graph (or with an operand
  // that requires grad) is recorded and one on a leaf that requires grad is an error;
  // under NoGradGuard nothing is recorded. The rules: ops/op_helpers.h, apply_inplace.
  Tensor& add_(const Tensor& o, double alpha = 1.0);
  Tensor& add_(double v);
  Tensor& sub_(const Tensor& o, double alpha = 1.0);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(double v);
  Tensor& div_(const Tensor& o);
  Tensor& div_(double v);
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double v);
  Tensor& zero_();
  Tensor& clamp_(std::optional<double> min, std::optional<double> max);
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& uniform_(double from = 0.0, double to = 1.0);
  Tensor& normal_(double mean = 0.0, double std = 1.0);

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
