// Embedding lookup and its scatter-add backward:
//   weight (num, D), indices (count) int64 -> out (count, D);  g (count, D) -> grad_weight (num, D) +=.
// The backward sorts the indices (CUB) and sums each index's rows in position order, so
// its bits are the CPU's and the same on every run (no float atomics).
// An index out of range is the CPU's error, "[embedding] index … out of range …": the
// kernel records the first bad position in a device word, the host reads it back (a
// wait for the device, the price of the check) and throws.
#include <climits>

#include <cub/device/device_radix_sort.cuh>

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

// grad_weight (num, D) += g (count, D) scattered by idx, skipping padding_idx, without
// atomics: sorted_idx is idx sorted stably and pos the positions it came from, so the
// rows of one index sit together in position order. The thread of (the first of them,
// d) adds them to grad_weight one by one in that order: the CPU's order, hence its bits,
// on every run.
template <class T>
__global__ void embedding_backward_kernel(const T* g, const int64_t* sorted_idx, const int64_t* pos, T* gw,
                                          int64_t count, int64_t D, int64_t padding_idx) {
  KILN_GRID_STRIDE_LOOP(e, count * D) {
    const int64_t i = e / D, d = e % D;
    const int64_t row = sorted_idx[i];
    if (row == padding_idx || (i > 0 && sorted_idx[i - 1] == row)) continue;
    T acc = gw[row * D + d];
    for (int64_t j = i; j < count && sorted_idx[j] == row; ++j) acc += g[pos[j] * D + d];
    gw[row * D + d] = acc;
  }
}

// positions (count) = 0, 1, …, count - 1.
__global__ void iota_kernel(int64_t* positions, int64_t count) {
  KILN_GRID_STRIDE_LOOP(i, count) positions[i] = i;
}

// sorted_idx, pos: idx (count, each in [0, num)) sorted stably, and where each came from
// (CUB's radix sort over the bits that num needs).
void sort_indices(const Tensor& indices, int64_t num, Tensor& sorted_idx, Tensor& pos) {
  const int64_t count = indices.numel();
  KILN_CHECK(count <= INT_MAX, "embedding_backward", "more than 2^31 - 1 indices (", count,
             ") are beyond CUB's sort");
  const TensorOptions opts = TensorOptions(kInt64).device(indices.device());
  cudaStream_t stream = stream_of(indices);
  Tensor positions = Tensor::empty({count}, opts);
  sorted_idx = Tensor::empty({count}, opts);
  pos = Tensor::empty({count}, opts);
  iota_kernel<<<grid_for(count), kThreads, 0, stream>>>(positions.data<int64_t>(), count);
  KILN_CUDA_LAUNCH_CHECK("embedding_backward");
  int end_bit = 1;
  while (end_bit < 63 && (int64_t{1} << end_bit) < num) ++end_bit;
  const int n = static_cast<int>(count);
  size_t bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, indices.data<int64_t>(), sorted_idx.data<int64_t>(),
                                                  positions.data<int64_t>(), pos.data<int64_t>(), n, 0, end_bit,
                                                  stream),
                  "embedding_backward");
  Tensor scratch = Tensor::empty({static_cast<int64_t>(bytes / sizeof(int64_t)) + 1}, opts);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.data_ptr(), bytes, indices.data<int64_t>(),
                                                  sorted_idx.data<int64_t>(), positions.data<int64_t>(),
                                                  pos.data<int64_t>(), n, 0, end_bit, stream),
                  "embedding_backward");
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
    Tensor sorted_idx, pos;
    sort_indices(indices, num, sorted_idx, pos);
    embedding_backward_kernel<T><<<grid_for(count * D), kThreads, 0, stream_of(grad_weight)>>>(
        g.data<T>(), sorted_idx.data<int64_t>(), pos.data<int64_t>(), grad_weight.data<T>(), count, D, padding_idx);
    KILN_CUDA_LAUNCH_CHECK("embedding_backward");
  });
}

}  // namespace kiln::cuda
