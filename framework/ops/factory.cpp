// Factories: tensors from shapes, values, ranges and random generators.
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

Tensor filled(const char* op, const Shape& shape, double v, TensorOptions opts) {
  Tensor t = detail::empty_for(op, shape, opts.requires_grad(false));
  backend_for(opts.device_).fill(t, v);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

// Runs a random fill into a fresh contiguous tensor of `opts`.
template <class F>
Tensor random_tensor(const char* op, const Shape& shape, TensorOptions opts, Generator* gen, F fill) {
  Tensor t = detail::empty_for(op, shape, opts.requires_grad(false));
  Generator& g = gen_or_default(gen);
  uint64_t seed = g.seed();
  uint64_t block = g.reserve(static_cast<uint64_t>(t.numel()));
  fill(backend_for(opts.device_), t, seed, block);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) { return Tensor::empty(shape, opts); }
// zeros, ones and full are empty and a fill; their shape errors say "[empty]", as they always have.
Tensor zeros(const Shape& shape, TensorOptions opts) { return filled("empty", shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return filled("empty", shape, 1.0, opts); }
Tensor full(const Shape& shape, double value, TensorOptions opts) {
  KILN_CHECK(opts.dtype_ != kInt64 || fits_int64(value), "full", "value ", value, " cannot be converted to int64");
  return filled("empty", shape, value, opts);
}
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, TensorOptions(t.dtype()).device(t.device())); }
Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), TensorOptions(t.dtype()).device(t.device())); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

Tensor arange(double end, TensorOptions opts) { return arange(0, end, 1, opts); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  KILN_CHECK(step != 0, "arange", "step must be nonzero");
  KILN_CHECK(std::isfinite(start) && std::isfinite(end), "arange", "unsupported range: ", start,
             " -> ", end);
  KILN_CHECK((end - start) / step >= 0, "arange", "upper bound and step are inconsistent: start ",
             start, ", end ", end, ", step ", step);
  // The count is a double first: arange(0, 1e300, 1e-300) must be refused, not cast (UB).
  const double count = std::ceil((end - start) / step);
  KILN_CHECK(count < 0x1p63, "arange", "start ", start, ", end ", end, " and step ", step, " give ", count,
             " elements, more than int64 can count");
  Tensor t = detail::empty_for("arange", {static_cast<int64_t>(count)}, opts.requires_grad(false));
  backend_for(opts.device_).arange(t, start, step);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

Tensor eye(int64_t n, TensorOptions opts) { return eye(n, n, opts); }

Tensor eye(int64_t n, int64_t m, TensorOptions opts) {
  KILN_CHECK(n >= 0 && m >= 0, "eye", "sizes must be non-negative, got ", n, " and ", m);
  Tensor t = filled("eye", {n, m}, 0.0, opts.requires_grad(false));
  // The diagonal is a strided view with stride m + 1 (1 when it is empty: m may be INT64_MAX).
  Tensor diag = detail::make_view(t, {std::min(n, m)}, {std::min(n, m) == 0 ? 1 : m + 1}, 0);
  backend_for(opts.device_).fill(diag, 1.0);
  if (opts.requires_grad_) t.requires_grad_(true);
  return t;
}

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts) {
  const int64_t n = checked_numel("from_vector", shape);
  KILN_CHECK(static_cast<int64_t>(data.size()) == n, "from_vector", "got ", data.size(), " values for shape ",
             shape_str(shape), " (", n, " elements)");
  Tensor src = detail::empty_for("from_vector", shape, TensorOptions(dtype_of<T>::value));
  T* p = src.data<T>();
  for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  Tensor out = src.to(opts.dtype_).to(opts.device_);
  if (out.same_storage(src) && opts.requires_grad_) out = out.detach();
  if (opts.requires_grad_) out.requires_grad_(true);
  return out;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, TensorOptions);
template Tensor from_vector<bfloat16>(const std::vector<bfloat16>&, const Shape&, TensorOptions);

namespace {

// The shape of a tensor literal, checked to be rectangular, and the kind of its values.
struct LiteralLayout {
  Shape shape;
  TensorLiteral::Kind kind = TensorLiteral::Kind::Bool;  // the widest seen: Bool < Int < Float
};

// "[1][0]" for the path of indices to a nested element.
std::string position_str(const std::vector<int64_t>& path) {
  std::ostringstream os;
  for (int64_t i : path) os << '[' << i << ']';
  return path.empty() ? "[]" : os.str();
}

// Walks lit at depth `dim`: the first list met at each depth sets that dim's size, every
// other must agree, and scalars may only sit below the deepest list.
void walk_literal(const TensorLiteral& lit, size_t dim, std::vector<int64_t>& path, LiteralLayout& out,
                  bool& depth_known) {
  if (!lit.is_list()) {
    KILN_CHECK(!depth_known || dim == out.shape.size(), "tensor", "expected a sequence at dim ", dim,
               ", got a number (at position ", position_str(path), ")");
    if (!depth_known) {
      depth_known = true;
      out.shape.resize(dim);
    }
    if (lit.kind() > out.kind) out.kind = lit.kind();
    return;
  }
  const auto n = static_cast<int64_t>(lit.items().size());
  if (dim == out.shape.size() && !depth_known) {
    out.shape.push_back(n);
  } else {
    KILN_CHECK(dim < out.shape.size(), "tensor", "expected a number at dim ", dim, ", got a sequence (at position ",
               position_str(path), ")");
    KILN_CHECK(out.shape[dim] == n, "tensor", "expected a sequence of length ", out.shape[dim], " at dim ", dim,
               ", got ", n, " (at position ", position_str(path), ")");
  }
  if (n == 0 && !depth_known) depth_known = true;  // an empty list ends the nesting
  for (int64_t i = 0; i < n; ++i) {
    path.push_back(i);
    walk_literal(lit.items()[static_cast<size_t>(i)], dim + 1, path, out, depth_known);
    path.pop_back();
  }
}

template <class T>
void flatten_literal(const TensorLiteral& lit, std::vector<T>& out) {
  if (lit.is_list()) {
    for (const TensorLiteral& item : lit.items()) flatten_literal(item, out);
  } else if constexpr (std::is_same_v<T, double>) {
    out.push_back(lit.float_value());
  } else {
    out.push_back(static_cast<T>(lit.int_value()));
  }
}

template <class T>
Tensor literal_as(const TensorLiteral& lit, const Shape& shape, TensorOptions opts) {
  std::vector<T> flat;
  flat.reserve(static_cast<size_t>(shape_numel(shape)));
  flatten_literal(lit, flat);
  return from_vector<T>(flat, shape, opts);
}

}  // namespace

// data (nested lists of numbers) -> a tensor of their nesting's shape
Tensor tensor(const TensorLiteral& data, TensorOptions opts) {
  LiteralLayout layout;
  std::vector<int64_t> path;
  bool depth_known = false;
  walk_literal(data, 0, path, layout, depth_known);
  using K = TensorLiteral::Kind;
  if (!opts.has_dtype_) {
    // An empty literal (no values: numel 0) is float32, as in torch.
    const bool floating = layout.kind == K::Float || shape_numel(layout.shape) == 0;
    opts = opts.dtype(floating ? kFloat32 : layout.kind == K::Int ? kInt64 : kBool);
  }
  KILN_CHECK(!opts.requires_grad_ || is_floating(opts.dtype_), "tensor",
             "only floating-point tensors can require gradients, got ", dtype_name(opts.dtype_),
             " (integer values make an int64 tensor: write 1.0 for a float, or pass a dtype)");
  // Integers and bools go through int64 (exact beyond 2^53), anything with a float
  // through double; from_vector converts to the dtype asked for.
  if (layout.kind == K::Float) return literal_as<double>(data, layout.shape, opts);
  return literal_as<int64_t>(data, layout.shape, opts);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(is_floating(opts.dtype_), "rand", "expected a floating dtype, got ", dtype_name(opts.dtype_));
  return random_tensor("rand", shape, opts, gen, [](Backend& b, const Tensor& t, uint64_t s, uint64_t k) {
    b.uniform(t, s, k, 0.0, 1.0);
  });
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(is_floating(opts.dtype_), "randn", "expected a floating dtype, got ", dtype_name(opts.dtype_));
  return random_tensor("randn", shape, opts, gen, [](Backend& b, const Tensor& t, uint64_t s, uint64_t k) {
    b.normal(t, s, k, 0.0, 1.0);
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(high > low, "randint", "expected low < high, got low=", low, " high=", high);
  Tensor r = random_tensor("randint", shape, TensorOptions(kInt64).device(opts.device_), gen,
                           [=](Backend& b, const Tensor& t, uint64_t s, uint64_t k) { b.randint(t, s, k, low, high); });
  return r.to(opts.dtype_);
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions opts, Generator* gen) {
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli", "p must be in [0, 1], got ", p);
  return random_tensor("bernoulli", shape, opts, gen, [=](Backend& b, const Tensor& t, uint64_t s, uint64_t k) {
    b.bernoulli(t, s, k, p);
  });
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  detail::check_floating("bernoulli", p, "probability tensor");
  // u < p elementwise, with u uniform in [0, 1).
  Tensor u = rand(p.shape(), TensorOptions(p.dtype()).device(p.device()), gen);
  return lt(u, p.detach()).to(p.dtype());
}

}  // namespace kiln
