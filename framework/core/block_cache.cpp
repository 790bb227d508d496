#include "core/block_cache.h"

#include <algorithm>

namespace kiln {

size_t BlockCache::size_class(size_t nbytes) const {
  const size_t n = std::max<size_t>(nbytes, 1);
  if (n <= small_limit_) return (n + granule_ - 1) / granule_ * granule_;
  const size_t p = size_t{1} << (63 - __builtin_clzll(n));
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

void* BlockCache::take(size_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.find(size);
  if (it == free_.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  cached_ -= size;
  return p;
}

bool BlockCache::put(void* p, size_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (size > limit_ - std::min(cached_, limit_)) return false;
  free_[size].push_back(p);
  cached_ += size;
  return true;
}

std::vector<void*> BlockCache::take_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<void*> blocks;
  for (auto& [size, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
  free_.clear();
  cached_ = 0;
  return blocks;
}

std::vector<void*> BlockCache::set_limit(size_t limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = limit;
  std::vector<size_t> sizes;
  for (const auto& [size, list] : free_) sizes.push_back(size);
  std::sort(sizes.rbegin(), sizes.rend());
  std::vector<void*> released;
  for (size_t size : sizes) {
    std::vector<void*>& list = free_[size];
    while (cached_ > limit_ && !list.empty()) {
      released.push_back(list.back());
      list.pop_back();
      cached_ -= size;
    }
  }
  return released;
}

size_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

}  // namespace kiln
