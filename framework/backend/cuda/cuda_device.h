#pragma once
// The CUDA runtime as the backend uses it: lazy start-up, the checks behind "[device] …"
// errors, and per-GPU state (its stream and cuBLAS handle). Backend-internal: includes
// the CUDA headers.
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda_check.h"
#include "../../core/tensor.h"

namespace kiln::cuda {

// Devices beyond this are not used (memory_stats counts 16 per type).
constexpr int kMaxDevices = 16;

// Throws "[device] …" unless `device` is a usable GPU; the first call starts the runtime.
void check_device(Device device);

// Makes `index` the calling thread's current device for a scope, and puts the previous
// one back after (kernels launch on, and cudaMalloc allocates on, the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(const Tensor& t) : DeviceGuard(t.device().index) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The stream everything of device `index` runs on (created on first use).
cudaStream_t stream(int index);
inline cudaStream_t stream_of(const Tensor& t) { return stream(t.device().index); }

// The cuBLAS handle of device `index`, bound to its stream, with a workspace of its own
// allocated once (so a gemm never allocates). Created on the first matmul.
cublasHandle_t blas_handle(int index);

// The cuBLASLt handle of device `index` (created on first use) and the workspace its
// matmuls take: blas_handle's own (both libraries run on the one stream, so never at
// once), kBlasWorkspaceBytes long.
cublasLtHandle_t lt_handle(int index);
void* blas_workspace(int index);
// The 32 MiB cuBLAS recommends on Hopper (more than enough elsewhere).
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

// Waits for the device's stream (before the host reads what a kernel wrote).
void synchronize_stream(int index, const char* op);

}  // namespace kiln::cuda
