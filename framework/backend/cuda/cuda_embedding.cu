// Embedding lookup and its scatter-add backward:
//   weight (num, D), indices (count) int64 -> out (count, D);  g (count, D) -> grad_weight (num, D) +=.
// An index out of range is the CPU's error, "[embedding] index … out of range …": the
// kernel records the first bad position in a device word, the host reads it back (a
// wait for the device, the price of the check) and throws.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_index_check.h"
#include "backend/cuda/cuda_launch.cuh"

namespace kiln::cuda {
namespace {

// bad: min over positions i with idx[i] outside [0, num).
__global__ void check_indices_kernel(const int64_t* idx, int64_t count, int64_t num, unsigned long long* bad) {
  KILN_GRID_STRIDE_LOOP(i, count) {
    if (idx[i] < 0 || idx[i] >= num) atomicMin(bad, static_cast<unsigned long long>(i));
  }
}

// out (count, D) = weight[idx] (rows whose index is bad are left alone; the host throws).
template <class T>
__global__ void embedding_kernel(const T* weight, const int64_t* idx, T* out, int64_t count, int64_t num, int64_t D) {
  KILN_GRID_STRIDE_LOOP(e, count * D) {
    const int64_t i = e / D, d = e % D;
    const int64_t row = idx[i];
    if (row >= 0 && row < num) out[e] = weight[row * D + d];
  }
}

// grad_weight (num, D) += g (count, D) scattered by idx, skipping padding_idx: rows that
// repeat an index add into one place, hence atomics (double atomicAdd needs sm_60+).
template <class T>
__global__ void embedding_backward_kernel(const T* g, const int64_t* idx, T* gw, int64_t count, int64_t num,
                                          int64_t D, int64_t padding_idx) {
  KILN_GRID_STRIDE_LOOP(e, count * D) {
    const int64_t i = e / D, d = e % D;
    const int64_t row = idx[i];
    if (row == padding_idx || row < 0 || row >= num) continue;
    atomicAdd(gw + row * D + d, g[e]);
  }
}

// Throws the CPU's error for the first index of `indices` outside [0, num).
void check_indices(const Tensor& indices, int64_t num) {
  const int64_t count = indices.numel();
  if (count == 0) return;
  const int64_t* idx = indices.data<int64_t>();
  IndexCheck check(indices.device());
  check_indices_kernel<<<grid_for(count), kThreads, 0, stream_of(indices)>>>(idx, count, num, check.flag());
  KILN_CUDA_LAUNCH_CHECK("embedding");
  int64_t pos = 0, value = 0;
  if (check.first_bad(idx, "embedding", pos, value)) {
    KILN_FAIL("embedding", "index ", value, " out of range for an embedding of ", num, " rows (at position ", pos,
              ")");
  }
}

}  // namespace

void CudaBackend::embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  const int64_t num = weight.size(0), D = weight.size(1), count = indices.numel();
  DeviceGuard guard(out);
  check_indices(indices, num);
  if (count == 0 || D == 0) return;
  visit_dtype(weight.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_kernel<T><<<grid_for(count * D), kThreads, 0, stream_of(out)>>>(
        static_cast<const T*>(weight.data_ptr()), indices.data<int64_t>(), static_cast<T*>(out.data_ptr()), count,
        num, D);
  });
  KILN_CUDA_LAUNCH_CHECK("embedding");
}

void CudaBackend::embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                                     const Tensor& grad_weight) {
  const int64_t num = grad_weight.size(0), D = grad_weight.size(1), count = indices.numel();
  DeviceGuard guard(grad_weight);
  check_indices(indices, num);
  visit_floating("embedding_backward", g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (count == 0 || D == 0) return;
    embedding_backward_kernel<T><<<grid_for(count * D), kThreads, 0, stream_of(grad_weight)>>>(
        g.data<T>(), indices.data<int64_t>(), grad_weight.data<T>(), count, num, D, padding_idx);
    KILN_CUDA_LAUNCH_CHECK("embedding_backward");
  });
}

}  // namespace kiln::cuda
