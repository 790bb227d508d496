// Embedding lookup and its scatter-add backward.
// weight (num, D), indices (*) int64 -> out (*, D).
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

void check_indices(const int64_t* idx, int64_t count, int64_t num) {
  for (int64_t i = 0; i < count; ++i) {
    KILN_CHECK(idx[i] >= 0 && idx[i] < num, "embedding", "index ", idx[i],
               " out of range for an embedding of ", num, " rows (at position ", i, ")");
  }
}

}  // namespace

void CpuBackend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t num = weight.size(0), D = weight.size(1), count = indices.numel();
  const int64_t* idx = indices.data<int64_t>();
  check_indices(idx, count, num);
  const size_t row_bytes = static_cast<size_t>(D) * weight.element_size();
  const char* w = static_cast<const char*>(weight.data_ptr());
  char* o = static_cast<char*>(out.data_ptr());
  parallel_for(count, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(D, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(o + i * row_bytes, w + idx[i] * row_bytes, row_bytes);
  });
}

// grad_weight (num, D) zero-filled by the caller; g (count, D).
void CpuBackend::embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                                    const Tensor& grad_weight) {
  const int64_t D = grad_weight.size(1), count = indices.numel();
  const int64_t* idx = indices.data<int64_t>();
  check_indices(idx, count, grad_weight.size(0));
  visit_floating("embedding_backward", g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = g.data<T>();
    T* pw = grad_weight.data<T>();
    // Columns are independent: split D across threads so no two write the same element.
    parallel_for(D, std::max<int64_t>(16, kGrainElements / std::max<int64_t>(count, 1)), [&](int64_t d0, int64_t d1) {
      for (int64_t i = 0; i < count; ++i) {
        if (idx[i] == padding_idx) continue;
        T* row = pw + idx[i] * D;
        const T* gr = pg + i * D;
        for (int64_t d = d0; d < d1; ++d) row[d] += gr[d];
      }
    });
  });
}

}  // namespace kiln::cpu
