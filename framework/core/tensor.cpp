#include "core/tensor.h"

#include <new>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/views.h"
#include "backend/backend.h"
#include "ops/ops.h"

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

namespace {

// Element offset of `index` in t, checked.
int64_t element_offset(const Tensor& t, const std::vector<int64_t>& index, const char* op) {
  KILN_CHECK(static_cast<int64_t>(index.size()) == t.dim(), op, "expected ", t.dim(),
             " indices for a tensor of shape ", shape_str(t.shape()), ", got ", index.size());
  int64_t off = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    int64_t i = index[d];
    int64_t n = t.shape()[d];
    KILN_CHECK(i >= -n && i < n, op, "index ", i, " out of range for dim ", d, " of size ", n);
    off += (i < 0 ? i + n : i) * t.strides()[d];
  }
  return off;
}

// visit_dtype, plus bfloat16: element access reads and writes the stored type itself.
template <class F>
decltype(auto) visit_element_type(DType t, F&& f) {
  if (t == kBFloat16) return f(TypeTag<bfloat16>{});
  return visit_dtype(t, std::forward<F>(f));
}

double read_element(const Tensor& cpu_t, int64_t off) {
  return visit_element_type(cpu_t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<const T*>(cpu_t.data_ptr())[off]);
  });
}

}  // namespace

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item", "a tensor with ", numel(),
             " elements cannot be converted to a scalar (shape ", shape_str(shape()), ")");
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  return read_element(c, 0);
}

int64_t Tensor::item_int64() const {
  KILN_CHECK(numel() == 1, "item", "a tensor with ", numel(),
             " elements cannot be converted to a scalar (shape ", shape_str(shape()), ")");
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  if (c.dtype() == kInt64) return *static_cast<const int64_t*>(c.data_ptr());
  const double v = read_element(c, 0);
  KILN_CHECK(fits_int64(v), "item", "value ", v, " of a ", dtype_name(dtype()),
             " tensor cannot be converted to int64");
  return static_cast<int64_t>(v);
}

double Tensor::at(const std::vector<int64_t>& index) const {
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  return read_element(c, element_offset(c, index, "at"));
}

void Tensor::set(const std::vector<int64_t>& index, double v) {
  int64_t off = element_offset(*this, index, "set");
  KILN_CHECK(dtype() != kInt64 || fits_int64(v), "set", "value ", v, " cannot be converted to int64");
  if (!device().is_cpu()) {
    // One element copied in from the host: a 0-d view of it on the device.
    auto elem = std::make_shared<TensorImpl>();
    elem->storage = checked().storage;
    elem->offset = offset() + off;
    elem->dtype = dtype();
    Tensor host = Tensor::empty({}, TensorOptions(dtype()));
    host.set({}, v);
    backend_for(device()).copy(host, Tensor(std::move(elem)));
    bump_version();
    return;
  }
  visit_element_type(dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_cast<T*>(data_ptr())[off] = static_cast<T>(v);  // bfloat16: through float, as torch
  });
  bump_version();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = kiln::contiguous(device().is_cpu() ? *this : to(kCPU)).to(dtype_of<T>::value);
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;

// ---------------------------------------------------------------- autograd
bool Tensor::requires_grad() const { return checked().requires_grad || grad_fn() != nullptr; }

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  TensorImpl& t = checked();
  refresh_view(t);
  return t.grad_fn;
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

// ---------------------------------------------------------------- delegations to ops
Tensor Tensor::to(DType t) const { return dtype() == t ? *this : to_dtype(*this, t); }
Tensor Tensor::to(Device d) const { return device() == d ? *this : to_device(*this, d); }
Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::view(const Shape& s) const { return kiln::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kiln::flatten(*this, s, e); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dimensions, got ", dim());
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const std::vector<int64_t>& d) const { return kiln::permute(*this, d); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return kiln::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return kiln::unsqueeze(*this, d); }
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st) const { return kiln::slice(*this, d, s, e, st); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t l) const { return kiln::narrow(*this, d, s, l); }
Tensor Tensor::select(int64_t d, int64_t i) const { return kiln::select(*this, d, i); }
std::vector<Tensor> Tensor::split(int64_t s, int64_t d) const { return kiln::split(*this, s, d); }
std::vector<Tensor> Tensor::chunk(int64_t c, int64_t d) const { return kiln::chunk(*this, c, d); }

Tensor Tensor::add(const Tensor& o, double alpha) const { return kiln::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, double alpha) const { return kiln::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return kiln::div(*this, o); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::pow(double e) const { return kiln::pow(*this, e); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::gelu(const std::string& a) const { return kiln::gelu(*this, a); }
Tensor Tensor::clamp(std::optional<double> lo, std::optional<double> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::eq(const Tensor& o) const { return kiln::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return kiln::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return kiln::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return kiln::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return kiln::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return kiln::ge(*this, o); }
Tensor Tensor::masked_fill(const Tensor& m, double v) const { return kiln::masked_fill(*this, m, v); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& d, bool k) const { return kiln::sum(*this, d, k); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& d, bool k) const { return kiln::mean(*this, d, k); }
Tensor Tensor::var(const std::vector<int64_t>& d, int64_t c, bool k) const { return kiln::var(*this, d, c, k); }
Tensor Tensor::logsumexp(const std::vector<int64_t>& d, bool k) const { return kiln::logsumexp(*this, d, k); }
Tensor Tensor::amax(const std::vector<int64_t>& d, bool k) const { return kiln::amax(*this, d, k); }
Tensor Tensor::amin(const std::vector<int64_t>& d, bool k) const { return kiln::amin(*this, d, k); }
Tensor Tensor::max() const { return kiln::max(*this); }
Tensor Tensor::min() const { return kiln::min(*this); }
Tensor Tensor::argmax() const { return kiln::argmax(*this); }
Tensor Tensor::argmax(int64_t d, bool k) const { return kiln::argmax(*this, d, k); }
Tensor Tensor::softmax(int64_t d) const { return kiln::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return kiln::log_softmax(*this, d); }

}  // namespace kiln
