#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln {
namespace {
Backend* g_cuda_backend = nullptr;
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu::cpu_backend();
#ifdef KILN_WITH_CUDA
  // The built-in CUDA backend (checks that the device is usable), unless a plug-in
  // registered another one.
  if (g_cuda_backend == nullptr) return cuda::backend_for_device(device);
#endif
  KILN_CHECK(g_cuda_backend != nullptr, "device",
             "CUDA is not available in this build of Kiln (asked for ", device.str(), ")");
  return *g_cuda_backend;
}

void register_backend(DeviceType type, Backend* backend) {
  if (type == DeviceType::CUDA) g_cuda_backend = backend;
}

Backend& backend_of(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else {
      KILN_CHECK(t->device() == first->device(), op,
                 "expected all tensors on the same device, got ", first->device().str(), " and ",
                 t->device().str());
    }
  }
  return backend_for(first ? first->device() : kCPU);
}

}  // namespace kiln
