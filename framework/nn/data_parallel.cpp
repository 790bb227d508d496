#include "nn/data_parallel.h"

#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "ops/ops.h"

namespace kiln::nn::parallel {
namespace dist = kiln::distributed;

struct DistributedDataParallel::Param {
  std::string name;
  Tensor tensor;
  size_t bucket = 0;
  int64_t offset = 0;  // its elements' place in the bucket's flat buffer
  bool ready = false;  // its gradient arrived in this pass
};

struct DistributedDataParallel::Bucket {
  std::vector<size_t> params;
  Tensor flat;         // the gradients, one after the other (the parameters' dtype and device)
  size_t pending = 0;  // parameters whose gradient has not arrived in this pass
  dist::Work work;     // its all-reduce, once started
};

namespace {

// FNV-1a over the text: the same on every rank for the same module layout.
int64_t fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

std::string layout_of(const NamedTensors& named) {
  std::string s;
  for (const auto& [name, t] : named) {
    s += name + ":";
    if (t.defined()) s += std::string(dtype_name(t.dtype())) + shape_str(t.shape());
    s += ";";
  }
  return s;
}

// Every rank must hold the same parameters and buffers: their count and a fingerprint of
// their names, dtypes and shapes, gathered from every rank and compared with rank 0's.
void check_same_layout(const Module& module) {
  const NamedTensors params = module.named_parameters(), buffers = module.named_buffers();
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(params.size()), static_cast<int64_t>(buffers.size()),
                                      fingerprint(layout_of(params) + "|" + layout_of(buffers))},
                                     {3});
  std::vector<Tensor> all;
  dist::all_gather(all, mine);
  const std::vector<int64_t> first = all[0].to_vector<int64_t>();
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<int64_t> other = all[r].to_vector<int64_t>();
    KILN_CHECK(other == first, "DistributedDataParallel", "rank ", r, "'s module differs from rank 0's: ", other[0],
               " parameters and ", other[1], " buffers against ", first[0], " and ", first[1],
               other[0] == first[0] && other[1] == first[1] ? ", with other names, dtypes or shapes" : "",
               " (every rank must build the same module)");
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(Module& module, DistributedDataParallelOptions options)
    : module_(module), opts_(options) {
  KILN_CHECK(std::isfinite(opts_.bucket_cap_mb) && opts_.bucket_cap_mb > 0, "DistributedDataParallel",
             "bucket_cap_mb must be a positive number of MiB, got ", opts_.bucket_cap_mb);
  if (!dist::is_initialized()) {
    if (!dist::is_available()) dist::init();  // throws "[distributed] Kiln was not built with MPI …"
    KILN_FAIL("DistributedDataParallel",
              "the process group is not initialized: call kiln::distributed::init() first (under mpirun)");
  }
  check_same_layout(module_);
  // Rank 0's values everywhere: every replica starts from the same point.
  for (const auto& [name, t] : module_.named_parameters()) dist::broadcast(t, 0);
  for (const auto& [name, t] : module_.named_buffers())
    if (t.defined()) dist::broadcast(t, 0);

  // Buckets in reverse registration order, one open bucket per (dtype, device).
  const NamedTensors named = module_.named_parameters();
  const double cap_bytes = opts_.bucket_cap_mb * 1024.0 * 1024.0;
  std::map<std::tuple<int, int, int>, size_t> open;  // (dtype, device type, index) -> bucket
  std::vector<int64_t> bucket_bytes;
  for (auto it = named.rbegin(); it != named.rend(); ++it) {
    const Tensor& t = it->second;
    if (!t.defined() || !t.requires_grad()) continue;
    const auto key = std::make_tuple(static_cast<int>(t.dtype()), static_cast<int>(t.device().type),
                                     static_cast<int>(t.device().index));
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    auto found = open.find(key);
    if (found == open.end() || static_cast<double>(bucket_bytes[found->second] + bytes) > cap_bytes) {
      buckets_.emplace_back();
      bucket_bytes.push_back(0);
      found = open.insert_or_assign(key, buckets_.size() - 1).first;
    }
    const size_t b = found->second;
    Param p;
    p.name = it->first;
    p.tensor = t;
    p.bucket = b;
    p.offset = bucket_bytes[b] / static_cast<int64_t>(t.element_size());
    bucket_bytes[b] += bytes;
    buckets_[b].params.push_back(params_.size());
    params_.push_back(std::move(p));
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& first = params_[buckets_[b].params.front()].tensor;
    const int64_t numel = bucket_bytes[b] / static_cast<int64_t>(first.element_size());
    buckets_[b].flat = zeros({numel}, TensorOptions(first.dtype()).device(first.device()));
  }
  reset_pass();
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(params_[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (HookHandle& h : hooks_) h.remove();
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(params_[i].name);
  }
  return out;
}

void DistributedDataParallel::reset_pass() {
  in_pass_ = false;
  next_bucket_ = 0;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work = dist::Work();
  }
  for (Param& p : params_) p.ready = false;
}

void DistributedDataParallel::on_gradient(size_t i) {
  if (!sync_) return;  // no_sync(): the gradient stays local and accumulates
  if (in_pass_ && pass_id_ != backward_pass_id()) {
    // The pass that started the reduction ended with an error before its last node: what
    // it started is finished and forgotten.
    for (size_t k = 0; k < next_bucket_; ++k) buckets_[k].work.wait();
    reset_pass();
  }
  if (!in_pass_) {
    in_pass_ = true;
    pass_id_ = backward_pass_id();
    queue_backward_callback([this] { finish_backward(); });
  }
  Param& p = params_[i];
  KILN_CHECK(!p.ready, "DistributedDataParallel", "parameter '", p.name,
             "' got a gradient twice in one backward pass; DDP averages each parameter once per pass");
  p.ready = true;
  Bucket& b = buckets_[p.bucket];
  {
    NoGradGuard no_grad;
    b.flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape()).copy_(p.tensor.grad());
  }
  if (--b.pending == 0) {
    start_ready_buckets(true);
  } else {
    // MPI moves a non-blocking collective on only inside MPI calls: give the started ones a turn.
    for (size_t k = 0; k < next_bucket_; ++k) buckets_[k].work.is_completed();
  }
}

void DistributedDataParallel::start_ready_buckets(bool from_hook) {
  // In index order on every rank: MPI matches collectives by the order they are called in.
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_];
    b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::kMean);
    const int64_t wire_size = b.flat.dtype() == kBFloat16 ? 4 : static_cast<int64_t>(b.flat.element_size());
    stats_.bytes += b.flat.numel() * wire_size;
    ++(from_hook ? stats_.buckets_started_in_hooks : stats_.buckets_started_at_end);
    ++next_bucket_;
  }
}

void DistributedDataParallel::finish_backward() {
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].ready) missing.push_back(i);
  if (!missing.empty() && !opts_.find_unused_parameters) {
    // Finish what was started (every rank started the same buckets) so that the ranks stay
    // in step, then refuse the pass.
    for (size_t k = 0; k < next_bucket_; ++k) buckets_[k].work.wait();
    reset_pass();
    std::string names;
    for (size_t i : missing) names += (names.empty() ? "" : ", ") + params_[i].name;
    KILN_FAIL("DistributedDataParallel", missing.size(), " parameter(s) got no gradient in this backward pass: ",
              names, ". Use every parameter in the loss, or construct DistributedDataParallel with "
              "find_unused_parameters = true");
  }
  NoGradGuard no_grad;
  for (size_t i : missing) {  // a zero share of the average
    Param& p = params_[i];
    Bucket& b = buckets_[p.bucket];
    b.flat.narrow(0, p.offset, p.tensor.numel()).zero_();
    --b.pending;
  }
  start_ready_buckets(false);
  const auto start = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) b.work.wait();
  // Which parameters some rank used: those get the average, even where unused here.
  std::vector<bool> used(params_.size(), true);
  if (opts_.find_unused_parameters) {
    Tensor here = empty({static_cast<int64_t>(params_.size())}, kBool);
    for (size_t i = 0; i < params_.size(); ++i) here.set({static_cast<int64_t>(i)}, params_[i].ready ? 1.0 : 0.0);
    dist::all_reduce(here, dist::ReduceOp::kMax);  // or
    for (size_t i = 0; i < params_.size(); ++i) used[i] = here.at({static_cast<int64_t>(i)}) != 0;
  }
  stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    Tensor avg = buckets_[p.bucket].flat.narrow(0, p.offset, p.tensor.numel()).view(p.tensor.shape());
    if (p.ready) {
      Tensor g = p.tensor.grad();
      g.copy_(avg);
    } else if (used[i]) {
      p.tensor.set_grad(avg.clone());
    }
  }
  ++stats_.backward_passes;
  reset_pass();
}

}  // namespace kiln::nn::parallel
