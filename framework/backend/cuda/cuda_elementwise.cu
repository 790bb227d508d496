// Elementwise kernels: fill, arange, unary, binary (with the fused backward helpers and
// the comparisons to bool) and where, over strided operands of one shape:
//   x (…) [, y (…)] -> out (…), any strides (broadcast inputs have stride 0).
// The op is a kernel argument switched per element: one branch taken by every thread,
// no lambdas, one kernel per dtype.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// ---------------------------------------------------------------- math, as the CPU's
template <class T> __device__ inline T dexp(T v) { return exp(v); }
template <class T> __device__ inline T dlog(T v) { return log(v); }
template <class T> __device__ inline T dsqrt(T v) { return sqrt(v); }
template <class T> __device__ inline T dtanh(T v) { return tanh(v); }
template <class T> __device__ inline T derfc(T v) { return erfc(v); }
template <class T> __device__ inline T dpow(T v, T e) { return pow(v, e); }
template <class T> __device__ inline T dlog1p(T v) { return log1p(v); }

template <class T> __device__ inline T normal_cdf(T x) { return T(0.5) * derfc(-x * T(0.70710678118654752440)); }
template <class T> __device__ inline T gelu_erf(T x) { return x * normal_cdf(x); }
template <class T> __device__ inline T gelu_tanh(T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  return T(0.5) * x * (T(1) + dtanh(k * (x + c * x * x * x)));
}
template <class T> __device__ inline T gelu_erf_grad(T x) {
  return normal_cdf(x) + x * T(0.39894228040143267794) * dexp(T(-0.5) * x * x);
}
template <class T> __device__ inline T gelu_tanh_grad(T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  T u = k * (x + c * x * x * x);
  T t = dtanh(u);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
}
template <class T> __device__ inline T sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + dexp(-x));  // split by sign: exp never overflows
  T e = dexp(x);
  return e / (T(1) + e);
}

// x / (1 + exp(-x)), torch's form (-0 where exp(-x) overflows).
template <class T> __device__ inline T silu(T x) { return x / (T(1) + dexp(-x)); }
template <class T> __device__ inline T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
// Linear above the threshold, as torch.
template <class T> __device__ inline T softplus(T x, T beta, T threshold) {
  T z = x * beta;
  return z > threshold ? x : dlog1p(dexp(z)) / beta;
}

// ---------------------------------------------------------------- fill, arange
// dst (…) = v
template <class T>
__global__ void fill_kernel(Strided<1> L, T* dst, T v, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[1];
    L.offsets(i, off);
    dst[off[0]] = v;
  }
}

// out (n) = start + i * step, rounded as the CPU rounds it (no fused multiply-add).
template <class T>
__global__ void arange_kernel(T* out, double start, double step, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) out[i] = static_cast<T>(add_rn(start, mul_rn(static_cast<double>(i), step)));
}

// ---------------------------------------------------------------- unary
// out (…) = op(x (…), a, b), floating T.
template <class T>
__device__ inline T unary_float(UnaryOp op, T v, T a, T b) {
  switch (op) {
    case UnaryOp::Neg: return -v;
    case UnaryOp::Exp: return dexp(v);
    case UnaryOp::Log: return dlog(v);
    case UnaryOp::Sqrt: return dsqrt(v);
    case UnaryOp::Rsqrt: return T(1) / dsqrt(v);
    case UnaryOp::Abs: return fabs(v);
    case UnaryOp::Tanh: return dtanh(v);
    case UnaryOp::Sigmoid: return sigmoid(v);
    case UnaryOp::Relu: return v < T(0) ? T(0) : v;  // NaN stays NaN
    case UnaryOp::GeluErf: return gelu_erf(v);
    case UnaryOp::GeluTanh: return gelu_tanh(v);
    case UnaryOp::Sign: return T((v > T(0)) - (v < T(0)));
    case UnaryOp::Pow:
      // The CPU's formulas for these exponents (torch's): the same bits on both.
      if (a == T(2)) return v * v;
      if (a == T(3)) return v * v * v;
      if (a == T(0.5)) return dsqrt(v);
      if (a == T(-1)) return T(1) / v;
      if (a == T(-2)) return T(1) / (v * v);
      return dpow(v, a);
    case UnaryOp::Clamp: {  // min(max(v, a), b): NaN stays NaN, a > b gives b
      T r = v < a ? a : v;
      return r > b ? b : r;
    }
    case UnaryOp::AddScalar: return v + a;
    case UnaryOp::MulScalar: return v * a;
    case UnaryOp::RsubScalar: return a - v;
    case UnaryOp::RdivScalar: return a / v;
    case UnaryOp::Sin: return sin(v);
    case UnaryOp::Cos: return cos(v);
    case UnaryOp::Tan: return tan(v);
    case UnaryOp::Erf: return erf(v);
    case UnaryOp::Log1p: return dlog1p(v);
    case UnaryOp::Expm1: return expm1(v);
    case UnaryOp::Silu: return silu(v);
    case UnaryOp::Softplus: return softplus(v, a, b);
  }
  return v;
}

// out (…) = op(x (…)) for int64; `a` the scalar, [lo, hi] the clamp bounds (host-rounded).
__device__ inline int64_t unary_int(UnaryOp op, int64_t v, int64_t a, int64_t lo, int64_t hi) {
  switch (op) {
    case UnaryOp::Neg: return -v;
    case UnaryOp::Abs: return v < 0 ? -v : v;
    case UnaryOp::Sign: return (v > 0) - (v < 0);
    case UnaryOp::Relu: return v > 0 ? v : 0;
    case UnaryOp::AddScalar: return v + a;
    case UnaryOp::MulScalar: return v * a;
    case UnaryOp::RsubScalar: return a - v;
    case UnaryOp::Clamp: {
      int64_t r = v < lo ? lo : v;
      return r > hi ? hi : r;  // lo > hi gives hi, as in PyTorch
    }
    default: return v;  // rejected on the host
  }
}

// out (…) = op(x (…)), floating T
template <class T>
__global__ void unary_float_kernel(Strided<2> L, T* out, const T* x, UnaryOp op, T a, T b, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    L.offsets(i, off);
    out[off[0]] = unary_float(op, x[off[1]], a, b);
  }
}

// out (…) = op(x (…)), int64
__global__ void unary_int_kernel(Strided<2> L, int64_t* out, const int64_t* x, UnaryOp op, int64_t a, int64_t lo,
                                 int64_t hi, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[2];
    L.offsets(i, off);
    out[off[0]] = unary_int(op, x[off[1]], a, lo, hi);
  }
}

// ---------------------------------------------------------------- binary
template <class T>
__device__ inline bool compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return false;
  }
}

// The CPU's T(a op b): bool operands go through int and back (Maximum/Minimum of bools
// are logical or/and). Floating-only ops are rejected on the host for other types.
template <class T>
__device__ inline T arithmetic(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return T(a + b);
    case BinaryOp::Sub: return T(a - b);
    case BinaryOp::Mul: return T(a * b);
    case BinaryOp::Div:
      if constexpr (std::is_floating_point_v<T>) return a / b;
      else return b == T(0) ? T(0) : T(a / b);  // the CPU traps here; no op sends it
    case BinaryOp::Maximum: return (a != a || a > b) ? a : b;
    case BinaryOp::Minimum: return (a != a || a < b) ? a : b;
    default: break;
  }
  if constexpr (std::is_floating_point_v<T>) {
    // (g, saved) -> the input's gradient
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
  return a;
}

// out (…) = op(x (…), y (…)): a comparison to bool (kCompare) or arithmetic in T.
template <class T, bool kCompare>
__global__ void binary_kernel(Strided<3> L, std::conditional_t<kCompare, bool, T>* out, const T* x, const T* y,
                              BinaryOp op, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[3];
    L.offsets(i, off);
    if constexpr (kCompare) {
      out[off[0]] = compare(op, x[off[1]], y[off[2]]);
    } else {
      out[off[0]] = arithmetic(op, x[off[1]], y[off[2]]);
    }
  }
}

// ---------------------------------------------------------------- where
// out (…) = cond (…) ? a (…) : b (…)
template <class T>
__global__ void where_kernel(Strided<4> L, T* out, const bool* cond, const T* a, const T* b, int64_t n) {
  KILN_GRID_STRIDE_LOOP(i, n) {
    int64_t off[4];
    L.offsets(i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

bool floating_only(BinaryOp op) {
  return op == BinaryOp::ReluBackward || op == BinaryOp::GeluErfBackward || op == BinaryOp::GeluTanhBackward ||
         op == BinaryOp::TanhBackward || op == BinaryOp::SigmoidBackward || op == BinaryOp::SiluBackward;
}

}  // namespace

void CudaBackend::fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  DeviceGuard guard(dst);
  Strided<1> L = make_strided<1>("fill", {&dst});
  if (dst.dtype() == kBFloat16) {  // the bits, rounded here as on the CPU
    const uint16_t bits = bf16_bits_from_float(static_cast<float>(value));
    fill_kernel<uint16_t><<<grid_for(n), kThreads, 0, stream_of(dst)>>>(L, static_cast<uint16_t*>(dst.data_ptr()),
                                                                        bits, n);
    KILN_CUDA_LAUNCH_CHECK("fill");
    return;
  }
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_kernel<T><<<grid_for(n), kThreads, 0, stream_of(dst)>>>(L, static_cast<T*>(dst.data_ptr()),
                                                                 static_cast<T>(value), n);
  });
  KILN_CUDA_LAUNCH_CHECK("fill");
}

void CudaBackend::arange(const Tensor& out, double start, double step) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    arange_kernel<T><<<grid_for(n), kThreads, 0, stream_of(out)>>>(static_cast<T*>(out.data_ptr()), start, step, n);
  });
  KILN_CUDA_LAUNCH_CHECK("arange");
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  const int64_t n = x.numel();
  if (x.dtype() == kBool) KILN_FAIL("unary", "operation not defined for bool tensors");
  if (x.dtype() == kInt64) {
    const bool int_op = op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Sign || op == UnaryOp::Relu ||
                        op == UnaryOp::AddScalar || op == UnaryOp::MulScalar || op == UnaryOp::RsubScalar ||
                        op == UnaryOp::Clamp;
    KILN_CHECK(int_op, "unary", "operation not defined for int64 tensors");
  }
  if (n == 0) return;
  DeviceGuard guard(out);
  Strided<2> L = make_strided<2>("unary", {&out, &x});
  cudaStream_t s = stream_of(out);
  switch (x.dtype()) {
    case DType::Float32:
      unary_float_kernel<float><<<grid_for(n), kThreads, 0, s>>>(L, out.data<float>(), x.data<float>(), op,
                                                                 static_cast<float>(a), static_cast<float>(b), n);
      break;
    case DType::Float64:
      unary_float_kernel<double><<<grid_for(n), kThreads, 0, s>>>(L, out.data<double>(), x.data<double>(), op, a, b, n);
      break;
    case DType::Int64: {
      using I = int64_t;
      const I lo = std::isinf(a) ? std::numeric_limits<I>::min() : static_cast<I>(std::ceil(a));
      const I hi = std::isinf(b) ? std::numeric_limits<I>::max() : static_cast<I>(std::floor(b));
      unary_int_kernel<<<grid_for(n), kThreads, 0, s>>>(L, out.data<I>(), x.data<I>(), op, static_cast<I>(a), lo, hi,
                                                         n);
      break;
    }
    case DType::Bool: break;
    case DType::BFloat16: detail::fail_unvisitable("unary", x.dtype());  // staged as float32
  }
  KILN_CUDA_LAUNCH_CHECK("unary");
}

void CudaBackend::binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) {
  KILN_CHECK(!floating_only(op) || is_floating(x.dtype()), "binary", "operation not defined for ",
             dtype_name(x.dtype()), " tensors");
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  Strided<3> L = make_strided<3>("binary", {&out, &x, &y});
  cudaStream_t s = stream_of(out);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* py = static_cast<const T*>(y.data_ptr());
    if (is_comparison(op)) {
      binary_kernel<T, true><<<grid_for(n), kThreads, 0, s>>>(L, out.data<bool>(), px, py, op, n);
    } else {
      binary_kernel<T, false><<<grid_for(n), kThreads, 0, s>>>(L, static_cast<T*>(out.data_ptr()), px, py, op, n);
    }
  });
  KILN_CUDA_LAUNCH_CHECK("binary");
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  Strided<4> L = make_strided<4>("where", {&out, &cond, &a, &b});
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_kernel<T><<<grid_for(n), kThreads, 0, stream_of(out)>>>(L, static_cast<T*>(out.data_ptr()),
                                                                  cond.data<bool>(),
                                                                  static_cast<const T*>(a.data_ptr()),
                                                                  static_cast<const T*>(b.data_ptr()), n);
  });
  KILN_CUDA_LAUNCH_CHECK("where");
}

}  // namespace kiln::cuda
