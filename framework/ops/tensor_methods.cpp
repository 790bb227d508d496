// Tensor's methods that call ops: the records' methods (core/op_records.inc), each calling
// its function, and element access, which reads through a copy to the host.
#include "backend/backend.h"
#include "core/tensor.h"
#include "ops/ops.h"

// A record's call of its function from a method: the tensor itself, then the rest.
#define KILN_RECORD_SELF_ARGS(self, ...) (*this __VA_OPT__(, ) __VA_ARGS__)

namespace kiln {

#define KILN_DEFAULT(...)
#define KILN_FUNCTION(ret, name, params, doc)
#define KILN_FUNCTION_AND_METHOD(ret, name, params, args, doc) \
  ret Tensor::name KILN_RECORD_METHOD_PARAMS params const { return kiln::name KILN_RECORD_SELF_ARGS args; }
#define KILN_METHOD(ret, name, params, cv, doc)
#include "core/op_records.inc"
#undef KILN_METHOD
#undef KILN_FUNCTION_AND_METHOD
#undef KILN_FUNCTION
#undef KILN_DEFAULT

Tensor Tensor::to(DType t) const { return dtype() == t ? *this : to_dtype(*this, t); }
Tensor Tensor::to(Device d) const { return device() == d ? *this : to_device(*this, d); }
Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t", "expects a tensor with <= 2 dimensions, got ", dim());
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1);
}

// ---------------------------------------------------------------- element access
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

}  // namespace kiln
