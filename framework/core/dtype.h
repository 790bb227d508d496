#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>

namespace kiln {

enum class DType : uint8_t { Float32, Float64, Int64, Bool };

constexpr DType kFloat32 = DType::Float32;
constexpr DType kFloat64 = DType::Float64;
constexpr DType kInt64 = DType::Int64;
constexpr DType kBool = DType::Bool;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "int64", "bool"
inline bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
std::ostream& operator<<(std::ostream& os, DType t);

// The dtype two operands of an arithmetic op compute in, PyTorch's rules for tensors of
// equal rank: bool < int64 < float32 < float64.
DType promote_types(DType a, DType b);

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };

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

// Calls f(TypeTag<T>{}) with the C++ type of `t`.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::Float32: return f(TypeTag<float>{});
    case DType::Float64: return f(TypeTag<double>{});
    case DType::Int64: return f(TypeTag<int64_t>{});
    case DType::Bool: break;
  }
  return f(TypeTag<bool>{});
}

// Like visit_dtype, for the floating types only; other dtypes throw "[op] ...".
template <class F>
decltype(auto) visit_floating(const char* op, DType t, F&& f);

}  // namespace kiln

#include "error.h"

namespace kiln {
template <class F>
decltype(auto) visit_floating(const char* op, DType t, F&& f) {
  if (t == DType::Float64) return f(TypeTag<double>{});
  KILN_CHECK(t == DType::Float32, op, "expected a floating dtype (float32 or float64), got ",
             dtype_name(t));
  return f(TypeTag<float>{});
}
}  // namespace kiln
