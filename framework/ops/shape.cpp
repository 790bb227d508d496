// Shape ops. Most are views: a new TensorImpl over the same storage with other sizes,
// strides and offset; their backward maps the gradient back to the input's shape.
#include <algorithm>
#include <numeric>

#include "autograd/views.h"
#include "ops/op_helpers.h"

namespace kiln {

Tensor detail::make_view(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = x.dtype();
  return Tensor(std::move(impl));
}

namespace {

using detail::make_view;

// Replaces a single -1 by the size that keeps numel; checks the total.
Shape infer_shape(const char* op, const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer_at < 0, op, "only one dimension can be inferred, got shape ", shape_str(shape));
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, "invalid shape dimension ", out[i], " in ", shape_str(shape));
      // A product past int64 cannot be the input's numel (which fits): the same error.
      KILN_CHECK(!__builtin_mul_overflow(known, out[i], &known), op, "shape ", shape_str(shape),
                 " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
    }
  }
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, "shape ", shape_str(shape),
               " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
    out[infer_at] = numel / known;
  }
  // Wrapping products once let (2^32, 2^32) pass for 0 elements; checked_numel also
  // refuses (0, 2^40, 2^40), whose strides would not fit.
  KILN_CHECK(checked_numel(op, out) == numel, op, "shape ", shape_str(shape), " is invalid for input of shape ",
             shape_str(from), " (", numel, " elements)");
  return out;
}

// Strides that let `new_shape` view memory laid out as (old_shape, old_strides), if any.
// Walks the old dims from the innermost in chunks of dims that are contiguous with each
// other; each chunk must be covered exactly by consecutive new dims.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape) {
  Strides ns(new_shape.size());
  if (old_shape.empty()) {
    std::fill(ns.begin(), ns.end(), 1);
    return ns;
  }
  if (shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    bool chunk_ends = d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      ns[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// The result of a view op: y, recorded, marked as a view of x (autograd/views.h).
Tensor as_view(Tensor y, const Tensor& x) {
  mark_view(y, x);
  return y;
}

// Records a view op whose backward reshapes the gradient back to x's shape.
Tensor record_reshape_like(const char* op, const Tensor& y, const Tensor& x) {
  Shape sx = x.shape();
  return as_view(record(op, y, {x}, [sx](const Tensor& g) -> TensorList { return {g.reshape(sx)}; }), x);
}

// Backward of slice, which picked a strided window out of x: the gradient of x is g in
// that window of zeros. When x's gradient already has a buffer (another window of x
// reached it first), g is added into its window there instead.
class SliceBackward final : public Node {
 public:
  SliceBackward(Shape x_shape, DType dtype, Strides strides, int64_t offset, Shape window)
      : Node("slice"),
        x_shape_(std::move(x_shape)),
        dtype_(dtype),
        strides_(std::move(strides)),
        offset_(offset),
        window_(std::move(window)) {}

  TensorList apply(const Tensor& g) override {
    Tensor z = zeros(x_shape_, TensorOptions(dtype_).device(g.device()));
    backend_for(g.device()).copy(g.reshape(window_), window_of(z));
    return {z};
  }

  TensorList apply_accumulating(const Tensor& g, const std::vector<Tensor*>& acc) override {
    Tensor* buffer = acc.empty() ? nullptr : acc[0];
    if (!buffer || buffer->shape() != x_shape_ || buffer->dtype() != dtype_ || g.dtype() != dtype_ ||
        buffer->device() != g.device()) {
      return apply(g);
    }
    Tensor dst = window_of(*buffer);
    backend_for(g.device()).binary(BinaryOp::Add, dst, g.reshape(window_), dst);
    return {Tensor()};
  }

 private:
  // The window inside a contiguous tensor of x's shape.
  Tensor window_of(const Tensor& t) const { return make_view(t, window_, strides_, offset_); }

  Shape x_shape_;
  DType dtype_;
  Strides strides_;  // of the window in a contiguous tensor of x's shape
  int64_t offset_;
  Shape window_;
};

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  detail::check_defined("view", x);
  Shape s = infer_shape("view", shape, x.numel(), x.shape());
  std::optional<Strides> st = view_strides(x.shape(), x.strides(), s);
  KILN_CHECK(st.has_value(), "view", "view size ", shape_str(s),
             " is not compatible with the input's size ", shape_str(x.shape()), " and stride ",
             shape_str(x.strides()),
             " (at least one dimension spans across two contiguous subspaces); use reshape() instead");
  return record_reshape_like("view", make_view(x, s, *st, x.offset()), x);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  detail::check_defined("reshape", x);
  Shape s = infer_shape("reshape", shape, x.numel(), x.shape());
  if (s == x.shape()) return x;
  if (std::optional<Strides> st = view_strides(x.shape(), x.strides(), s))
    return record_reshape_like("reshape", make_view(x, s, *st, x.offset()), x);
  return view(contiguous(x), s);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  detail::check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = wrap_dim("flatten", start_dim, x.dim()), e = wrap_dim("flatten", end_dim, x.dim());
  KILN_CHECK(s <= e, "flatten", "start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= x.size(d);
  out.push_back(n);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", x);
  KILN_CHECK(static_cast<int64_t>(dims.size()) == x.dim(), "permute", "number of dims ", dims.size(),
             " does not match the tensor's ", x.dim(), " dimensions");
  std::vector<int64_t> p(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape s(dims.size());
  Strides st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    p[i] = wrap_dim("permute", dims[i], x.dim());
    KILN_CHECK(!seen[p[i]], "permute", "dim ", dims[i], " repeated in ", shape_str(dims));
    seen[p[i]] = true;
    s[i] = x.size(p[i]);
    st[i] = x.stride(p[i]);
    inverse[p[i]] = static_cast<int64_t>(i);
  }
  Tensor y = make_view(x, s, st, x.offset());
  return as_view(record("permute", y, {x}, [inverse](const Tensor& g) -> TensorList { return {permute(g, inverse)}; }),
                 x);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  detail::check_defined("transpose", x);
  if (x.dim() == 0) return x;
  std::vector<int64_t> p(x.dim());
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim("transpose", d0, x.dim())], p[wrap_dim("transpose", d1, x.dim())]);
  return permute(x, p);
}

Tensor squeeze(const Tensor& x) {
  detail::check_defined("squeeze", x);
  Shape s;
  Strides st;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.size(d) == 1) continue;
    s.push_back(x.size(d));
    st.push_back(x.stride(d));
  }
  return record_reshape_like("squeeze", make_view(x, s, st, x.offset()), x);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined("squeeze", x);
  int64_t d = wrap_dim("squeeze", dim, x.dim());
  if (x.dim() == 0 || x.size(d) != 1) return x;
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return record_reshape_like("squeeze", make_view(x, s, st, x.offset()), x);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined("unsqueeze", x);
  int64_t d = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t stride = d < x.dim() ? x.stride(d) * x.size(d) : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return record_reshape_like("unsqueeze", make_view(x, s, st, x.offset()), x);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  detail::check_defined("expand", x);
  KILN_CHECK(shape.size() >= x.shape().size(), "expand", "the number of sizes provided (", shape.size(),
             ") must be greater or equal to the number of dimensions in the tensor (", x.dim(), "); target shape ",
             shape_str(shape), ", tensor shape ", shape_str(x.shape()));
  const int64_t lead = static_cast<int64_t>(shape.size()) - x.dim();
  Shape s(shape.size());
  Strides st(shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < lead) {
      KILN_CHECK(shape[i] >= 0, "expand", "the expanded size ", shape[i],
                 " is not allowed in a leading, non-existing dimension; target shape ", shape_str(shape),
                 ", tensor shape ", shape_str(x.shape()));
      s[i] = shape[i];
      st[i] = 0;
      continue;
    }
    int64_t have = x.size(i - lead);
    int64_t want = shape[i] == -1 ? have : shape[i];
    KILN_CHECK(want >= 0, "expand", "the expanded size ", shape[i], " is invalid; target shape ", shape_str(shape),
               ", tensor shape ", shape_str(x.shape()));
    KILN_CHECK(want == have || have == 1, "expand", "the expanded size of the tensor (", want,
               ") must match the existing size (", have, ") at non-singleton dimension ", i,
               "; target shape ", shape_str(shape), ", tensor shape ", shape_str(x.shape()));
    s[i] = want;
    st[i] = want == have ? x.stride(i - lead) : 0;
  }
  if (s == x.shape()) return x;
  checked_numel("expand", s);  // a stride-0 view is free, but numel and offsets must fit
  Tensor y = make_view(x, s, st, x.offset());
  Shape sx = x.shape();
  return as_view(record("expand", y, {x}, [sx](const Tensor& g) -> TensorList { return {sum_to(g, sx)}; }), x);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  detail::check_defined("slice", x);
  KILN_CHECK(x.dim() > 0, "slice", "cannot slice a 0-d tensor");
  int64_t d = wrap_dim("slice", dim, x.dim());
  KILN_CHECK(step > 0, "slice", "step must be positive, got ", step);
  int64_t n = x.size(d);
  // Python slicing: negative bounds count from the end, then clamp into [0, n].
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  // Not (end - start + step - 1) / step: that wraps for a step near INT64_MAX.
  s[d] = end == start ? 0 : (end - start - 1) / step + 1;
  if (s[d] > 1) st[d] *= step;  // step < n here, so the product stays inside x's span
  int64_t offset = x.offset() + start * x.stride(d);
  Tensor y = make_view(x, s, st, offset);
  if (!any_requires_grad({&x})) return as_view(y, x);
  Shape sx = x.shape();
  DType dt = x.dtype();
  // The window's strides inside a contiguous gradient of x's shape.
  Strides gst = contiguous_strides(sx);
  int64_t goff = start * gst[d];
  if (s[d] > 1) gst[d] *= step;
  return as_view(record_node(y, {x}, std::make_shared<SliceBackward>(sx, dt, gst, goff, s)), x);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", x);
  KILN_CHECK(x.dim() > 0, "narrow", "cannot be applied to a 0-d tensor");
  int64_t d = wrap_dim("narrow", dim, x.dim());
  int64_t n = x.size(d);
  KILN_CHECK(start >= -n && start <= n, "narrow", "start ", start, " out of range for dim ", d, " of size ", n);
  if (start < 0) start += n;
  KILN_CHECK(length >= 0 && length <= n - start, "narrow", "start (", start, ") + length (", length,
             ") exceeds dimension size (", n, ")");
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  detail::check_defined("select", x);
  KILN_CHECK(x.dim() > 0, "select", "cannot select from a 0-d tensor");
  int64_t d = wrap_dim("select", dim, x.dim());
  int64_t n = x.size(d);
  KILN_CHECK(index >= -n && index < n, "select", "index ", index, " out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  return squeeze(slice(x, d, index, index + 1, 1), d);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat", "expected a non-empty list of tensors");
  for (const Tensor& t : tensors) detail::check_defined("cat", t);
  const Tensor& first = tensors[0];
  KILN_CHECK(first.dim() > 0, "cat", "zero-dimensional tensor cannot be concatenated (tensor 0 has shape ",
             shape_str(first.shape()), ")");
  int64_t d = wrap_dim("cat", dim, first.dim());
  Shape out_shape = first.shape();
  DType dt = first.dtype();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.dim() == first.dim(), "cat", "tensor ", i, " has ", t.dim(), " dimensions, expected ",
               first.dim(), "; tensor 0 has shape ", shape_str(first.shape()), ", tensor ", i, " has shape ",
               shape_str(t.shape()));
    KILN_CHECK(t.device() == first.device(), "cat", "expected all tensors on the same device, got ",
               first.device().str(), " and ", t.device().str(), " (tensor ", i, ")");
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.size(k) == first.size(k), "cat", "sizes of tensors must match except in dimension ", d,
                 "; tensor 0 has shape ", shape_str(first.shape()), ", tensor ", i, " has shape ", shape_str(t.shape()));
    out_shape[d] = checked_add("cat", out_shape[d], t.size(d));  // expanded inputs can be huge
    dt = promote_types(dt, t.dtype());
  }
  Tensor out = detail::new_tensor(out_shape, dt, first, "cat");
  Backend& be = backend_for(first.device());
  int64_t at = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    Tensor window = make_view(out, t.shape(), out.strides(), at * out.stride(d));
    be.copy(t, window);
    sizes.push_back(t.size(d));
    at += t.size(d);
  }
  if (!any_requires_grad(tensors)) return out;
  std::vector<DType> dtypes;
  for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
  return record("cat", out, tensors, [sizes, d, dtypes](const Tensor& g) -> TensorList {
    TensorList grads;
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads.push_back(narrow(g, d, at, sizes[i]).to(dtypes[i]));
      at += sizes[i];
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack", "expected a non-empty list of tensors");
  for (const Tensor& t : tensors) detail::check_defined("stack", t);
  int64_t d = wrap_dim("stack", dim, tensors[0].dim() + 1);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].shape() == tensors[0].shape(), "stack", "expects each tensor to be equal size, but got ",
               shape_str(tensors[0].shape()), " at entry 0 and ", shape_str(tensors[i].shape()), " at entry ", i);
    parts.push_back(unsqueeze(tensors[i], d));
  }
  Shape out = tensors[0].shape();
  out.insert(out.begin() + d, static_cast<int64_t>(tensors.size()));
  checked_numel("stack", out);  // before cat, which would name itself
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  detail::check_defined("split", x);
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  int64_t d = wrap_dim("split", dim, x.dim());
  KILN_CHECK(split_size > 0 || (split_size == 0 && x.size(d) == 0), "split",
             "split_size must be positive, got ", split_size);
  std::vector<Tensor> out;
  int64_t n = x.size(d);
  for (int64_t at = 0; at < n;) {  // at += split_size could wrap for a split_size near INT64_MAX
    const int64_t len = std::min(split_size, n - at);
    out.push_back(narrow(x, d, at, len));
    at += len;
  }
  if (out.empty()) out.push_back(x);
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined("split", x);
  KILN_CHECK(x.dim() > 0, "split", "cannot split a 0-d tensor");
  int64_t d = wrap_dim("split", dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split", "split sizes must be non-negative, got ", shape_str(sizes));
    KILN_CHECK(!__builtin_add_overflow(total, s, &total), "split", "split sizes ", shape_str(sizes),
               " sum past int64 but dim ", d, " has size ", x.size(d));
  }
  KILN_CHECK(total == x.size(d), "split", "split sizes ", shape_str(sizes), " sum to ", total,
             " but dim ", d, " has size ", x.size(d));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined("chunk", x);
  KILN_CHECK(chunks > 0, "chunk", "number of chunks must be positive, got ", chunks);
  KILN_CHECK(x.dim() > 0, "chunk", "cannot chunk a 0-d tensor");
  int64_t d = wrap_dim("chunk", dim, x.dim());
  const int64_t n = x.size(d);
  if (n == 0) {  // as torch: `chunks` empty views
    std::vector<Tensor> out;
    for (int64_t i = 0; i < chunks; ++i) out.push_back(narrow(x, d, 0, 0));
    return out;
  }
  const int64_t size = (n - 1) / chunks + 1;  // ceil(n / chunks), without n + chunks wrapping
  return split(x, size, d);
}

Tensor contiguous(const Tensor& x) {
  detail::check_defined("contiguous", x);
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor clone(const Tensor& x) {
  detail::check_defined("clone", x);
  Tensor out = detail::new_tensor(x.shape(), x.dtype(), x);
  backend_for(x.device()).copy(x, out);
  return record("clone", out, {x}, [](const Tensor& g) -> TensorList { return {g}; });
}

Tensor to_dtype(const Tensor& x, DType dtype) {
  detail::check_defined("to", x);
  if (x.dtype() == dtype) return x;
  Tensor out = detail::new_tensor(x.shape(), dtype, x);
  backend_for(x.device()).copy(x, out);
  if (!is_floating(dtype)) return out;  // integers carry no gradient
  DType from = x.dtype();
  return record("to", out, {x}, [from](const Tensor& g) -> TensorList { return {g.to(from)}; });
}

Tensor to_device(const Tensor& x, Device device) {
  detail::check_defined("to", x);
  if (x.device() == device) return x;
  Tensor out = Tensor::empty(x.shape(), TensorOptions(x.dtype()).device(device));
  // The non-CPU side's backend knows how to reach the CPU.
  Backend& be = backend_for(x.device().is_cpu() ? device : x.device());
  be.copy(x, out);
  Device from = x.device();
  return record("to", out, {x}, [from](const Tensor& g) -> TensorList { return {g.to(from)}; });
}

}  // namespace kiln
