#pragma once
// torch.nn.parallel.DistributedDataParallel over kiln::distributed (MPI): every process
// holds a replica of the module and trains it on its own shard of each batch; backward
// averages the gradients over the processes, so that every replica takes the same
// optimizer step.
//
//   distributed::init();
//   MyNet net;
//   nn::parallel::DistributedDataParallel ddp(net);   // rank 0's parameters everywhere
//   Tensor loss = loss_fn(net(x_shard), y_shard);      // call the module itself
//   loss.backward();                                   // gradients averaged on return
//   optimizer.step();
//
// How: at construction every parameter and buffer is broadcast from rank 0, and the
// parameters that require grad are cut into buckets of about bucket_cap_mb (per dtype and
// device), in reverse registration order: roughly the order in which backward produces
// their gradients. Each parameter has a post-accumulate-grad hook; when the last gradient
// of a bucket is in, the hook copies the bucket's gradients into one flat buffer and
// starts its all-reduce (MPI_Iallreduce), so that communication overlaps the rest of
// backward; later hooks move it on (MPI_Test), and at the end of backward (a backward
// callback) the remaining buckets are started, every one is waited for, and the averages
// are written into the parameters' .grad(). Buckets start in index order on every rank,
// as MPI needs.
//
// Unlike torch's, the wrapper is not a Module: the module is called directly (DDP works
// through the gradient hooks alone) and its state_dict keys have no "module." prefix.
// Buffers are broadcast at construction only (torch's broadcast_buffers repeats it at
// every forward; the buffers of Kiln's modules never change in training).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "../distributed/distributed.h"
#include "module.h"

namespace kiln::nn::parallel {

struct DistributedDataParallelOptions {
  // A bucket's size in MiB (torch's bucket_cap_mb): larger means fewer, longer all-reduces,
  // smaller ones start sooner. A parameter larger than it gets a bucket of its own.
  double bucket_cap_mb = 25;
  // Parameters that get no gradient in a backward pass (not used in forward on this rank)
  // are allowed: their share of the average is zero, and a parameter no rank used keeps
  // an undefined .grad(). Without it such a backward is an error naming them.
  bool find_unused_parameters = false;
};

class DistributedDataParallel {
 public:
  // Needs an initialised process group (distributed::init()). The module must outlive
  // the wrapper; its parameters must have the same names, shapes and dtypes on every rank
  // (checked here).
  explicit DistributedDataParallel(Module& module, DistributedDataParallelOptions options = {});
  ~DistributedDataParallel();  // removes the hooks
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  const DistributedDataParallelOptions& options() const { return opts_; }

  // torch's no_sync(): while the guard lives, backward leaves the gradients local (they
  // accumulate in .grad()); the first backward after it averages what accumulated.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // The parameters' names in each bucket, bucket 0 first (the last registered parameters).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // What the gradient reductions did since construction (or reset_stats()).
  struct Stats {
    int64_t backward_passes = 0;       // passes whose gradients were averaged
    int64_t buckets_started_in_hooks = 0;  // all-reduces started during backward, by a hook
    int64_t buckets_started_at_end = 0;    // started by the end-of-backward callback
    int64_t bytes = 0;                 // gradient bytes this rank contributed
    double wait_seconds = 0;           // at the end of backward, waiting for the all-reduces
  };
  const Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = Stats{}; }

 private:
  struct Param;
  struct Bucket;
  void on_gradient(size_t param);
  void start_ready_buckets(bool from_hook);
  void finish_backward();
  void reset_pass();

  Module& module_;
  DistributedDataParallelOptions opts_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<HookHandle> hooks_;
  bool sync_ = true;
  bool in_pass_ = false;       // a backward pass has delivered gradients since the last end
  uint64_t pass_id_ = 0;       // which (backward_pass_id())
  size_t next_bucket_ = 0;     // the next bucket to start, in index order
  Stats stats_;
};

}  // namespace kiln::nn::parallel
