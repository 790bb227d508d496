#include "core/allocator.h"

#include "core/block_cache.h"

#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>
#include <cstdlib>
#include <new>

#include "core/error.h"


namespace kiln {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> system_allocations{0};
};

Counters& counters(Device d) {
  static Counters cpu;
  static Counters cuda[16];
  if (d.is_cpu()) return cpu;
  KILN_CHECK(d.index >= 0 && d.index < 16, "memory_stats", "device index ", d.index,
             " out of range");
  return cuda[d.index];
}

// How many bytes of freed blocks may be kept: KILN_CPU_CACHE_MB, else a quarter of RAM.
size_t cache_limit() {
  if (const char* env = std::getenv("KILN_CPU_CACHE_MB")) {
    char* end = nullptr;
    unsigned long long mb = std::strtoull(env, &end, 10);
    if (end != env) return static_cast<size_t>(mb) << 20;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : size_t{1} << 30;
}

// RAM plus swap: an allocation larger than that can never be used in full, and asking
// for it may succeed under overcommit only to be killed later (or abort a sanitizer), so
// it is refused up front.
size_t memory_and_swap_bytes() {
  static const size_t total = [] {
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return SIZE_MAX;
    const auto unit = static_cast<unsigned __int128>(si.mem_unit ? si.mem_unit : 1);
    const unsigned __int128 b = (static_cast<unsigned __int128>(si.totalram) + si.totalswap) * unit;
    return b > SIZE_MAX ? SIZE_MAX : static_cast<size_t>(b);
  }();
  return total;
}

// Freed blocks are kept (core/block_cache.h): 64-byte classes up to 512 bytes, then
// steps of 1/8 of a power of two; at most cache_limit() bytes.
class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes > memory_and_swap_bytes()) {
      KILN_FAIL_OUT_OF_MEMORY("cpu", "allocating ", nbytes, " bytes failed: more than this machine's ",
                              memory_and_swap_bytes(), " bytes of RAM and swap");
    }
    const size_t size = cache_.size_class(nbytes);
    void* p = cache_.take(size);
    if (!p) {
      // 64-byte alignment: a whole cache line and an AVX-512 vector.
      p = std::aligned_alloc(64, size);
      detail::record_system_allocation(kCPU);
      if (!p) {
        empty_cache();
        p = std::aligned_alloc(64, size);
      }
      if (!p) {
        KILN_FAIL_OUT_OF_MEMORY("cpu", "allocating ", size, " bytes failed: out of memory (",
                                memory_stats(kCPU).allocated_bytes, " bytes held by tensors)");
      }
    }
    detail::record_memory(kCPU, static_cast<int64_t>(nbytes));
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    detail::record_memory(kCPU, -static_cast<int64_t>(nbytes));
    if (!cache_.put(ptr, cache_.size_class(nbytes))) std::free(ptr);
  }

  void empty_cache() {
    for (void* p : cache_.take_all()) std::free(p);
  }

  size_t cached_bytes() const { return cache_.cached_bytes(); }

 private:
  BlockCache cache_{64, 512, cache_limit()};
};

CachingCpuAllocator& caching_cpu_allocator() {
  // Never destroyed: tensors held by other static objects may be freed after main.
  static auto* a = new CachingCpuAllocator();
  return *a;
}

}  // namespace

Allocator& cpu_allocator() { return caching_cpu_allocator(); }

void empty_cache() { caching_cpu_allocator().empty_cache(); }

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

void detail::record_system_allocation(Device device) { counters(device).system_allocations.fetch_add(1); }

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  int64_t cached = 0;
  if (device.is_cpu()) {
    cached = static_cast<int64_t>(caching_cpu_allocator().cached_bytes());
  } else {
    cached = detail::device_cached_bytes(device);
  }
  return {c.allocated.load(), c.peak.load(), c.allocations.load(), cached, c.system_allocations.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.allocated.load());
}

}  // namespace kiln
