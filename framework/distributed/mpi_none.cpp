// mpi_transport.h in a Kiln built without MPI (meson found no Open MPI, or -Dmpi=disabled):
// no MPI header, flag or library is in the build, and every call says so.
#include "distributed/mpi_transport.h"

#include <cstdlib>

#include "core/error.h"

namespace kiln::distributed::detail {
namespace {

[[noreturn]] void not_built() {
  KILN_FAIL("distributed", "Kiln was not built with MPI (install libopenmpi-dev and configure with -Dmpi=enabled)");
}

}  // namespace

bool built() { return false; }
std::string describe() { return "not built (install libopenmpi-dev and configure with -Dmpi=enabled)"; }
bool cuda_aware() { return false; }
void init() { not_built(); }
bool initialized() { return false; }
bool finalized() { return false; }
void finalize() { not_built(); }
int rank() { not_built(); }
int size() { not_built(); }
void abort_job(int code) { std::_Exit(code); }
std::unique_ptr<Pending> start_barrier(const char*) { not_built(); }
std::unique_ptr<Pending> start_all_reduce(const char*, void*, int64_t, Wire, WireOp) { not_built(); }
std::unique_ptr<Pending> start_broadcast(const char*, void*, int64_t, Wire, int) { not_built(); }
std::unique_ptr<Pending> start_all_gather(const char*, const void*, void*, int64_t, Wire) { not_built(); }
std::unique_ptr<Pending> start_reduce_scatter(const char*, const void*, void*, int64_t, Wire, WireOp) { not_built(); }

}  // namespace kiln::distributed::detail
