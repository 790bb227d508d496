// Elementwise kernels: copy/cast, fill, arange, unary, binary and where over strided
// operands of one shape. (…) -> (…)
#include <cmath>
#include <limits>

#include "backend/cpu/vec_math.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/strided_loop.h"

namespace kiln::cpu {
namespace {

// Transcendental ops cost ~20x an add per element; split them across threads sooner.
constexpr int64_t kGrainHeavy = 4096;

template <class T>
constexpr T kInvSqrt2Pi = static_cast<T>(0.39894228040143267794);
template <class T>
constexpr T kSqrt2OverPi = static_cast<T>(0.79788456080286535588);
template <class T>
constexpr T kGeluC = static_cast<T>(0.044715);

// The activations and their derivatives, inlined into the maps' clones below.
// x Φ(x); Φ through vec::normal_cdf, which vectorizes for float32.
template <class T> KILN_INLINE_IN_CLONES T gelu_erf(T x) { return x * vec::normal_cdf(x); }
template <class T> KILN_INLINE_IN_CLONES T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + vec::tanh(kSqrt2OverPi<T> * (x + kGeluC<T> * x * x * x)));
}
template <class T> KILN_INLINE_IN_CLONES T gelu_erf_grad(T x) {
  return vec::normal_cdf(x) + x * kInvSqrt2Pi<T> * vec::exp(T(-0.5) * x * x);
}
template <class T> KILN_INLINE_IN_CLONES T gelu_tanh_grad(T x) {
  T u = kSqrt2OverPi<T> * (x + kGeluC<T> * x * x * x);
  T t = vec::tanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * kSqrt2OverPi<T> * (T(1) + T(3) * kGeluC<T> * x * x);
}
// 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below, so that exp never
// overflows; both from one exp(-|x|) and a select, which vectorizes for float32 (a branch
// around std::exp ran one element at a time: 8.5 ns an element).
template <class T> KILN_INLINE_IN_CLONES T sigmoid(T x) {
  const T e = vec::exp(-std::fabs(x));
  const T r = T(1) / (T(1) + e);
  return x >= T(0) ? r : e * r;
}

// x sigmoid(x) as torch computes it, x / (1 + exp(-x)): exp through vec::exp, which
// vectorizes for float32; exp(-x) = inf for very negative x gives -0.
template <class T> KILN_INLINE_IN_CLONES T silu(T x) { return x / (T(1) + vec::exp(-x)); }
template <class T> KILN_INLINE_IN_CLONES T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

// torch's softplus: linear above the threshold, where log1p(exp(bx))/b equals x to
// within rounding (and exp would overflow).
template <class T> KILN_INLINE_IN_CLONES T softplus(T x, T beta, T threshold) {
  T z = x * beta;
  return z > threshold ? x : vec::log1p(vec::exp(z)) / beta;
}

// The contiguous runs, compiled per vector ISA. o (n) = f(a (n)); o (n) = f(a (n), b (n)).
template <class O, class T, class F>
KILN_MULTIVERSION void contiguous_map1(O* o, const T* a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
}
template <class O, class T, class F>
KILN_MULTIVERSION void contiguous_map2(O* o, const T* a, const T* b,
                                       int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}

// out[i] = f(x[i]) with fast paths for contiguous runs.
template <class T, class O, class F>
void map1(const Tensor& x, const Tensor& out, F f, int64_t grain = kGrainElements) {
  for_each_strided<2>(
      {&out, &x},
      [f](std::array<char*, 2> p, const std::array<int64_t, 2>& s, int64_t n) {
        O* o = reinterpret_cast<O*>(p[0]);
        const T* a = reinterpret_cast<const T*>(p[1]);
        if (s[0] == sizeof(O) && s[1] == sizeof(T)) {
          contiguous_map1(o, a, n, f);
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<O*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
        }
      },
      grain);
}

// out[i] = f(x[i], y[i]) with fast paths for contiguous runs and a broadcast scalar side.
template <class T, class O, class F>
void map2(const Tensor& x, const Tensor& y, const Tensor& out, F f, int64_t grain = kGrainElements) {
  for_each_strided<3>(
      {&out, &x, &y},
      [f](std::array<char*, 3> p, const std::array<int64_t, 3>& s, int64_t n) {
        O* o = reinterpret_cast<O*>(p[0]);
        const T* a = reinterpret_cast<const T*>(p[1]);
        const T* b = reinterpret_cast<const T*>(p[2]);
        if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
          contiguous_map2(o, a, b, n, f);
        } else if (s[0] == sizeof(O) && s[1] == sizeof(T) && s[2] == 0) {
          const T bv = *b;
          contiguous_map1(o, a, n, [f, bv](T v) { return f(v, bv); });
        } else if (s[0] == sizeof(O) && s[1] == 0 && s[2] == sizeof(T)) {
          const T av = *a;
          contiguous_map1(o, b, n, [f, av](T v) { return f(av, v); });
        } else {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<O*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]),
                                                      *reinterpret_cast<const T*>(p[2] + i * s[2]));
        }
      },
      grain);
}

template <class T>
void unary_float(UnaryOp op, const Tensor& x, const Tensor& out, T a, T b) {
  switch (op) {
    case UnaryOp::Neg: return map1<T, T>(x, out, [](T v) { return -v; });
    case UnaryOp::Exp: return map1<T, T>(x, out, [](T v) { return vec::exp(v); }, kGrainHeavy);
    case UnaryOp::Log: return map1<T, T>(x, out, [](T v) { return vec::log(v); }, kGrainHeavy);
    case UnaryOp::Sqrt: return map1<T, T>(x, out, [](T v) { return std::sqrt(v); });
    case UnaryOp::Rsqrt: return map1<T, T>(x, out, [](T v) { return T(1) / std::sqrt(v); });
    case UnaryOp::Abs: return map1<T, T>(x, out, [](T v) { return std::abs(v); });
    case UnaryOp::Tanh: return map1<T, T>(x, out, [](T v) { return vec::tanh(v); }, kGrainHeavy);
    case UnaryOp::Sigmoid: return map1<T, T>(x, out, [](T v) { return sigmoid(v); }, kGrainHeavy);
    case UnaryOp::Relu: return map1<T, T>(x, out, [](T v) { return v < T(0) ? T(0) : v; });  // NaN stays NaN
    case UnaryOp::GeluErf: return map1<T, T>(x, out, [](T v) { return gelu_erf(v); }, kGrainHeavy);
    case UnaryOp::GeluTanh: return map1<T, T>(x, out, [](T v) { return gelu_tanh(v); }, kGrainHeavy);
    case UnaryOp::Sign: return map1<T, T>(x, out, [](T v) { return T((v > T(0)) - (v < T(0))); });
    case UnaryOp::Pow:
      // torch's own formulas for these exponents (so the same bits as torch's pow, where
      // x·x·x and 1/(x·x) round twice and powf once), without glibc's powf (11 ns).
      if (a == T(2)) return map1<T, T>(x, out, [](T v) { return v * v; });
      if (a == T(3)) return map1<T, T>(x, out, [](T v) { return v * v * v; });
      if (a == T(0.5)) return map1<T, T>(x, out, [](T v) { return std::sqrt(v); });
      if (a == T(-1)) return map1<T, T>(x, out, [](T v) { return T(1) / v; });
      if (a == T(-2)) return map1<T, T>(x, out, [](T v) { return T(1) / (v * v); });
      return map1<T, T>(x, out, [a](T v) { return std::pow(v, a); }, kGrainHeavy);
    case UnaryOp::Clamp:
      // min(max(v, a), b): NaN stays NaN and a > b gives b everywhere, as in PyTorch.
      return map1<T, T>(x, out, [a, b](T v) {
        T r = v < a ? a : v;
        return r > b ? b : r;
      });
    case UnaryOp::AddScalar: return map1<T, T>(x, out, [a](T v) { return v + a; });
    case UnaryOp::MulScalar: return map1<T, T>(x, out, [a](T v) { return v * a; });
    case UnaryOp::RsubScalar: return map1<T, T>(x, out, [a](T v) { return a - v; });
    case UnaryOp::RdivScalar: return map1<T, T>(x, out, [a](T v) { return a / v; });
    case UnaryOp::Sin: return map1<T, T>(x, out, [](T v) { return std::sin(v); }, kGrainHeavy);
    case UnaryOp::Cos: return map1<T, T>(x, out, [](T v) { return std::cos(v); }, kGrainHeavy);
    case UnaryOp::Tan: return map1<T, T>(x, out, [](T v) { return std::tan(v); }, kGrainHeavy);
    case UnaryOp::Erf: return map1<T, T>(x, out, [](T v) { return vec::erf(v); }, kGrainHeavy);
    case UnaryOp::Log1p: return map1<T, T>(x, out, [](T v) { return vec::log1p(v); }, kGrainHeavy);
    case UnaryOp::Expm1: return map1<T, T>(x, out, [](T v) { return vec::expm1(v); }, kGrainHeavy);
    case UnaryOp::Silu: return map1<T, T>(x, out, [](T v) { return silu(v); }, kGrainHeavy);
    case UnaryOp::Softplus: return map1<T, T>(x, out, [a, b](T v) { return softplus(v, a, b); }, kGrainHeavy);
  }
}

void unary_int(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  using T = int64_t;
  const T ia = convert_float<T>(a);  // the ops pass integral values only (float32 otherwise)
  switch (op) {
    case UnaryOp::Neg: return map1<T, T>(x, out, [](T v) { return -v; });
    case UnaryOp::Abs: return map1<T, T>(x, out, [](T v) { return v < 0 ? -v : v; });
    case UnaryOp::Sign: return map1<T, T>(x, out, [](T v) { return T((v > 0) - (v < 0)); });
    case UnaryOp::Relu: return map1<T, T>(x, out, [](T v) { return v > 0 ? v : T(0); });
    case UnaryOp::AddScalar: return map1<T, T>(x, out, [ia](T v) { return v + ia; });
    case UnaryOp::MulScalar: return map1<T, T>(x, out, [ia](T v) { return v * ia; });
    case UnaryOp::RsubScalar: return map1<T, T>(x, out, [ia](T v) { return ia - v; });
    case UnaryOp::Clamp: {
      // Bounds past int64 (infinities included) saturate: a cast would be undefined.
      constexpr T kMin = std::numeric_limits<T>::min(), kMax = std::numeric_limits<T>::max();
      T lo = a < -0x1p63 ? kMin : a >= 0x1p63 ? kMax : convert_float<T>(std::ceil(a));
      T hi = b >= 0x1p63 ? kMax : b < -0x1p63 ? kMin : convert_float<T>(std::floor(b));
      return map1<T, T>(x, out, [lo, hi](T v) {
        T r = v < lo ? lo : v;
        return r > hi ? hi : r;  // lo > hi gives hi, as in PyTorch
      });
    }
    default:
      KILN_FAIL("unary", "operation not defined for int64 tensors");
  }
}

template <class T>
void compare(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  switch (op) {
    case BinaryOp::Eq: return map2<T, bool>(x, y, out, [](T a, T b) { return a == b; });
    case BinaryOp::Ne: return map2<T, bool>(x, y, out, [](T a, T b) { return a != b; });
    case BinaryOp::Lt: return map2<T, bool>(x, y, out, [](T a, T b) { return a < b; });
    case BinaryOp::Le: return map2<T, bool>(x, y, out, [](T a, T b) { return a <= b; });
    case BinaryOp::Gt: return map2<T, bool>(x, y, out, [](T a, T b) { return a > b; });
    case BinaryOp::Ge: return map2<T, bool>(x, y, out, [](T a, T b) { return a >= b; });
    default: break;
  }
}

template <class T>
void arithmetic(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  switch (op) {
    case BinaryOp::Add: return map2<T, T>(x, y, out, [](T a, T b) { return T(a + b); });
    case BinaryOp::Sub: return map2<T, T>(x, y, out, [](T a, T b) { return T(a - b); });
    case BinaryOp::Mul: return map2<T, T>(x, y, out, [](T a, T b) { return T(a * b); });
    case BinaryOp::Div: return map2<T, T>(x, y, out, [](T a, T b) { return T(a / b); });
    case BinaryOp::Maximum:
      return map2<T, T>(x, y, out, [](T a, T b) { return (a != a || a > b) ? a : b; });
    case BinaryOp::Minimum:
      return map2<T, T>(x, y, out, [](T a, T b) { return (a != a || a < b) ? a : b; });
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case BinaryOp::ReluBackward:
        return map2<T, T>(x, y, out, [](T g, T v) { return v > T(0) ? g : T(0); });
      case BinaryOp::GeluErfBackward:
        return map2<T, T>(x, y, out, [](T g, T v) { return g * gelu_erf_grad(v); }, kGrainHeavy);
      case BinaryOp::GeluTanhBackward:
        return map2<T, T>(x, y, out, [](T g, T v) { return g * gelu_tanh_grad(v); }, kGrainHeavy);
      case BinaryOp::TanhBackward:
        return map2<T, T>(x, y, out, [](T g, T t) { return g * (T(1) - t * t); });
      case BinaryOp::SigmoidBackward:
        return map2<T, T>(x, y, out, [](T g, T s) { return g * s * (T(1) - s); });
      case BinaryOp::SiluBackward:
        return map2<T, T>(x, y, out, [](T g, T v) { return g * silu_grad(v); }, kGrainHeavy);
      default: break;
    }
  }
  KILN_FAIL("binary", "operation not defined for ", dtype_name(x.dtype()), " tensors");
}

// dst = f(src) where src is laid out as a transpose of dst: dst (…, J, …, I) contiguous
// along I, src contiguous along J instead. The element walk reads src one element a row,
// the rows a page apart when they are long: a TLB miss an element ((4096, 1024).t() copied
// at 7.4 ns an element on one Zen 4 core). Here blocks of kTransposeBlock x
// kTransposeBlock (each side's rows within the second-level TLB, its bytes within L2) go
// in tiles of kTransposeTile x kTransposeTile (each side's lines within L1), so every
// cache line of either side is read or written once. Returns false, having done nothing,
// for any other pair of layouts.
constexpr int64_t kTransposeTile = 16, kTransposeBlock = 256;

// One block of transposed_map1: dst's rows [j0, j1) (dst_j bytes apart), elements
// [i0, i1) of each, from src (contiguous along j, src_i bytes apart along i), in tiles of
// kTransposeTile x kTransposeTile.
template <class S, class D, class F>
void transpose_block(char* dst, int64_t dst_j, const char* src, int64_t src_i, int64_t j0, int64_t j1, int64_t i0,
                     int64_t i1, F f) {
  for (int64_t jt = j0; jt < j1; jt += kTransposeTile) {
    const int64_t jt1 = std::min(j1, jt + kTransposeTile);
    for (int64_t it = i0; it < i1; it += kTransposeTile) {
      const int64_t it1 = std::min(i1, it + kTransposeTile);
      for (int64_t j = jt; j < jt1; ++j) {
        D* out = reinterpret_cast<D*>(dst + j * dst_j);
        const char* in = src + j * static_cast<int64_t>(sizeof(S));
        for (int64_t i = it; i < it1; ++i) out[i] = f(*reinterpret_cast<const S*>(in + i * src_i));
      }
    }
  }
}

template <class S, class D, class F>
bool transposed_map1(const Tensor& src, const Tensor& dst, F f) {
  const StridedLayout<2> L = make_layout<2>({&dst, &src});
  const int inner = static_cast<int>(L.sizes.size()) - 1;
  if (inner < 1 || L.strides[0][inner] != static_cast<int64_t>(sizeof(D)) ||
      L.strides[1][inner] == static_cast<int64_t>(sizeof(S)))
    return false;
  int jd = -1;  // the dim along which src is contiguous
  for (int d = 0; d < inner; ++d)
    if (L.strides[1][d] == static_cast<int64_t>(sizeof(S))) jd = d;
  const int64_t I = L.sizes[inner];
  if (jd < 0 || I < kTransposeTile || L.sizes[jd] < kTransposeTile) return false;
  const int64_t J = L.sizes[jd];
  // Every other dim: walked one (J, I) plane at a time.
  std::vector<int64_t> sizes, dst_strides, src_strides;
  for (int d = 0; d < inner; ++d) {
    if (d == jd) continue;
    sizes.push_back(L.sizes[d]);
    dst_strides.push_back(L.strides[0][d]);
    src_strides.push_back(L.strides[1][d]);
  }
  int64_t planes = 1;
  for (int64_t n : sizes) planes *= n;
  const int64_t j_blocks = (J + kTransposeBlock - 1) / kTransposeBlock;
  const int64_t dst_j = L.strides[0][jd], src_i = L.strides[1][inner];  // bytes
  // One work item: a band of kTransposeBlock values of J across all of I.
  const int64_t grain = std::max<int64_t>(1, kGrainElements / (kTransposeBlock * I));
  parallel_for(planes * j_blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t plane = item / j_blocks;
      const int64_t jb0 = item % j_blocks * kTransposeBlock, jb1 = std::min(J, jb0 + kTransposeBlock);
      char* d0 = L.base[0];
      const char* s0 = L.base[1];
      for (int64_t k = static_cast<int64_t>(sizes.size()) - 1; k >= 0; --k) {
        const int64_t at = plane % sizes[k];
        plane /= sizes[k];
        d0 += at * dst_strides[k];
        s0 += at * src_strides[k];
      }
      for (int64_t ib0 = 0; ib0 < I; ib0 += kTransposeBlock)
        transpose_block<S, D>(d0, dst_j, s0, src_i, jb0, jb1, ib0, std::min(I, ib0 + kTransposeBlock), f);
    }
  });
  return true;
}

template <class S, class D>
void cast_copy(const Tensor& src, const Tensor& dst) {
  const auto convert = [](S v) {
    if constexpr (std::is_floating_point_v<S>) {
      return convert_float<D>(v);  // NaN to int64 is defined there
    } else {
      return static_cast<D>(v);
    }
  };
  if (!transposed_map1<S, D>(src, dst, convert)) map1<S, D>(src, dst, convert);
}

}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  KILN_CHECK(src.device().is_cpu() && dst.device().is_cpu(), "copy",
             "the CPU backend copies between CPU tensors only, got ", src.device().str(), " -> ",
             dst.device().str());
  if (src.dtype() == kBFloat16 || dst.dtype() == kBFloat16) return copy_bfloat16(src, dst);
  visit_dtype(src.dtype(), [&](auto s) {
    using S = typename decltype(s)::type;
    visit_dtype(dst.dtype(), [&](auto d) {
      using D = typename decltype(d)::type;
      if constexpr (std::is_same_v<D, bool>) {
        map1<S, bool>(src, dst, [](S v) { return v != S(0); });
      } else {
        cast_copy<S, D>(src, dst);
      }
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  if (dst.dtype() == kBFloat16) return fill_bfloat16(dst, value);
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert_float<T>(value);
    for_each_strided<1>({&dst}, [v](std::array<char*, 1> p, const std::array<int64_t, 1>& s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

void CpuBackend::arange(const Tensor& out, double start, double step) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = convert_float<T>(start + static_cast<double>(i) * step);
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  switch (x.dtype()) {
    case DType::Float32:
      return unary_float<float>(op, x, out, static_cast<float>(a), static_cast<float>(b));
    case DType::Float64: return unary_float<double>(op, x, out, a, b);
    case DType::Int64: return unary_int(op, x, out, a, b);
    case DType::Bool: KILN_FAIL("unary", "operation not defined for bool tensors");
    case DType::BFloat16: break;
  }
  detail::fail_unvisitable("unary", x.dtype());
}

void CpuBackend::binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_comparison(op)) return compare<T>(op, x, y, out);
    arithmetic<T>(op, x, y, out);
  });
}

namespace {

// o (n) = c (n) ? a : b over contiguous runs, a and b each a run or one broadcast value
// (masked_fill's). The condition is read as bytes and both sides loaded before the
// select: GCC vectorizes that into blends, not a loop over bool with conditional loads,
// which ran a branch an element, mispredicted on a random mask (5 ns an element).
template <class T>
KILN_MULTIVERSION void where_runs(T* o, const uint8_t* c, const T* a, bool a_one, const T* b, bool b_one, int64_t n) {
  if (n <= 0) return;
  auto run = [&](auto at, auto bt) {
    for (int64_t i = 0; i < n; ++i) {
      const T x = at(i), y = bt(i);
      o[i] = c[i] != 0 ? x : y;
    }
  };
  const T av = *a, bv = *b;
  auto a_run = [a](int64_t i) { return a[i]; };
  auto b_run = [b](int64_t i) { return b[i]; };
  auto a_val = [av](int64_t) { return av; };
  auto b_val = [bv](int64_t) { return bv; };
  if (!a_one && !b_one) run(a_run, b_run);
  else if (a_one && !b_one) run(a_val, b_run);
  else if (!a_one) run(a_run, b_val);
  else run(a_val, b_val);
}

}  // namespace

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_strided<4>(
        {&out, &cond, &a, &b},
        [](std::array<char*, 4> p, const std::array<int64_t, 4>& s, int64_t n) {
          const bool runs = s[0] == sizeof(T) && s[1] == sizeof(bool) && (s[2] == sizeof(T) || s[2] == 0) &&
                            (s[3] == sizeof(T) || s[3] == 0);
          if (runs) {
            return where_runs(reinterpret_cast<T*>(p[0]), reinterpret_cast<const uint8_t*>(p[1]),
                              reinterpret_cast<const T*>(p[2]), s[2] == 0, reinterpret_cast<const T*>(p[3]), s[3] == 0,
                              n);
          }
          for (int64_t i = 0; i < n; ++i) {
            bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                c ? *reinterpret_cast<const T*>(p[2] + i * s[2]) : *reinterpret_cast<const T*>(p[3] + i * s[3]);
          }
        });
  });
}

bool CpuBackend::supports(Kernel kernel, DType in, DType out) const {
  return supports_autocast_forms(kernel, in, out);
}

CpuBackend& cpu_backend() {
  static CpuBackend b;
  return b;
}

DimSplit split_at_dim(const Shape& shape, int64_t dim) {
  DimSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < dim) s.outer *= shape[i];
    else if (i == dim) s.n = shape[i];
    else s.inner *= shape[i];
  }
  return s;
}

}  // namespace kiln::cpu
