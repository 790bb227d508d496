#include "core/dtype.h"

namespace kiln {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::Bool: return 1;
    case DType::BFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
    case DType::BFloat16: return "bfloat16";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

DType promote_types(DType a, DType b) {
  auto rank = [](DType t) {
    switch (t) {
      case DType::Bool: return 0;
      case DType::Int64: return 1;
      case DType::BFloat16: return 2;
      case DType::Float32: return 3;
      case DType::Float64: return 4;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

void detail::fail_unvisitable(const char* op, DType t) {
  if (t == DType::BFloat16) {
    // Kernels other than copy and fill get float32 copies of bfloat16 tensors (the
    // Backend that backend_for returns stages them): a kernel called around it lands here.
    KILN_FAIL(op, "no kernel for bfloat16 tensors here (bfloat16 runs through float32 copies; "
              "call the kernel through backend_for, or convert with .to(kFloat32))");
  }
  KILN_FAIL(op, "expected a floating dtype (float32 or float64), got ", dtype_name(t));
}

}  // namespace kiln
