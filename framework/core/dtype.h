#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>

#include "bfloat16.h"

namespace kiln {

// BFloat16 last: the values of the others stay what they were.
enum class DType : uint8_t { Float32, Float64, Int64, Bool, BFloat16 };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;
constexpr DType kBFloat16 = DType::BFloat16;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "int64", "bool", "bfloat16"
inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16;
}
std::ostream& operator<<(std::ostream& os, DType t);

// The dtype two operands of an arithmetic op compute in, PyTorch's rules for tensors of
// equal rank: bool < int64 < bfloat16 < float32 < float64.
DType promote_types(DType a, DType b);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BFloat16; };

template <class T> struct TypeTag { using type = T; };

// A floating value as T without undefined behaviour. For int64: truncated toward zero
// when it fits; NaN and values outside int64's range give INT64_MIN, what x86 converts
// them to (so PyTorch there), where a plain static_cast is undefined. bool: v != 0.
// Ops that can name the value refuse it first (fits_int64); kernels rely on this.
inline bool fits_int64(double v) { return v >= -0x1p63 && v < 0x1p63; }  // false for NaN
template <class T, class F>
inline T convert_float(F v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    return fits_int64(static_cast<double>(v)) ? static_cast<int64_t>(v) : INT64_MIN;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != F(0);
  } else {
    return static_cast<T>(v);
  }
}

// Calls f(TypeTag<T>{}) with the C++ type of `t`: float32, float64, int64 or bool.
// bfloat16 throws "[kernel] no kernel for bfloat16 …": kernels other than copy and fill
// never see it (backend/bfloat16_staged.cpp runs them on float32 copies), so reaching
// here with it is a bug to report, never a value to reinterpret.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f);

// Like visit_dtype, for float32 and float64 only; other dtypes throw "[op] ...".
template <class F>
decltype(auto) visit_floating(const char* op, DType t, F&& f);

}  // namespace kiln

#include "error.h"

namespace kiln {
namespace detail {
[[noreturn]] void fail_unvisitable(const char* op, DType t);
}  // namespace detail

template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Int64: return f(TypeTag<int64_t>{});
    case DType::Bool: return f(TypeTag<bool>{});
    case DType::BFloat16: break;
  }
  detail::fail_unvisitable("kernel", t);
}

template <class F>
decltype(auto) visit_floating(const char* op, DType t, F&& f) {
  if (t == DType::Float64) return f(TypeTag<double>{});
  if (t != DType::Float32) detail::fail_unvisitable(op, t);
  return f(TypeTag<float>{});
}
}  // namespace kiln
