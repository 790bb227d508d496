#pragma once
// CUDA and cuBLAS status codes -> kiln::Error "[cuda] <op>: <what the runtime said>".
// A failed call is an exception naming the op, never an abort. For the backend's own
// sources only (it includes the CUDA headers).
#include <cuda_runtime.h>

#include "../../core/error.h"
#include "cublas_api.h"

namespace kiln::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* op, const char* call) {
  KILN_FAIL("cuda", op, ": ", cudaGetErrorString(err), " (", cudaGetErrorName(err), " from ", call, ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* op, const char* call) {
  KILN_FAIL("cuda", op, ": cuBLAS: ", cublas_api().cublasGetStatusString(s), " (", cublas_api().cublasGetStatusName(s),
            " from ", call, ")");
}

}  // namespace kiln::cuda

// KILN_CUDA_CHECK(cudaMemcpyAsync(...), "copy"): throws "[cuda] copy: …" on failure.
#define KILN_CUDA_CHECK(call, op)                                                 \
  do {                                                                            \
    cudaError_t kiln_cuda_err_ = (call);                                          \
    if (kiln_cuda_err_ != cudaSuccess) ::kiln::cuda::throw_cuda_error(kiln_cuda_err_, op, #call); \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here, named by the op.
#define KILN_CUDA_LAUNCH_CHECK(op) KILN_CUDA_CHECK(cudaGetLastError(), op)

#define KILN_CUBLAS_CHECK(call, op)                                               \
  do {                                                                            \
    cublasStatus_t kiln_cublas_status_ = (call);                                  \
    if (kiln_cublas_status_ != CUBLAS_STATUS_SUCCESS)                             \
      ::kiln::cuda::throw_cublas_error(kiln_cublas_status_, op, #call);           \
  } while (0)
