#include "core/storage.h"

#include <new>

#include "core/allocator.h"
#include "core/error.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  try {
    data_ = allocator_->allocate(nbytes);
  } catch (const std::bad_alloc&) {
    // A registered allocator may throw the standard exception; Kiln's callers see one kind.
    KILN_FAIL_OUT_OF_MEMORY("allocate", "allocating ", nbytes, " bytes on ", device.str(), " failed: out of memory");
  }
}

Storage::~Storage() { allocator_->deallocate(data_, nbytes_); }

}  // namespace kiln
