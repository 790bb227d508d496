#pragma once
// What the process group (distributed.cpp) needs of MPI, on contiguous host buffers
// (private). mpi_transport.cpp implements it with MPI's C API; in a Kiln built without
// MPI, mpi_none.cpp throws "[distributed] Kiln was not built with MPI …" from every call
// but built() and describe().
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::distributed::detail {

// The element types collectives move: Kiln's dtypes, bfloat16 as 16-bit words (moved,
// never reduced by MPI: distributed.cpp reduces it in float32).
enum class Wire : uint8_t { kFloat32, kFloat64, kInt64, kBool, kWord16 };
enum class WireOp : uint8_t { kSum, kMax, kLor };

bool built();
std::string describe();  // config()'s MPI line: library, version, CUDA-aware or not
// True when MPI takes CUDA device pointers (an initialised CUDA-aware MPI); otherwise
// CUDA tensors are staged through host memory.
bool cuda_aware();

void init();  // MPI_Init_thread (FUNNELED) and MPI_ERRORS_RETURN on the world
bool initialized();
bool finalized();
void finalize();
int rank();
int size();
[[noreturn]] void abort_job(int code);

// A collective in flight: test() calls MPI_Test on its requests, true once all are done;
// an MPI error is a kiln::Error naming `op`.
class Pending {
 public:
  virtual ~Pending() = default;
  virtual bool test() = 0;
};

// Each throws kiln::Error "[op] …" when MPI refuses to start it. count: elements (per
// rank for all_gather and reduce_scatter); counts beyond MPI's int are cut into several
// calls where the collective allows it.
std::unique_ptr<Pending> start_barrier(const char* op);
std::unique_ptr<Pending> start_all_reduce(const char* op, void* data, int64_t count, Wire w, WireOp o);
std::unique_ptr<Pending> start_broadcast(const char* op, void* data, int64_t count, Wire w, int root);
// out: size() * count elements, rank r's in at r * count.
std::unique_ptr<Pending> start_all_gather(const char* op, const void* in, void* out, int64_t count, Wire w);
// in: size() * count elements; out: count, the reduction of every rank's block rank().
std::unique_ptr<Pending> start_reduce_scatter(const char* op, const void* in, void* out, int64_t count, Wire w,
                                              WireOp o);

}  // namespace kiln::distributed::detail
