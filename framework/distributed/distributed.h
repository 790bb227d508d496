#pragma once
// Data-parallel training over MPI, with torch.distributed's names: one process per
// replica, started by Open MPI's launcher (`mpirun -np 4 ./train`), each calling init()
// and then collectives on tensors that every process calls in the same order.
//
//   distributed::init();                           // torch: init_process_group("mpi")
//   Tensor g = …;                                  // the same shape on every rank
//   distributed::all_reduce(g, distributed::ReduceOp::kMean);
//
// Collectives take tensors of every dtype (bfloat16 is reduced in float32 and rounded
// once), any layout (a non-contiguous tensor is staged through a contiguous copy and
// written back) and any device (a CUDA tensor is staged through host memory). They are
// in place on their tensor handles, never recorded by autograd, and bump the version of
// what they write.
//
// No hang: a collective waits for MPI in a loop with a deadline (300 s, or
// KILN_DISTRIBUTED_TIMEOUT seconds); past it the process prints
// "[distributed] rank R: all_reduce timed out after S s" and MPI_Abort()s the job, so a
// rank that died or took another path ends every rank.
//
// In a Kiln built without MPI (meson -Dmpi=disabled, or no libopenmpi-dev found) every
// call but is_available(), is_initialized() and launched_by_mpi() throws
// "[distributed] Kiln was not built with MPI (install libopenmpi-dev and configure with
// -Dmpi=enabled)".
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace kiln::distributed {

// torch.distributed.ReduceOp's SUM, AVG and MAX. On bool tensors kSum and kMax are a
// logical or (torch's sum of bools saturates the same way); kMean needs a floating dtype.
enum class ReduceOp { kSum, kMean, kMax };
const char* reduce_op_name(ReduceOp op);  // "sum", "mean", "max"

// True when this Kiln was built with MPI.
bool is_available();
// True when the environment is that of an MPI launcher (mpirun/mpiexec set
// OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE): a program calls init() then. It reads
// the environment only, in any build.
bool launched_by_mpi();

// Initialises MPI (MPI_Init_thread, FUNNELED: collectives from the thread that called
// init) and the process group of every process mpirun started, once: a second init()
// does nothing. A program launched without mpirun is a world of one process. MPI is
// finalised when the program exits (or by destroy_process_group()).
void init();
// torch's spelling: backend must be "mpi". An error when already initialised.
void init_process_group(const std::string& backend = "mpi");
bool is_initialized();
// Finalises MPI (MPI_Finalize, which waits for every rank to get there). MPI cannot be
// initialised again in this process.
void destroy_process_group();

int rank();        // 0 … world_size() - 1
int world_size();  // the processes of the job
inline int get_rank() { return rank(); }  // torch's spellings
inline int get_world_size() { return world_size(); }
// How long a collective waits before it ends the job (KILN_DISTRIBUTED_TIMEOUT, 300 s).
double timeout_seconds();

// Waits until every rank got here.
void barrier();
// tensor <- op over every rank's tensor (same shape and dtype on every rank).
void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
// tensor <- rank src's tensor.
void broadcast(const Tensor& tensor, int src);
// out[r] <- rank r's tensor. out holds world_size() tensors of tensor's shape, dtype and
// device; an empty out is filled with new ones.
void all_gather(std::vector<Tensor>& out, const Tensor& tensor);
// out <- op over every rank's in[rank()]: in holds world_size() tensors of out's shape
// and dtype (torch.distributed.reduce_scatter).
void reduce_scatter(const Tensor& out, const std::vector<Tensor>& in, ReduceOp op = ReduceOp::kSum);

// Ends every process of the job (MPI_Abort) with this exit code, after writing
// "[distributed] rank R: <message>" to stderr. Without MPI (or before init) it exits.
[[noreturn]] void abort(const std::string& message, int code = 1);

class Work;
Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);

// An all-reduce in flight (torch's Work of async_op=True): started by all_reduce_async,
// moved on by is_completed() (MPI_Test), finished by wait(), which writes the result
// into the tensor (and divides for kMean). Destroying one that is not finished waits
// for it as wait() does.
class Work {
 public:
  Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  bool is_completed();
  void wait();

 private:
  struct State;
  explicit Work(std::unique_ptr<State> s);
  void finish_quietly() noexcept;  // waits for MPI to be done with the buffer
  std::unique_ptr<State> s_;
  friend Work all_reduce_async(const Tensor&, ReduceOp);
};

// What this process's collectives have done since start (or the last reset): how many
// were started, the bytes each rank contributed (the tensors' payload as sent: float32
// for bfloat16) and the seconds spent waiting for them to finish.
struct CommStats {
  int64_t collectives = 0;
  int64_t bytes = 0;
  double wait_seconds = 0;
};
CommStats comm_stats();
void reset_comm_stats();

}  // namespace kiln::distributed
