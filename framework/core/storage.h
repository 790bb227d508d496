#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "device.h"

namespace kiln {

class Allocator;
class Recompute;  // autograd/recompute.h

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

  // How to write these bytes again, left by the op that wrote them when its own backward
  // keeps what that takes (layer_norm's output: from its saved input and statistics). A
  // tensor saved for backward from this storage is then kept as that recipe, not as the
  // memory (autograd/recompute.h). Not owned (the op's node owns it); void once the
  // storage is written in place.
  void set_recompute(std::weak_ptr<const Recompute> r) {
    recompute_ = std::move(r);
    recompute_version_ = version_;
  }
  std::shared_ptr<const Recompute> recompute() const {
    return version_ == recompute_version_ ? recompute_.lock() : nullptr;
  }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  uint64_t version_ = 0;
  std::weak_ptr<const Recompute> recompute_;
  uint64_t recompute_version_ = 0;
};

}  // namespace kiln
