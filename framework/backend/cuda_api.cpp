// core/cuda.h in both builds: a CPU-only build answers "not built" without any CUDA
// code; a CUDA build asks the plug-in (which starts the runtime on the first question).
#include "core/cuda.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln::cuda {

#ifdef KILN_WITH_CUDA

bool is_built() { return true; }
bool is_available() { return runtime_error().empty(); }
int device_count() { return usable_device_count(); }
std::string unavailable_reason() {
  const std::string& e = runtime_error();
  return e.empty() ? std::string() : "CUDA is built but no GPU is usable: " + e;
}
void synchronize() { synchronize_devices(); }
void empty_cache() { release_cached_blocks(); }

#else

bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "CUDA is not available in this build of Kiln"; }
void synchronize() {}
void empty_cache() {}

#endif

}  // namespace kiln::cuda
