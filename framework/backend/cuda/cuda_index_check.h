#pragma once
// The device side of "index out of range" errors (embedding, cross_entropy): a word on
// the GPU that kernels lower with atomicMin to the first bad position, read back by the
// host, which then throws the CPU backend's message. Reading it waits for the device.
#include <climits>

#include "cuda_device.h"

namespace kiln::cuda {

class IndexCheck {
 public:
  explicit IndexCheck(Device device)
      : word_(Tensor::empty({1}, TensorOptions(kInt64).device(device))), stream_(stream(device.index)) {
    // All bits set: ULLONG_MAX, "nothing bad yet".
    KILN_CUDA_CHECK(cudaMemsetAsync(word_.data_ptr(), 0xFF, sizeof(unsigned long long), stream_), "index check");
  }

  unsigned long long* flag() const { return static_cast<unsigned long long*>(word_.data_ptr()); }

  // Waits for the kernels; if one recorded a bad position, returns true with the position
  // and the value found there in idx (a device array).
  bool first_bad(const int64_t* idx, const char* op, int64_t& pos, int64_t& value) const {
    unsigned long long first = 0;
    KILN_CUDA_CHECK(cudaMemcpyAsync(&first, flag(), sizeof first, cudaMemcpyDeviceToHost, stream_), op);
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_), op);
    if (first == ULLONG_MAX) return false;
    pos = static_cast<int64_t>(first);
    KILN_CUDA_CHECK(cudaMemcpyAsync(&value, idx + pos, sizeof value, cudaMemcpyDeviceToHost, stream_), op);
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_), op);
    return true;
  }

 private:
  Tensor word_;
  cudaStream_t stream_;
};

}  // namespace kiln::cuda
