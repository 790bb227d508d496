#pragma once
// Freed memory blocks kept by size class, so that a training step that allocates the
// same shapes as the last one gets its blocks back instead of going to the system
// (malloc and fresh page faults on the CPU, cudaMalloc and a device sync on a GPU).
// Shared by every device's caching allocator; thread-safe.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kiln {

class BlockCache {
 public:
  // Requests up to `small_limit` bytes are rounded up to multiples of `granule`; larger
  // ones to steps of 1/8 of the enclosing power of two (at most 12.5% more than asked),
  // so that blocks of nearly equal sizes share a class. At most `limit` bytes are kept.
  BlockCache(size_t granule, size_t small_limit, size_t limit = SIZE_MAX)
      : granule_(granule), small_limit_(small_limit), limit_(limit) {}

  // The size a request of nbytes is served with.
  size_t size_class(size_t nbytes) const;
  // A kept block of class `size`, or nullptr.
  void* take(size_t size);
  // Keeps block p of class `size`; false (and p not kept) when that would pass the limit.
  bool put(void* p, size_t size);
  // Every kept block, removed from the cache, for the caller to free.
  std::vector<void*> take_all();
  // Sets the limit; the kept blocks beyond it (largest classes first) are removed and
  // returned for the caller to free.
  std::vector<void*> set_limit(size_t limit);
  size_t cached_bytes() const;

 private:
  const size_t granule_, small_limit_;
  size_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
};

}  // namespace kiln
