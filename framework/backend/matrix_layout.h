#pragma once
// How a BLAS (OpenBLAS, oneDNN or cuBLAS) can read the last two dims of a tensor: row-major
// with a leading dimension, or the transpose of that, and its batches at one stride.
// Shared by every backend's matmul.
#include <algorithm>
#include <cstdint>

#include "../core/tensor.h"

namespace kiln {

struct MatLayout {
  bool trans = false;  // stored transposed (element (i, j) at i + j·ld)
  int64_t ld = 0;
};

// The layout of t's last two dims (rows, cols), or false when no BLAS layout fits
// (stride-0 rows, arbitrary strides): the caller copies t to contiguous then.
inline bool blas_layout(const Tensor& t, MatLayout& out) {
  const int64_t nd = t.dim();
  const int64_t rows = t.size(nd - 2), cols = t.size(nd - 1);
  int64_t rs = t.stride(nd - 2), cs = t.stride(nd - 1);
  if (cols == 1) cs = 1;  // a size-1 dim's stride is arbitrary
  if (rows == 1) rs = std::max<int64_t>(cols, 1);
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) {
    out = {false, rs};
    return true;
  }
  if (rows == 1) rs = 1;
  if (cols == 1) cs = std::max<int64_t>(rows, 1);
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) {
    out = {true, cs};
    return true;
  }
  return false;
}

// The single stride s with batch i at element offset i·s, if t's batch dims (all but
// the last two, flattened row-major) have one: each dim of size > 1 must step by s
// times the number of batches the dims inside it span. (A broadcast batch: s = 0.)
inline bool uniform_batch_stride(const Tensor& t, int64_t& stride) {
  stride = 0;
  int64_t span = 0;  // batches spanned by the dims inside d; 0 before the first of size > 1
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    const int64_t size = t.size(d);
    if (size == 1) continue;
    if (span == 0) {
      stride = t.stride(d);
      span = size;
      continue;
    }
    if (t.stride(d) != stride * span) return false;
    span *= size;
  }
  return true;
}

}  // namespace kiln
