// The caching allocator of each GPU. cudaMalloc and cudaFree are slow and synchronise
// the device, so freed blocks are kept in free lists by size class and handed out
// again; a training step that repeats the shapes of the last one never reaches
// cudaMalloc (memory_stats(Device("cuda")).system_allocations stays put).
//
// Reuse needs no events because the backend is stream-ordered on one stream per GPU
// (cuda_backend.h): a block freed while kernels still read it goes to a new tensor
// whose kernels are queued behind those. Only cudaFree (empty_cache, or a retry after
// an out-of-memory) must wait for the device first.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"

namespace kiln::cuda {
namespace {

// The size a request is served with: 512-byte multiples up to 4 KiB, then steps of 1/8
// of the enclosing power of two (at most 12.5% more than asked), so that blocks of
// nearly equal sizes share a free list.
size_t size_class(size_t nbytes) {
  size_t n = std::max<size_t>(nbytes, 1);
  if (n <= 4096) return (n + 511) / 512 * 512;
  size_t p = size_t{1} << (63 - __builtin_clzll(n));
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int index) : device_(DeviceType::CUDA, index) {}

  void* allocate(size_t nbytes) override {
    const size_t size = size_class(nbytes);
    void* p = take_cached(size);
    if (!p) {
      DeviceGuard guard(device_.index);
      cudaError_t err = cudaMalloc(&p, size);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // not sticky: clear it and try again with the cache emptied
        release_cached();
        err = cudaMalloc(&p, size);
      }
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        MemoryStats s = memory_stats(device_);
        KILN_FAIL("cuda", "allocating ", size, " bytes on ", device_.str(), " failed: ", cudaGetErrorString(err),
                  " (", s.allocated_bytes, " bytes held by tensors)");
      }
      detail::record_system_allocation(device_);
    }
    detail::record_memory(device_, static_cast<int64_t>(nbytes));
    return p;
  }

  // Called from Storage's destructor: never throws, never waits.
  void deallocate(void* ptr, size_t nbytes) override {
    detail::record_memory(device_, -static_cast<int64_t>(nbytes));
    const size_t size = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(ptr);
    cached_ += size;
  }

  // Waits for the device (kernels may still use the cached blocks), then frees them.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) return;
    DeviceGuard guard(device_.index);
    KILN_CUDA_CHECK(cudaDeviceSynchronize(), "empty_cache");
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) (void)cudaFree(p);
    }
    free_.clear();
    cached_ = 0;
  }

  int64_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(cached_);
  }

 private:
  void* take_cached(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= size;
    return p;
  }

  const Device device_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

// One allocator per device, made on the device's first allocation. Never destroyed:
// tensors held by static objects may be freed after main returns.
std::once_flag g_once[kMaxDevices];
CudaCachingAllocator* g_allocators[kMaxDevices] = {};

CudaCachingAllocator* existing(int index) {
  if (index < 0 || index >= kMaxDevices) return nullptr;
  return __atomic_load_n(&g_allocators[index], __ATOMIC_ACQUIRE);
}

}  // namespace

Allocator& allocator_for_device(Device device) {
  check_device(device);
  const int i = device.index;
  std::call_once(g_once[i], [i] { __atomic_store_n(&g_allocators[i], new CudaCachingAllocator(i), __ATOMIC_RELEASE); });
  return *g_allocators[i];
}

int64_t cached_bytes(Device device) {
  CudaCachingAllocator* a = existing(device.index);
  return a ? a->cached_bytes() : 0;
}

void release_cached_blocks() {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (CudaCachingAllocator* a = existing(i)) a->release_cached();
  }
}

}  // namespace kiln::cuda
