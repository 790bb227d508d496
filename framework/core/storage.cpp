#include "core/storage.h"

#include "core/allocator.h"

namespace kiln {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::~Storage() { allocator_->deallocate(data_, nbytes_); }

}  // namespace kiln
