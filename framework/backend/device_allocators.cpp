// The allocator of each device, for Storage (core/allocator.h declares these). Defined
// here, in the device layer, so that core includes no backend; reached by direct calls,
// never through a static registration object that a linker could drop from a static
// archive.
#include "core/allocator.h"
#include "core/error.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln {
namespace {
Allocator* g_cuda_allocator = nullptr;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
#ifdef KILN_WITH_CUDA
  // The built-in CUDA backend, unless a plug-in registered its own; this call is where
  // the CUDA runtime starts (and says why it cannot), never before.
  if (g_cuda_allocator == nullptr) return cuda::allocator_for_device(device);
#endif
  KILN_CHECK(g_cuda_allocator != nullptr, "device", "CUDA is not available in this build of Kiln",
             " (asked for ", device.str(), ")");
  return *g_cuda_allocator;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  if (type == DeviceType::CUDA) g_cuda_allocator = allocator;
}

int64_t detail::device_cached_bytes(Device device) {
#ifdef KILN_WITH_CUDA
  if (device.is_cuda()) return cuda::cached_bytes(device);
#else
  (void)device;
#endif
  return 0;
}

}  // namespace kiln
