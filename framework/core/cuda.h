#pragma once
// What a program can ask about CUDA, in every build of Kiln (no CUDA header here): a
// CPU-only build answers "not built", a CUDA build on a machine without a usable GPU
// answers with the runtime's reason. Nothing here starts the CUDA runtime before it is
// first called.
#include <string>

namespace kiln::cuda {

// Whether this build of Kiln has the CUDA backend.
bool is_built();
// Whether a CUDA tensor can be made: built, and the runtime found at least one GPU.
bool is_available();
// The number of usable GPUs (0 when not available).
int device_count();
// Why is_available() is false ("" when it is true), e.g. "CUDA is not available in this
// build of Kiln" or "no CUDA-capable device is detected".
std::string unavailable_reason();
// Waits until every kernel and copy queued on the GPUs has finished (for timing). A
// no-op without CUDA.
void synchronize();
// Returns the CUDA caching allocator's unused blocks to the driver (cudaFree); a no-op
// without CUDA. See memory_stats(Device("cuda")) for what it holds.
void empty_cache();

}  // namespace kiln::cuda
