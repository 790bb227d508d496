// The CUDA runtime's start-up (on first use, never at load time: a CUDA build of Kiln
// runs CPU work on a machine without a GPU or driver), the device checks, and each
// GPU's stream and cuBLAS handle.
#include "backend/cuda/cuda_device.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace kiln::cuda {
namespace {

struct Runtime {
  std::string error;  // why no GPU is usable; "" when count > 0
  int count = 0;
};

// Asked once, on the first CUDA request of the process.
const Runtime& runtime() {
  static const Runtime r = [] {
    Runtime out;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      out.error = cudaGetErrorString(err);
      (void)cudaGetLastError();  // leave no error behind for a later check to trip on
      return out;
    }
    if (n <= 0) {
      out.error = "no CUDA-capable device is detected";
      return out;
    }
    out.count = std::min(n, kMaxDevices);
    return out;
  }();
  return r;
}

struct PerDevice {
  std::once_flag stream_once, blas_once, lt_once;
  std::atomic<bool> has_stream{false};
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* blas_workspace = nullptr;
};

PerDevice& per_device(int index) {
  // Never destroyed: destroying streams and handles after the driver has shut down at
  // exit fails; the process's end releases them.
  static PerDevice* devices = new PerDevice[kMaxDevices];
  return devices[index];
}

}  // namespace

void check_device(Device device) {
  const Runtime& r = runtime();
  KILN_CHECK(r.error.empty(), "device", "CUDA is built but no GPU is usable (asked for ", device.str(), "): ",
             r.error);
  KILN_CHECK(device.index >= 0 && device.index < r.count, "device", device.str(), " does not exist (this machine has ",
             r.count, " CUDA device", r.count == 1 ? "" : "s", ")");
}

DeviceGuard::DeviceGuard(int index) {
  KILN_CUDA_CHECK(cudaGetDevice(&previous_), "device");
  if (previous_ != index) KILN_CUDA_CHECK(cudaSetDevice(index), "device");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

cudaStream_t stream(int index) {
  PerDevice& d = per_device(index);
  std::call_once(d.stream_once, [&] {
    DeviceGuard guard(index);
    // Non-blocking: no implicit ordering with the legacy default stream, which nothing
    // of Kiln uses; every copy is an explicit cudaMemcpyAsync on this stream.
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "device");
    d.has_stream = true;
  });
  return d.stream;
}

cublasHandle_t blas_handle(int index) {
  PerDevice& d = per_device(index);
  cudaStream_t s = stream(index);
  std::call_once(d.blas_once, [&] {
    DeviceGuard guard(index);
    cublasHandle_t h = nullptr;
    KILN_CUBLAS_CHECK(cublas_api().cublasCreate(&h), "matmul");
    // cublasSetStream resets the workspace, so the stream goes first.
    KILN_CUBLAS_CHECK(cublas_api().cublasSetStream(h, s), "matmul");
    KILN_CUDA_CHECK(cudaMalloc(&d.blas_workspace, kBlasWorkspaceBytes), "matmul");
    KILN_CUBLAS_CHECK(cublas_api().cublasSetWorkspace(h, d.blas_workspace, kBlasWorkspaceBytes), "matmul");
    // Full float32 arithmetic (no TF32): the results must match the CPU's to ~1e-5.
    KILN_CUBLAS_CHECK(cublas_api().cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "matmul");
    KILN_CUBLAS_CHECK(cublas_api().cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), "matmul");
    d.blas = h;
  });
  return d.blas;
}

void* blas_workspace(int index) {
  blas_handle(index);  // allocates it
  return per_device(index).blas_workspace;
}

cublasLtHandle_t lt_handle(int index) {
  PerDevice& d = per_device(index);
  std::call_once(d.lt_once, [&] {
    DeviceGuard guard(index);
    KILN_CUBLAS_CHECK(cublas_api().cublasLtCreate(&d.lt), "matmul");
  });
  return d.lt;
}

void synchronize_stream(int index, const char* op) {
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream(index)), op);
}

// ---------------------------------------------------------------- cuda_backend.h
Backend& backend_for_device(Device device) {
  check_device(device);
  static CudaBackend* backend = new CudaBackend();
  return *backend;
}

const std::string& runtime_error() { return runtime().error; }

int usable_device_count() { return runtime().count; }

std::string describe() {
  std::ostringstream os;
  os << "built for CUDA " << CUDART_VERSION / 1000 << "." << CUDART_VERSION % 1000 / 10 << " (cuBLAS "
     << CUBLAS_VER_MAJOR << "." << CUBLAS_VER_MINOR << "." << CUBLAS_VER_PATCH << " headers";
  const Runtime& r = runtime();
  if (!r.error.empty()) {
    // cuBLAS is not loaded for a machine that cannot use it (cublas_api.h).
    os << "); no GPU usable: " << r.error;
    return os.str();
  }
  int major = 0, minor = 0, patch = 0;
  const CublasApi& api = cublas_api();
  api.cublasGetProperty(MAJOR_VERSION, &major);
  api.cublasGetProperty(MINOR_VERSION, &minor);
  api.cublasGetProperty(PATCH_LEVEL, &patch);
  os << ", " << major << "." << minor << "." << patch << " loaded)";
  for (int i = 0; i < r.count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    os << "; cuda:" << i << " " << p.name << " (sm_" << p.major << p.minor << ", "
       << (p.totalGlobalMem + (size_t{1} << 29)) / (size_t{1} << 30) << " GiB)";
  }
  return os.str();
}

void synchronize_devices() {
  const Runtime& r = runtime();
  for (int i = 0; i < r.count; ++i) {
    if (!per_device(i).has_stream) continue;  // nothing ever ran there
    DeviceGuard guard(i);
    synchronize_stream(i, "synchronize");
  }
}

}  // namespace kiln::cuda
