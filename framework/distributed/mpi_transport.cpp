// The process group's transport over MPI's C API (built when meson found MPI; see
// mpi_transport.h). Every collective is MPI-3's non-blocking form, so that the caller
// (distributed.cpp) can wait with a deadline instead of blocking in MPI for ever.
#define OMPI_SKIP_MPICXX 1  // MPI's C API only: no C++ bindings in mpi.h
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "distributed/mpi_transport.h"

namespace kiln::distributed::detail {
namespace {

MPI_Datatype mpi_type(Wire w) {
  switch (w) {
    case Wire::kFloat32: return MPI_FLOAT;
    case Wire::kFloat64: return MPI_DOUBLE;
    case Wire::kInt64: return MPI_INT64_T;
    case Wire::kBool: return MPI_C_BOOL;
    case Wire::kWord16: break;
  }
  return MPI_UINT16_T;
}

size_t wire_size(Wire w) {
  switch (w) {
    case Wire::kFloat32: return 4;
    case Wire::kFloat64: return 8;
    case Wire::kInt64: return 8;
    case Wire::kBool: return 1;
    case Wire::kWord16: break;
  }
  return 2;
}

MPI_Op mpi_op(WireOp o) {
  switch (o) {
    case WireOp::kSum: return MPI_SUM;
    case WireOp::kMax: return MPI_MAX;
    case WireOp::kLor: break;
  }
  return MPI_LOR;
}

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int code, const char* op, const char* call) {
  if (code != MPI_SUCCESS) KILN_FAIL(op, call, " failed: ", error_string(code));
}

// Pieces of a collective whose count exceeds MPI's int (all-reduce and broadcast may be
// cut anywhere). 2^30 elements keeps every piece's byte count in range as well.
constexpr int64_t kPiece = int64_t(1) << 30;

class Requests final : public Pending {
 public:
  explicit Requests(const char* op) : op_(op) {}
  bool test() override {
    if (done_) return true;
    int flag = 0;
    int code = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE);
    check_mpi(code, op_, "MPI_Test");
    done_ = flag != 0;
    return done_;
  }
  MPI_Request* add() {
    reqs_.push_back(MPI_REQUEST_NULL);
    return &reqs_.back();
  }
  void reserve(size_t n) { reqs_.reserve(n); }

 private:
  const char* op_;
  std::vector<MPI_Request> reqs_;
  bool done_ = false;
};

int int_count(const char* op, int64_t count) {
  KILN_CHECK(count <= INT_MAX, op, count, " elements per rank: more than one MPI collective can take (", INT_MAX,
             ")");
  return static_cast<int>(count);
}

}  // namespace

bool built() { return true; }

std::string describe() {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  std::string library = "unknown library";
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    library.assign(lib, static_cast<size_t>(len));
    // "Open MPI v4.1.4, package: Debian OpenMPI, ident: …": the name and version.
    size_t comma = library.find(',');
    if (comma != std::string::npos) library.resize(comma);
    while (!library.empty() && (library.back() == '\n' || library.back() == ' ')) library.pop_back();
  }
  int version = 0, subversion = 0;
  MPI_Get_version(&version, &subversion);
  std::string out = library + " (MPI " + std::to_string(version) + "." + std::to_string(subversion) + "), ";
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  // Built CUDA-aware; whether it is at run time is known once MPI is initialised.
  if (initialized() && !finalized()) {
    out += MPIX_Query_cuda_support() ? "CUDA-aware (CUDA tensors passed to MPI directly)"
                                     : "built CUDA-aware but not at run time: CUDA tensors staged through host memory";
  } else {
    out += "built CUDA-aware (checked at init)";
  }
#elif defined(MPIX_CUDA_AWARE_SUPPORT)
  out += "not CUDA-aware (MPIX_CUDA_AWARE_SUPPORT 0): CUDA tensors staged through host memory";
#else
  out += "CUDA-awareness unknown (no MPIX_Query_cuda_support): CUDA tensors staged through host memory";
#endif
  if (initialized() && !finalized()) out += "; rank " + std::to_string(rank()) + " of " + std::to_string(size());
  return out;
}

bool cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return initialized() && !finalized() && MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

void init() {
  int flag = 0;
  MPI_Initialized(&flag);
  if (!flag) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init", "MPI_Init_thread");
  }
  // Errors come back as codes, which become kiln::Error naming the collective.
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "init", "MPI_Comm_set_errhandler");
}

bool initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

bool finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

void finalize() { MPI_Finalize(); }

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; in case it did
}

std::unique_ptr<Pending> start_barrier(const char* op) {
  auto p = std::make_unique<Requests>(op);
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, p->add()), op, "MPI_Ibarrier");
  return p;
}

// start(piece, n, request) for each piece of at most kPiece elements of data's count, in
// order; one call even for count 0, since every rank must take part.
template <class F>
std::unique_ptr<Pending> start_in_pieces(const char* op, void* data, int64_t count, Wire w, F&& start) {
  auto p = std::make_unique<Requests>(op);
  char* bytes = static_cast<char*>(data);
  p->reserve(static_cast<size_t>(count / kPiece + 1));
  int64_t at = 0;
  do {
    const int n = static_cast<int>(std::min(kPiece, count - at));
    start(bytes + at * static_cast<int64_t>(wire_size(w)), n, p->add());
    at += n;
  } while (at < count);
  return p;
}

std::unique_ptr<Pending> start_all_reduce(const char* op, void* data, int64_t count, Wire w, WireOp o) {
  return start_in_pieces(op, data, count, w, [&](void* piece, int n, MPI_Request* r) {
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, piece, n, mpi_type(w), mpi_op(o), MPI_COMM_WORLD, r), op,
              "MPI_Iallreduce");
  });
}

std::unique_ptr<Pending> start_broadcast(const char* op, void* data, int64_t count, Wire w, int root) {
  return start_in_pieces(op, data, count, w, [&](void* piece, int n, MPI_Request* r) {
    check_mpi(MPI_Ibcast(piece, n, mpi_type(w), root, MPI_COMM_WORLD, r), op, "MPI_Ibcast");
  });
}

std::unique_ptr<Pending> start_all_gather(const char* op, const void* in, void* out, int64_t count, Wire w) {
  auto p = std::make_unique<Requests>(op);
  const int n = int_count(op, count);
  check_mpi(MPI_Iallgather(in, n, mpi_type(w), out, n, mpi_type(w), MPI_COMM_WORLD, p->add()), op,
            "MPI_Iallgather");
  return p;
}

std::unique_ptr<Pending> start_reduce_scatter(const char* op, const void* in, void* out, int64_t count, Wire w,
                                              WireOp o) {
  auto p = std::make_unique<Requests>(op);
  const int n = int_count(op, count);
  check_mpi(MPI_Ireduce_scatter_block(in, out, n, mpi_type(w), mpi_op(o), MPI_COMM_WORLD, p->add()), op,
            "MPI_Ireduce_scatter_block");
  return p;
}

}  // namespace kiln::distributed::detail
