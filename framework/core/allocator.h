#pragma once
#include <cstddef>
#include <cstdint>

#include "device.h"

namespace kiln {

// Where a backend gets its memory from. Each device has one; the CUDA backend brings
// its own (a caching allocator), the CPU one is below.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

struct MemoryStats {
  int64_t allocated_bytes = 0;  // live bytes held by tensors now
  int64_t peak_bytes = 0;       // most live bytes since the last reset
  int64_t allocations = 0;      // number of allocate() calls since start
  int64_t cached_bytes = 0;     // freed blocks kept for reuse (not counted as allocated)
  // allocate() calls that the cache could not serve and that went to the system
  // (aligned_alloc, cudaMalloc): a training step that repeats the last one's shapes adds none.
  int64_t system_allocations = 0;
};

// CPU: 64-byte aligned blocks, counted in memory_stats(kCPU). Freed blocks are kept
// for reuse (up to KILN_CPU_CACHE_MB, default a quarter of RAM; 0 turns it off).
Allocator& cpu_allocator();
// Returns the CPU allocator's kept blocks to the system (torch.cuda.empty_cache's idea;
// kiln::cuda::empty_cache() does it for the GPUs).
void empty_cache();

MemoryStats memory_stats(Device device = Device());
void reset_peak_memory(Device device = Device());

namespace detail {
// For allocators: account for an allocation (+n) or a release (-n) on a device.
void record_memory(Device device, int64_t delta_bytes);
// For allocators: count a request that went to the system allocator (a cache miss).
void record_system_allocation(Device device);
// The bytes a device's caching allocator keeps for reuse (0 where there is none). Core
// declares it; the device layer (backend/device_allocators.cpp), which knows the
// devices, defines it, as it defines allocator_for.
int64_t device_cached_bytes(Device device);
}  // namespace detail

}  // namespace kiln

namespace kiln {
// The allocator of a device type. The CPU one is always there; a backend plug-in
// registers its own. Throws "[device] …" when none is registered.
Allocator& allocator_for(Device device);
void register_allocator(DeviceType type, Allocator* allocator);
}  // namespace kiln
