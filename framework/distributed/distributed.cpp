// The process group: argument checks, staging of tensors into buffers MPI can take, and
// waiting with a deadline. What talks to MPI is mpi_transport.cpp (or mpi_none.cpp).
#include "distributed/distributed.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "autograd/grad_mode.h"
#include "distributed/mpi_transport.h"
#include "ops/ops.h"

namespace kiln::distributed {
namespace {

using Clock = std::chrono::steady_clock;

enum class GroupState { kNone, kReady, kDestroyed };
GroupState g_state = GroupState::kNone;
bool g_finalize_at_exit = false;  // init() started MPI, so MPI is finalised at exit
double g_timeout = -1;            // seconds; read from the environment once
CommStats g_stats;

constexpr double kDefaultTimeout = 300;

double read_timeout() {
  const char* env = std::getenv("KILN_DISTRIBUTED_TIMEOUT");
  if (!env) return kDefaultTimeout;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  KILN_CHECK(end != env && *end == '\0' && std::isfinite(v) && v > 0, "distributed",
             "KILN_DISTRIBUTED_TIMEOUT must be a positive number of seconds, got '", env, "'");
  return v;
}

void finalize_at_exit() {
  if (g_state == GroupState::kReady && g_finalize_at_exit && !detail::finalized()) detail::finalize();
}

// Throws "not built with MPI" in a build without it, then "not initialized" before init().
void check_ready(const char* op) {
  if (!detail::built()) detail::init();  // throws "[distributed] Kiln was not built with MPI …"
  KILN_CHECK(g_state != GroupState::kDestroyed, op,
             "the process group was destroyed (destroy_process_group); MPI cannot start again in this process");
  KILN_CHECK(g_state == GroupState::kReady, op,
             "the process group is not initialized: call kiln::distributed::init() first (under mpirun)");
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  KILN_CHECK(t.defined(), op, what, " is an undefined tensor");
}

[[noreturn]] void timed_out(const char* op, double limit) {
  std::fprintf(stderr, "[distributed] rank %d: %s timed out after %g s\n", detail::rank(), op, limit);
  std::fflush(stderr);
  detail::abort_job(1);
}

// Waits for p with MPI_Test in a loop: spinning first (a collective between processes on
// one machine takes microseconds), then yielding the core, then short sleeps, so that a
// long wait (a slower rank, oversubscribed cores) costs the machine little. Past the
// deadline the whole job is ended: a rank that died or called another collective would
// otherwise leave this one waiting for ever.
void wait_for(detail::Pending& p, const char* op) {
  const Clock::time_point start = Clock::now();
  const double limit = timeout_seconds();
  for (int64_t polls = 0; !p.test(); ++polls) {
    if (polls < 2000) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > limit) timed_out(op, limit);
    if (polls < 4000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  g_stats.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

// The dtype a reduction runs in: bfloat16 in float32 (MPI has no bfloat16 arithmetic).
DType reduce_dtype(DType t) { return t == kBFloat16 ? kFloat32 : t; }

detail::Wire wire_of(DType t) {
  switch (t) {
    case DType::Float32: return detail::Wire::kFloat32;
    case DType::Float64: return detail::Wire::kFloat64;
    case DType::Int64: return detail::Wire::kInt64;
    case DType::Bool: return detail::Wire::kBool;
    case DType::BFloat16: break;
  }
  return detail::Wire::kWord16;  // moved as its bits, never reduced by MPI
}

detail::WireOp wire_op(ReduceOp op, DType t) {
  if (t == kBool) return detail::WireOp::kLor;  // sum and max of bools saturate: or
  return op == ReduceOp::kMax ? detail::WireOp::kMax : detail::WireOp::kSum;
}

void check_op(const char* name, ReduceOp op, DType t) {
  KILN_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean || op == ReduceOp::kMax, name, "unknown ReduceOp ",
             static_cast<int>(op));
  KILN_CHECK(op != ReduceOp::kMean || is_floating(t), name,
             "ReduceOp::kMean needs a floating-point tensor (float32, float64 or bfloat16), got ", dtype_name(t));
}

// A contiguous buffer of t's values in `dtype` that MPI can read and write: t itself when
// it already is one (contiguous, that dtype, in host memory or on a GPU a CUDA-aware MPI
// reads), otherwise a host copy. Detached: collectives are not recorded by autograd.
Tensor staging_buffer(const Tensor& t, DType dtype) {
  Tensor d = t.detach();
  if (d.dtype() == dtype && d.is_contiguous() && (d.device().is_cpu() || detail::cuda_aware())) return d;
  return d.to(Device()).to(dtype).contiguous();
}

// Writes buf's values into t (converting dtype and device): for a buffer that is t's own
// memory, only the version (so that saved tensors see the change).
void write_back(const Tensor& t, const Tensor& buf) {
  if (buf.same_storage(t)) {
    t.bump_version();
    return;
  }
  NoGradGuard no_grad;
  Tensor target = t.detach();  // same storage: the copy bumps t's version
  target.copy_(buf);
}

// kMean's last step: buf / world, a true division (div_ by a double multiplies by its
// reciprocal, which is not the correctly rounded quotient).
void divide_by_world(const Tensor& buf, int world) {
  NoGradGuard no_grad;
  Tensor b = buf;
  b.div_(full({}, static_cast<double>(world), TensorOptions(buf.dtype()).device(buf.device())));
}

int64_t payload_bytes(const Tensor& buf) { return buf.numel() * static_cast<int64_t>(buf.element_size()); }

void count(int64_t bytes) {
  ++g_stats.collectives;
  g_stats.bytes += bytes;
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMean: return "mean";
    case ReduceOp::kMax: return "max";
  }
  return "unknown";
}

bool is_available() { return detail::built(); }

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

void init() {
  if (g_state == GroupState::kReady) return;
  KILN_CHECK(g_state != GroupState::kDestroyed, "init",
             "the process group was destroyed (destroy_process_group); MPI cannot start again in this process");
  const bool mpi_was_running = detail::built() && detail::initialized();
  // A bad KILN_DISTRIBUTED_TIMEOUT fails before MPI starts; the value is kept only once
  // init() has succeeded (a failed init(), e.g. "not built with MPI", leaves it unread).
  const double timeout = read_timeout();
  detail::init();  // in a build without MPI: "[distributed] Kiln was not built with MPI …"
  g_timeout = timeout;
  g_state = GroupState::kReady;
  // A program that returns from main must have finalised MPI, or mpirun reports it as
  // failed. MPI that someone else started is theirs to finalise.
  g_finalize_at_exit = !mpi_was_running;
  static bool registered = false;
  if (!registered && g_finalize_at_exit) {
    std::atexit(finalize_at_exit);
    registered = true;
  }
}

void init_process_group(const std::string& backend) {
  KILN_CHECK(backend == "mpi", "init_process_group", "backend '", backend,
             "' is not available: Kiln's process group runs on MPI (\"mpi\")");
  KILN_CHECK(g_state != GroupState::kReady, "init_process_group",
             "trying to initialize the default process group twice");
  init();
}

bool is_initialized() { return g_state == GroupState::kReady; }

void destroy_process_group() {
  check_ready("destroy_process_group");
  detail::finalize();
  g_state = GroupState::kDestroyed;
}

int rank() {
  check_ready("rank");
  return detail::rank();
}

int world_size() {
  check_ready("world_size");
  return detail::size();
}

double timeout_seconds() {
  if (g_timeout < 0) g_timeout = read_timeout();
  return g_timeout;
}

void barrier() {
  check_ready("barrier");
  std::unique_ptr<detail::Pending> p = detail::start_barrier("barrier");
  count(0);
  wait_for(*p, "barrier");
}

// ---------------------------------------------------------------- all_reduce (async)

struct Work::State {
  Tensor target;  // the caller's tensor
  Tensor buf;     // what MPI reduces: target itself or a staged copy
  ReduceOp op = ReduceOp::kSum;
  int world = 1;
  std::unique_ptr<detail::Pending> pending;
  bool finished = false;
};

Work::Work() = default;
Work::Work(std::unique_ptr<State> s) : s_(std::move(s)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& o) noexcept {
  if (this != &o) {
    finish_quietly();
    s_ = std::move(o.s_);
  }
  return *this;
}
Work::~Work() { finish_quietly(); }

void Work::finish_quietly() noexcept {
  // MPI writes into the buffer until the request completes: never free it earlier. An
  // error here cannot be thrown (a destructor): it ends the job with its message.
  if (!s_ || s_->finished) return;
  try {
    wait();
  } catch (const std::exception& e) {
    abort(e.what());
  }
}

bool Work::is_completed() {
  if (!s_ || s_->finished) return true;
  return s_->pending->test();
}

void Work::wait() {
  if (!s_ || s_->finished) return;
  wait_for(*s_->pending, "all_reduce");
  s_->finished = true;
  if (s_->op == ReduceOp::kMean) divide_by_world(s_->buf, s_->world);
  write_back(s_->target, s_->buf);
}

Work all_reduce_async(const Tensor& tensor, ReduceOp op) {
  check_ready("all_reduce");
  check_defined("all_reduce", tensor, "the tensor");
  check_op("all_reduce", op, tensor.dtype());
  auto s = std::make_unique<Work::State>();
  s->target = tensor;
  s->op = op;
  s->world = detail::size();
  const DType dtype = reduce_dtype(tensor.dtype());
  s->buf = staging_buffer(tensor, dtype);
  s->pending = detail::start_all_reduce("all_reduce", s->buf.data_ptr(), s->buf.numel(), wire_of(dtype),
                                        wire_op(op, dtype));
  count(payload_bytes(s->buf));
  return Work(std::move(s));
}

void all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }

// ---------------------------------------------------------------- broadcast, gathers

void broadcast(const Tensor& tensor, int src) {
  check_ready("broadcast");
  check_defined("broadcast", tensor, "the tensor");
  const int world = detail::size();
  KILN_CHECK(src >= 0 && src < world, "broadcast", "src rank ", src, " is out of range for a world of ", world,
             " processes (ranks 0 to ", world - 1, ")");
  Tensor buf = staging_buffer(tensor, tensor.dtype());
  std::unique_ptr<detail::Pending> p =
      detail::start_broadcast("broadcast", buf.data_ptr(), buf.numel(), wire_of(buf.dtype()), src);
  count(payload_bytes(buf));
  wait_for(*p, "broadcast");
  if (detail::rank() != src) write_back(tensor, buf);
}

void all_gather(std::vector<Tensor>& out, const Tensor& tensor) {
  check_ready("all_gather");
  check_defined("all_gather", tensor, "the tensor");
  const int world = detail::size();
  if (out.empty()) {
    for (int r = 0; r < world; ++r) out.push_back(empty(tensor.shape(), TensorOptions(tensor.dtype()).device(tensor.device())));
  }
  KILN_CHECK(static_cast<int64_t>(out.size()) == world, "all_gather", "out holds ", out.size(),
             " tensors but the world has ", world, " processes");
  for (size_t r = 0; r < out.size(); ++r) {
    KILN_CHECK(out[r].defined(), "all_gather", "out[", r, "] is an undefined tensor");
    KILN_CHECK(out[r].shape() == tensor.shape(), "all_gather", "out[", r, "] has shape ", shape_str(out[r].shape()),
               " but the tensor has shape ", shape_str(tensor.shape()));
    KILN_CHECK(out[r].dtype() == tensor.dtype(), "all_gather", "out[", r, "] is ", dtype_name(out[r].dtype()),
               " but the tensor is ", dtype_name(tensor.dtype()));
  }
  Tensor send = tensor.detach().to(Device()).contiguous();
  Tensor recv = empty({world, tensor.numel()}, TensorOptions(tensor.dtype()));
  std::unique_ptr<detail::Pending> p = detail::start_all_gather("all_gather", send.data_ptr(), recv.data_ptr(),
                                                                tensor.numel(), wire_of(tensor.dtype()));
  count(payload_bytes(send));
  wait_for(*p, "all_gather");
  for (int r = 0; r < world; ++r) write_back(out[static_cast<size_t>(r)], recv.select(0, r).view(tensor.shape()));
}

void reduce_scatter(const Tensor& out, const std::vector<Tensor>& in, ReduceOp op) {
  check_ready("reduce_scatter");
  check_defined("reduce_scatter", out, "out");
  check_op("reduce_scatter", op, out.dtype());
  const int world = detail::size();
  KILN_CHECK(static_cast<int64_t>(in.size()) == world, "reduce_scatter", "in holds ", in.size(),
             " tensors but the world has ", world, " processes");
  for (size_t r = 0; r < in.size(); ++r) {
    KILN_CHECK(in[r].defined(), "reduce_scatter", "in[", r, "] is an undefined tensor");
    KILN_CHECK(in[r].shape() == out.shape(), "reduce_scatter", "in[", r, "] has shape ", shape_str(in[r].shape()),
               " but out has shape ", shape_str(out.shape()));
    KILN_CHECK(in[r].dtype() == out.dtype(), "reduce_scatter", "in[", r, "] is ", dtype_name(in[r].dtype()),
               " but out is ", dtype_name(out.dtype()));
  }
  const DType dtype = reduce_dtype(out.dtype());
  const int64_t n = out.numel();
  Tensor send = empty({world, n}, TensorOptions(dtype));
  Tensor recv = empty(out.shape(), TensorOptions(dtype));
  {
    NoGradGuard no_grad;
    for (int r = 0; r < world; ++r) send.select(0, r).view(out.shape()).copy_(in[static_cast<size_t>(r)].detach());
  }
  std::unique_ptr<detail::Pending> p = detail::start_reduce_scatter(
      "reduce_scatter", send.data_ptr(), recv.data_ptr(), n, wire_of(dtype), wire_op(op, dtype));
  count(payload_bytes(send));
  wait_for(*p, "reduce_scatter");
  if (op == ReduceOp::kMean) divide_by_world(recv, world);
  write_back(out, recv);
}

// ---------------------------------------------------------------- failure, statistics

void abort(const std::string& message, int code) {
  if (g_state == GroupState::kReady) {
    std::fprintf(stderr, "[distributed] rank %d: %s\n", detail::rank(), message.c_str());
    std::fflush(stderr);
    detail::abort_job(code);
  }
  std::fprintf(stderr, "[distributed] %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

CommStats comm_stats() { return g_stats; }
void reset_comm_stats() { g_stats = CommStats{}; }

}  // namespace kiln::distributed
