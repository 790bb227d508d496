// The caching allocator of each GPU. cudaMalloc and cudaFree are slow and synchronise
// the device, so freed blocks are kept in free lists by size class and handed out
// again; a training step that repeats the shapes of the last one never reaches
// cudaMalloc (memory_stats(Device("cuda")).system_allocations stays put).
//
// Reuse needs no events because the backend is stream-ordered on one stream per GPU
// (cuda_backend.h): a block freed while kernels still read it goes to a new tensor
// whose kernels are queued behind those. Only cudaFree (empty_cache, a retry after an
// out-of-memory, a block beyond the cache's limit) must wait for the device first.
//
// set_cache_limit caps the bytes kept. A freed block that would pass the cap cannot be
// given back at once (deallocate runs in a destructor and must not wait for the device),
// so it is set aside, unused, and given back by the next allocation on that GPU.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "core/block_cache.h"
#include "core/cuda.h"

namespace kiln::cuda {
namespace {

// set_cache_limit's cap in bytes (SIZE_MAX: none).
size_t cap_bytes() {
  const std::optional<int64_t> cap = cache_limit();
  return cap ? static_cast<size_t>(*cap) : SIZE_MAX;
}

// Freed blocks are kept by size class (core/block_cache.h): 512-byte classes up to
// 4 KiB, then steps of 1/8 of a power of two.
class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int index) : device_(DeviceType::CUDA, index) {}

  void* allocate(size_t nbytes) override {
    if (has_over_limit_.load(std::memory_order_acquire)) release_over_limit();
    const size_t size = cache_.size_class(nbytes);
    void* p = cache_.take(size);
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
        // As the CPU allocator: an OutOfMemoryError, which tensor creation completes with
        // the op and the shape; any other failure is a plain kiln::Error.
        if (err == cudaErrorMemoryAllocation) {
          KILN_FAIL_OUT_OF_MEMORY("cuda", "allocating ", size, " bytes on ", device_.str(), " failed: ",
                                  cudaGetErrorString(err), " (", s.allocated_bytes, " bytes held by tensors)");
        }
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
    if (!cache_.put(ptr, cache_.size_class(nbytes))) {
      std::lock_guard<std::mutex> lock(over_limit_mutex_);
      over_limit_.push_back(ptr);
      has_over_limit_.store(true, std::memory_order_release);
    }
  }

  // Keeps at most `limit` bytes from now on; blocks beyond it are given back now.
  void set_limit(size_t limit) { free_blocks(cache_.set_limit(limit), "set_cache_limit"); }

  // Waits for the device (kernels may still use the cached blocks), then frees them. If
  // the wait fails the context is broken (CUDA errors there are sticky) and the blocks
  // are dropped with it.
  void release_cached() {
    release_over_limit();
    free_blocks(cache_.take_all(), "empty_cache");
  }

  int64_t cached_bytes() const { return static_cast<int64_t>(cache_.cached_bytes()); }

 private:
  void free_blocks(const std::vector<void*>& blocks, const char* op) {
    if (blocks.empty()) return;
    DeviceGuard guard(device_.index);
    KILN_CUDA_CHECK(cudaDeviceSynchronize(), op);
    for (void* p : blocks) (void)cudaFree(p);
  }

  // The blocks deallocate set aside because the cache was full.
  void release_over_limit() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(over_limit_mutex_);
      blocks.swap(over_limit_);
      has_over_limit_.store(false, std::memory_order_relaxed);
    }
    free_blocks(blocks, "cuda");
  }

  const Device device_;
  // The cap set before this GPU's first allocation holds from it on.
  BlockCache cache_{512, 4096, cap_bytes()};
  std::mutex over_limit_mutex_;
  std::vector<void*> over_limit_;
  std::atomic<bool> has_over_limit_{false};  // over_limit_ is not empty: allocate reads it without the lock
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

void set_cache_limit_bytes(size_t bytes) {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (CudaCachingAllocator* a = existing(i)) a->set_limit(bytes);
  }
}

void release_cached_blocks() {
  for (int i = 0; i < kMaxDevices; ++i) {
    if (CudaCachingAllocator* a = existing(i)) a->release_cached();
  }
}

}  // namespace kiln::cuda
