#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "device.h"

namespace kiln {

class Allocator;

// A block of memory on one device, shared by a tensor and all its views. The version
// counter lives here so that an in-place write through any view is seen by autograd.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  uint64_t version_ = 0;
};

}  // namespace kiln
