#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/error.h"

namespace kiln {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
};

Counters& counters(Device d) {
  static Counters cpu;
  static Counters cuda[16];
  if (d.is_cpu()) return cpu;
  KILN_CHECK(d.index >= 0 && d.index < 16, "memory_stats", "device index ", d.index,
             " out of range");
  return cuda[d.index];
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    // 64-byte alignment: a whole cache line and an AVX-512 vector.
    size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    detail::record_memory(kCPU, static_cast<int64_t>(nbytes));
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    std::free(ptr);
    detail::record_memory(kCPU, -static_cast<int64_t>(nbytes));
  }
};

}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator a;
  return a;
}

void detail::record_memory(Device device, int64_t delta) {
  Counters& c = counters(device);
  int64_t now = c.allocated.fetch_add(delta) + delta;
  if (delta > 0) {
    c.allocations.fetch_add(1);
    int64_t peak = c.peak.load();
    while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
    }
  }
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return {c.allocated.load(), c.peak.load(), c.allocations.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.allocated.load());
}

}  // namespace kiln

namespace kiln {
namespace {
Allocator* g_cuda_allocator = nullptr;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  KILN_CHECK(g_cuda_allocator != nullptr, "device", "CUDA is not available in this build of Kiln",
             " (asked for ", device.str(), ")");
  return *g_cuda_allocator;
}

void register_allocator(DeviceType type, Allocator* allocator) {
  if (type == DeviceType::CUDA) g_cuda_allocator = allocator;
}
}  // namespace kiln
