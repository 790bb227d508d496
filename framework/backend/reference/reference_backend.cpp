// ReferenceBackend (reference_backend.h): the required core in plain loops, one element
// at a time, over any strides. Arithmetic follows the CPU backend's definitions (torch's):
// the same formulas, int64 wrapping on overflow, NaN propagating through max and min.
#include "backend/reference/reference_backend.h"

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/philox_words.h"
#include "backend/cpu/wrapping_sum.h"
#include "backend/kernel_views.h"

namespace kiln {
namespace {

using cpu::wrapping_add;
using cpu::wrapping_mul;

// f(TypeTag<T>) for every dtype, bfloat16 included.
template <class F>
decltype(auto) visit_all(DType t, F&& f) {
  if (t == kBFloat16) return f(TypeTag<bfloat16>{});
  return visit_dtype(t, f);
}

// A value of S as D: through float where one side is bfloat16 (as torch converts),
// NaN and out-of-range floats to int64 as convert_float defines them.
template <class D, class S>
D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<S, bfloat16>) {
    return convert<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bfloat16>) {
    return bfloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S>) {
    return convert_float<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

// f(position, offsets) for each element of `shape` in row-major order, offsets[i] the
// element's offset in ts[i] from that tensor's first element (ts[i] strides, shape's sizes).
template <size_t N, class F>
void for_each_element(const Shape& shape, const std::array<const Tensor*, N>& ts, F f) {
  const int64_t count = shape_numel(shape);
  if (count == 0) return;
  const size_t nd = shape.size();
  // The strides looked up once: a Tensor's accessors check it on every call.
  std::array<const int64_t*, N> strides{};
  for (size_t i = 0; i < N; ++i) {
    KILN_CHECK(ts[i]->strides().size() >= nd, "reference backend", "a tensor of ", ts[i]->dim(),
               " dimensions walked over ", nd);
    strides[i] = ts[i]->strides().data();
  }
  std::vector<int64_t> pos(nd, 0);
  std::array<int64_t, N> off{};
  for (int64_t e = 0; e < count; ++e) {
    f(pos, off);
    for (size_t d = nd; d-- > 0;) {
      for (size_t i = 0; i < N; ++i) off[i] += strides[i][d];
      if (++pos[d] < shape[d]) break;
      for (size_t i = 0; i < N; ++i) off[i] -= strides[i][d] * shape[d];
      pos[d] = 0;
    }
  }
}

// out[i] = f(x[i]) over x's shape.
template <class O, class T, class F>
void map1(const Tensor& x, const Tensor& out, F f) {
  const T* px = x.data<T>();
  O* po = out.data<O>();
  for_each_element<2>(x.shape(), {&x, &out}, [&](const auto&, const auto& o) { po[o[1]] = f(px[o[0]]); });
}

// out[i] = f(x[i], y[i]) over x's shape.
template <class O, class T, class F>
void map2(const Tensor& x, const Tensor& y, const Tensor& out, F f) {
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  O* po = out.data<O>();
  for_each_element<3>(x.shape(), {&x, &y, &out},
                      [&](const auto&, const auto& o) { po[o[2]] = f(px[o[0]], py[o[1]]); });
}

template <class T> T sigmoid(T v) { return v >= T(0) ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v)); }
template <class T> T normal_cdf(T v) { return T(0.5) * std::erfc(-v * T(0.70710678118654752440)); }
template <class T> T tanh_inner(T v) { return T(0.79788456080286535588) * (v + T(0.044715) * v * v * v); }
template <class T> T gelu_tanh(T v) { return T(0.5) * v * (T(1) + std::tanh(tanh_inner(v))); }
template <class T> T gelu_erf_grad(T v) { return normal_cdf(v) + v * T(0.39894228040143267794) * std::exp(T(-0.5) * v * v); }
template <class T> T gelu_tanh_grad(T v) {
  const T t = std::tanh(tanh_inner(v));
  return T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * v * v);
}
template <class T> T silu_grad(T v) {
  const T s = sigmoid(v);
  return s * (T(1) + v * (T(1) - s));
}

template <class T>
T unary_value(UnaryOp op, T v, T a, T b) {
  switch (op) {
    case UnaryOp::Neg: return -v;
    case UnaryOp::Exp: return std::exp(v);
    case UnaryOp::Log: return std::log(v);
    case UnaryOp::Sqrt: return std::sqrt(v);
    case UnaryOp::Rsqrt: return T(1) / std::sqrt(v);
    case UnaryOp::Abs: return std::abs(v);
    case UnaryOp::Tanh: return std::tanh(v);
    case UnaryOp::Sigmoid: return sigmoid(v);
    case UnaryOp::Relu: return v < T(0) ? T(0) : v;
    case UnaryOp::GeluErf: return v * normal_cdf(v);
    case UnaryOp::GeluTanh: return gelu_tanh(v);
    case UnaryOp::Sign: return T((v > T(0)) - (v < T(0)));
    case UnaryOp::Pow:  // torch's own formulas for these exponents, as the CPU's kernel
      if (a == T(2)) return v * v;
      if (a == T(3)) return v * v * v;
      if (a == T(-1)) return T(1) / v;
      if (a == T(-2)) return T(1) / (v * v);
      return std::pow(v, a);
    case UnaryOp::Clamp: {
      const T r = v < a ? a : v;
      return r > b ? b : r;
    }
    case UnaryOp::AddScalar: return v + a;
    case UnaryOp::MulScalar: return v * a;
    case UnaryOp::RsubScalar: return a - v;
    case UnaryOp::RdivScalar: return a / v;
    case UnaryOp::Sin: return std::sin(v);
    case UnaryOp::Cos: return std::cos(v);
    case UnaryOp::Tan: return std::tan(v);
    case UnaryOp::Erf: return std::erf(v);
    case UnaryOp::Log1p: return std::log1p(v);
    case UnaryOp::Expm1: return std::expm1(v);
    case UnaryOp::Silu: return v / (T(1) + std::exp(-v));
    case UnaryOp::Softplus: return v * a > b ? v : std::log1p(std::exp(v * a)) / a;
  }
  return v;
}

void unary_int(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  using T = int64_t;
  const T ia = convert_float<T>(a);
  switch (op) {
    case UnaryOp::Neg: return map1<T, T>(x, out, [](T v) { return static_cast<T>(0 - static_cast<uint64_t>(v)); });
    case UnaryOp::Abs: return map1<T, T>(x, out, [](T v) { return v < 0 ? static_cast<T>(0 - static_cast<uint64_t>(v)) : v; });
    case UnaryOp::Sign: return map1<T, T>(x, out, [](T v) { return T((v > 0) - (v < 0)); });
    case UnaryOp::Relu: return map1<T, T>(x, out, [](T v) { return v > 0 ? v : T(0); });
    case UnaryOp::AddScalar: return map1<T, T>(x, out, [ia](T v) { return wrapping_add(v, ia); });
    case UnaryOp::MulScalar: return map1<T, T>(x, out, [ia](T v) { return wrapping_mul(v, ia); });
    case UnaryOp::RsubScalar: return map1<T, T>(x, out, [ia](T v) { return wrapping_add(ia, static_cast<T>(0 - static_cast<uint64_t>(v))); });
    case UnaryOp::Clamp: {
      constexpr T kMin = std::numeric_limits<T>::min(), kMax = std::numeric_limits<T>::max();
      const T lo = a < -0x1p63 ? kMin : a >= 0x1p63 ? kMax : convert_float<T>(std::ceil(a));
      const T hi = b >= 0x1p63 ? kMax : b < -0x1p63 ? kMin : convert_float<T>(std::floor(b));
      return map1<T, T>(x, out, [lo, hi](T v) {
        const T r = v < lo ? lo : v;
        return r > hi ? hi : r;
      });
    }
    default:
      KILN_FAIL("unary", "operation not defined for int64 tensors");
  }
}

template <class T>
bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    default: return a >= b;
  }
}

template <class T>
T arithmetic(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return wrapping_add(a, b);
    case BinaryOp::Sub:
      if constexpr (std::is_same_v<T, int64_t>) return static_cast<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
      else return T(a - b);
    case BinaryOp::Mul: return wrapping_mul(a, b);
    case BinaryOp::Div:
      if constexpr (std::is_same_v<T, bool>) {
        KILN_FAIL("binary", "division not defined for bool tensors");
      } else if constexpr (std::is_same_v<T, int64_t>) {
        KILN_CHECK(b != 0, "binary", "integer division by zero");
        return b == -1 ? static_cast<T>(0 - static_cast<uint64_t>(a)) : a / b;
      } else {
        return T(a / b);
      }
    case BinaryOp::Maximum: return (a != a || a > b) ? a : b;
    case BinaryOp::Minimum: return (a != a || a < b) ? a : b;
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case BinaryOp::ReluBackward: return b > T(0) ? a : T(0);
      case BinaryOp::GeluErfBackward: return a * gelu_erf_grad(b);
      case BinaryOp::GeluTanhBackward: return a * gelu_tanh_grad(b);
      case BinaryOp::TanhBackward: return a * (T(1) - b * b);
      case BinaryOp::SigmoidBackward: return a * b * (T(1) - b);
      case BinaryOp::SiluBackward: return a * silu_grad(b);
      default: break;
    }
  }
  KILN_FAIL("binary", "operation not defined for ", dtype_name(dtype_of<T>::value), " tensors");
}

// The accumulator of a reduction into D: int64 stays int64 (wrapping), the rest double.
template <class D> using Acc = std::conditional_t<std::is_same_v<D, int64_t>, int64_t, double>;

// Throws "[op] index 7 is out of bounds for dim 1 with size 4" for the first bad index.
void check_index_range(const char* op, const Tensor& index, int64_t dim, int64_t size) {
  const int64_t* pi = index.data<int64_t>();
  for_each_element<1>(index.shape(), {&index}, [&](const auto&, const auto& o) {
    const int64_t v = pi[o[0]];
    KILN_CHECK(v >= 0 && v < size, op, "index ", v, " is out of bounds for dim ", dim, " with size ", size);
  });
}

// t's strides over `shape` (the first shape.size() of them).
Tensor strided_as(const Tensor& t, const Shape& shape) {
  return kernel_views::view(t, shape, Strides(t.strides().begin(), t.strides().begin() + static_cast<int64_t>(shape.size())),
                            t.offset());
}

// Philox word i of the stream at (seed, block): word i % 4 of block (block + i / 4).
uint32_t stream_word(uint64_t seed, uint64_t block, int64_t i) {
  return philox4x32(seed, block + static_cast<uint64_t>(i) / 4)[static_cast<size_t>(i % 4)];
}

// out[i] = f(i) for contiguous out.
template <class F>
void fill_each(const Tensor& out, F f) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = convert<T>(f(i));
  });
}

}  // namespace

void ReferenceBackend::copy(const Tensor& src, const Tensor& dst) {
  KILN_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "copy",
             "the reference backend copies between CPU tensors only, got ", src.device().str(), " -> ",
             dst.device().str());
  visit_all(src.dtype(), [&](auto s) {
    using S = typename decltype(s)::type;
    visit_all(dst.dtype(), [&](auto d) {
      using D = typename decltype(d)::type;
      map1<D, S>(src, dst, [](S v) { return convert<D>(v); });
    });
  });
}

void ReferenceBackend::fill(const Tensor& dst, double value) {
  visit_all(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(value);
    T* o = dst.data<T>();
    for_each_element<1>(dst.shape(), {&dst}, [&](const auto&, const auto& off) { o[off[0]] = v; });
  });
}

void ReferenceBackend::arange(const Tensor& out, double start, double step) {
  fill_each(out, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}

void ReferenceBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  switch (x.dtype()) {
    case DType::Float32:
      return map1<float, float>(x, out, [=](float v) {
        return unary_value<float>(op, v, static_cast<float>(a), static_cast<float>(b));
      });
    case DType::Float64:
      return map1<double, double>(x, out, [=](double v) { return unary_value<double>(op, v, a, b); });
    case DType::Int64:
      return unary_int(op, x, out, a, b);
    default:
      KILN_FAIL("unary", "operation not defined for ", dtype_name(x.dtype()), " tensors");
  }
}

void ReferenceBackend::binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_comparison(op)) return map2<bool, T>(x, y, out, [op](T a, T b) { return compare(op, a, b); });
    map2<T, T>(x, y, out, [op](T a, T b) { return arithmetic(op, a, b); });
  });
}

void ReferenceBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for_each_element<4>(out.shape(), {&cond, &a, &b, &out},
                        [&](const auto&, const auto& o) { po[o[3]] = pc[o[0]] ? pa[o[1]] : pb[o[2]]; });
  });
}

// Each element of x folded into its output element (out seen over x's shape with stride 0
// along the reduced dims), in x's row-major order.
void ReferenceBackend::reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out,
                              const Tensor* indices) {
  // out is contiguous with x's shape but for the reduced dims (a caller may hand it
  // without the size-1 dims: a column sum's (N) for x (R, N)).
  Shape kept = x.shape();
  for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
  Strides spread = contiguous_strides(kept);
  for (int64_t d : dims) spread[static_cast<size_t>(d)] = 0;
  const Tensor target = kernel_views::view(out, x.shape(), spread, out.offset());
  const int64_t count = out.numel();
  const int64_t along = dims.front();  // the dim whose position `indices` records
  visit_dtype(x.dtype(), [&](auto xs) {
    using S = typename decltype(xs)::type;
    visit_dtype(out.dtype(), [&](auto os) {
      using D = typename decltype(os)::type;
      using A = Acc<D>;
      std::vector<A> acc(static_cast<size_t>(count), A(0));
      std::vector<int64_t> where(static_cast<size_t>(count), 0);
      std::vector<bool> seen(static_cast<size_t>(count), false);
      const S* px = x.data<S>();
      for_each_element<2>(x.shape(), {&x, &target}, [&](const std::vector<int64_t>& pos, const auto& o) {
        const auto k = static_cast<size_t>(o[1]);  // out is contiguous: its offset is its index
        const A v = convert<A>(px[o[0]]);
        if (op == ReduceOp::Sum) {
          acc[k] = wrapping_add(acc[k], v);
          return;
        }
        const bool better = !seen[k] || (acc[k] == acc[k] && (v != v || (op == ReduceOp::Max ? v > acc[k] : v < acc[k])));
        if (better) {
          acc[k] = v;
          where[k] = pos[static_cast<size_t>(along)];
          seen[k] = true;
        }
      });
      D* po = out.data<D>();
      for (int64_t k = 0; k < count; ++k) po[k] = convert<D>(acc[static_cast<size_t>(k)]);
      if (indices) {
        int64_t* pi = indices->data<int64_t>();
        for (int64_t k = 0; k < count; ++k) pi[k] = where[static_cast<size_t>(k)];
      }
    });
  });
}

// Per batch element: out (M, N) (+)= a (M, K) @ b (K, N), each row summed in double.
void ReferenceBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  const int64_t nd = out.dim(), M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  const Tensor ab = strided_as(a, batch), bb = strided_as(b, batch), ob = strided_as(out, batch);
  const int64_t sam = a.stride(nd - 2), sak = a.stride(nd - 1), sbk = b.stride(nd - 2), sbn = b.stride(nd - 1);
  const int64_t som = out.stride(nd - 2), son = out.stride(nd - 1);
  visit_floating("matmul", a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    std::vector<double> row(static_cast<size_t>(N));
    auto one = [&](const std::vector<int64_t>&, const std::array<int64_t, 3>& o) {
      for (int64_t i = 0; i < M; ++i) {
        std::fill(row.begin(), row.end(), 0.0);
        for (int64_t k = 0; k < K; ++k) {
          const double av = pa[o[0] + i * sam + k * sak];
          const T* brow = pb + o[1] + k * sbk;
          for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += av * static_cast<double>(brow[j * sbn]);
        }
        T* orow = po + o[2] + i * som;
        for (int64_t j = 0; j < N; ++j) {
          const T v = static_cast<T>(row[static_cast<size_t>(j)]);
          orow[j * son] = accumulate ? orow[j * son] + v : v;
        }
      }
    };
    if (batch.empty()) return one({}, {0, 0, 0});
    for_each_element<3>(batch, {&ab, &bb, &ob}, one);
  });
}

// The CPU backend's streams and formulas (cpu_random.cpp), one element at a time.
void ReferenceBackend::uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) {
  if (out.dtype() == kFloat32) {
    const float flo = static_cast<float>(lo), span = static_cast<float>(hi - lo);
    float* o = out.data<float>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = flo + span * uniform_float(stream_word(seed, block, i));
    return;
  }
  fill_each(out, [&](int64_t i) {
    const auto w = philox4x32(seed, block + static_cast<uint64_t>(i));
    return lo + (hi - lo) * uniform_double(w[0], w[1]);
  });
}

// Box-Muller on block (block + i): element i depends on that block alone.
void ReferenceBackend::normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) {
  fill_each(out, [&](int64_t i) {
    const auto w = philox4x32(seed, block + static_cast<uint64_t>(i));
    const double u1 = 1.0 - uniform_double(w[0], w[1]);
    const double u2 = uniform_double(w[2], w[3]);
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.28318530717958647692 * u2);
  });
}

void ReferenceBackend::bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) {
  const uint64_t threshold = cpu::bernoulli_threshold(p);
  fill_each(out, [&](int64_t i) { return static_cast<uint64_t>(stream_word(seed, block, i)) < threshold ? 1.0 : 0.0; });
}

void ReferenceBackend::randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const auto w = philox4x32(seed, block + static_cast<uint64_t>(i));
      const uint64_t r = (static_cast<uint64_t>(w[0]) << 32) | w[1];
      o[i] = convert<T>(lo + static_cast<int64_t>(r % static_cast<uint64_t>(hi - lo)));
    }
  });
}

// out[p] = x[p with p[dim] = index[p]], over index's positions.
void ReferenceBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  check_index_range("gather", index, dim, x.size(dim));
  const Tensor xv = kernel_views::view(x, index.shape(), x.strides(), x.offset());
  const int64_t sx = x.stride(dim);
  visit_all(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* pi = index.data<int64_t>();
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_element<3>(index.shape(), {&index, &out, &xv}, [&](const std::vector<int64_t>& pos, const auto& o) {
      po[o[1]] = px[o[2] + (pi[o[0]] - pos[static_cast<size_t>(dim)]) * sx];
    });
  });
}

// self[p with p[dim] = index[p]] (+)= src[p], in row-major order over index's positions
// (so along dim in index order: the last of repeated indices wins a plain scatter).
void ReferenceBackend::scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                               bool accumulate) {
  check_index_range(accumulate ? "scatter_add" : "scatter", index, dim, self.size(dim));
  const Tensor sv = kernel_views::view(self, index.shape(), self.strides(), self.offset());
  const int64_t ss = self.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t* pi = index.data<int64_t>();
    const T* pv = src.data<T>();
    T* ps = self.data<T>();
    for_each_element<3>(index.shape(), {&index, &src, &sv}, [&](const std::vector<int64_t>& pos, const auto& o) {
      T& dst = ps[o[2] + (pi[o[0]] - pos[static_cast<size_t>(dim)]) * ss];
      dst = accumulate ? wrapping_add(dst, pv[o[1]]) : pv[o[1]];
    });
  });
}

// self.select(dim, index[i]) += alpha * source.select(dim, i), i ascending.
void ReferenceBackend::index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                                 double alpha) {
  check_index_range("index_add", index, dim, self.size(dim));
  const Tensor sv = kernel_views::view(self, source.shape(), self.strides(), self.offset());
  Strides spread(source.shape().size(), 0);
  spread[static_cast<size_t>(dim)] = index.stride(0);
  const Tensor iv = kernel_views::view(index, source.shape(), spread, index.offset());
  const int64_t ss = self.stride(dim);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T a = convert<T>(alpha);
    const int64_t* pi = index.data<int64_t>();
    const T* pv = source.data<T>();
    T* ps = self.data<T>();
    for_each_element<3>(source.shape(), {&iv, &source, &sv}, [&](const std::vector<int64_t>& pos, const auto& o) {
      T& dst = ps[o[2] + (pi[o[0]] - pos[static_cast<size_t>(dim)]) * ss];
      dst = wrapping_add(dst, alpha == 1.0 ? pv[o[1]] : wrapping_mul(pv[o[1]], a));
    });
  });
}

ReferenceBackend& reference_backend() {
  static ReferenceBackend b;
  return b;
}

}  // namespace kiln
