// nn::parallel::DistributedDataParallel under mpirun -np 2 and -np 3: every
// rank trains on its shard of a batch that every rank can build (the same seed), and
// compares with one process's run on the whole batch, computed here on every rank.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../test_util.h"
#include "mpi_test_util.h"

using namespace kiln;
namespace dist = kiln::distributed;
using nn::parallel::DistributedDataParallel;
using nn::parallel::DistributedDataParallelOptions;

namespace {

// 8 -> 16 -> 16 -> 4, tanh between: parameters 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias.
std::shared_ptr<nn::Sequential> make_net(uint64_t seed, DType dtype = kFloat64) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16), std::make_shared<nn::Tanh>(),
                                              std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::Tanh>(),
                                              std::make_shared<nn::Linear>(16, 4));
  net->to(dtype);
  return net;
}

struct Batch {
  Tensor x, y;
};

// The whole batch (world * rows rows), the same on every rank.
Batch global_batch(int world, int64_t rows, uint64_t seed, DType dtype = kFloat64) {
  manual_seed(seed);
  return {randn({world * rows, 8}).to(dtype), randn({world * rows, 4}).to(dtype)};
}

Batch shard(const Batch& b, int rank, int world) {
  const int64_t rows = b.x.size(0) / world;
  return {b.x.narrow(0, rank * rows, rows), b.y.narrow(0, rank * rows, rows)};
}

// |a - b| <= atol + rtol |b| everywhere.
void check_close(const std::string& what, const Tensor& a, const Tensor& b, double rtol, double atol) {
  INFO(what);
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.shape() == b.shape());
  std::vector<double> x = a.to(kFloat64).reshape({-1}).to_vector<double>(), y = b.to(kFloat64).reshape({-1}).to_vector<double>();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double excess = std::abs(x[i] - y[i]) - (atol + rtol * std::abs(y[i]));
    if (excess > worst) {
      worst = excess;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= 0, "element ", at, ": ", x[at], " against ", y[at]);
}

// Every rank holds the same bits in t (rank 0's, broadcast, compared byte for byte).
bool same_on_every_rank(const Tensor& t) {
  Tensor mine = t.detach().contiguous().clone();
  Tensor zero = mine.clone();
  dist::broadcast(zero, 0);
  Tensor equal = full({1}, std::memcmp(mine.data_ptr(), zero.data_ptr(), mine.numel() * mine.element_size()) == 0 ? 1.0 : 0.0);
  dist::all_reduce(equal, dist::ReduceOp::kSum);
  return equal.item() == dist::world_size();
}

}  // namespace

TEST_CASE("DDP: rank 0's parameters everywhere; gradients equal one process's on the concatenated batch") {
  RANK_INFO();
  for (DType dtype : {kFloat64, kFloat32}) {
    INFO(dtype_name(dtype));
    // Tolerances: float64 or float32 summation in another order (the shards' means are
    // averaged instead of one mean over every row).
    const double rtol = dtype == kFloat64 ? 1e-12 : 2e-5, atol = dtype == kFloat64 ? 1e-14 : 1e-7;
    auto net = make_net(100 + static_cast<uint64_t>(rank_), dtype);  // a different start on each rank
    auto ref = make_net(100, dtype);                                  // rank 0's start, one process
    DistributedDataParallel ddp(*net, {.bucket_cap_mb = 0.001});
    const nn::NamedTensors start = net->named_parameters(), ref_start = ref->named_parameters();
    REQUIRE(start.size() == ref_start.size());
    for (size_t i = 0; i < start.size(); ++i) {
      const std::string& name = start[i].first;
      REQUIRE(ref_start[i].first == name);
      CHECK_MESSAGE(start[i].second.to_vector<double>() == ref_start[i].second.to_vector<double>(), name,
                    " is not rank 0's");
    }
    optim::SGD opt(net->parameters(), {.lr = 0.1});
    optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
    for (int step = 0; step < 4; ++step) {
      INFO("step " << step);
      Batch whole = global_batch(world_, 5, 1000 + static_cast<uint64_t>(step), dtype);
      Batch mine = shard(whole, rank_, world_);
      opt.zero_grad();
      mse_loss(net->forward(mine.x), mine.y).backward();
      ref_opt.zero_grad();
      mse_loss(ref->forward(whole.x), whole.y).backward();
      const auto got = net->named_parameters(), want = ref->named_parameters();
      for (size_t i = 0; i < got.size(); ++i) {
        check_close(got[i].first + ".grad", got[i].second.grad(), want[i].second.grad(), rtol, atol);
        CHECK_MESSAGE(same_on_every_rank(got[i].second.grad()), got[i].first, ".grad differs between ranks");
      }
      opt.step();
      ref_opt.step();
    }
    for (const auto& np : net->named_parameters()) CHECK_MESSAGE(same_on_every_rank(np.second), np.first, " differs between ranks");
    CHECK(ddp.stats().backward_passes == 4);
  }
}

TEST_CASE("DDP: buckets in reverse registration order, each within bucket_cap_mb") {
  RANK_INFO();
  auto net = make_net(1);
  // float64: 4.bias 32 B, 4.weight 512, 2.bias 128, 2.weight 2048, 0.bias 128, 0.weight 1024.
  DistributedDataParallel small(*net, {.bucket_cap_mb = 1024.0 / (1024 * 1024)});  // 1 KiB
  using Names = std::vector<std::vector<std::string>>;
  CHECK(small.bucket_parameter_names() == Names{{"4.bias", "4.weight", "2.bias"}, {"2.weight"}, {"0.bias"}, {"0.weight"}});
  auto other = make_net(1);
  DistributedDataParallel one(*other);  // 25 MiB: one bucket
  CHECK(one.bucket_parameter_names() == Names{{"4.bias", "4.weight", "2.bias", "2.weight", "0.bias", "0.weight"}});
}

TEST_CASE("DDP: bucket all-reduces start during backward, before earlier layers' gradients exist") {
  RANK_INFO();
  auto net = make_net(2);
  DistributedDataParallel ddp(*net, {.bucket_cap_mb = 1024.0 / (1024 * 1024)});  // the 4 buckets above
  Tensor w0 = net->named_parameters()[0].second;  // 0.weight: its gradient comes last
  Tensor w2 = net->named_parameters()[2].second;  // 2.weight: bucket 1
  Batch b = shard(global_batch(world_, 4, 5), rank_, world_);
  Tensor x = b.x.clone().requires_grad_();  // its gradient is computed after every parameter's

  dist::reset_comm_stats();
  int64_t started_at_w2 = -1, collectives_at_w2 = -1, started_at_x = -1;
  bool w0_grad_at_w2 = true;
  // Registered after DDP's hooks: each runs after DDP has taken that gradient.
  HookHandle h2 = w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    started_at_w2 = ddp.stats().buckets_started_in_hooks;
    collectives_at_w2 = dist::comm_stats().collectives;
    w0_grad_at_w2 = w0.grad().defined();
  });
  HookHandle hx = x.register_post_accumulate_grad_hook([&](const Tensor&) { started_at_x = ddp.stats().buckets_started_in_hooks; });
  net->zero_grad();
  mse_loss(net->forward(x), b.y).backward();
  // Buckets 0 and 1 (the last two layers) were all-reducing while layer 0's backward had
  // not run yet; all four were started by hooks before backward returned.
  CHECK(started_at_w2 == 2);
  CHECK(collectives_at_w2 == 2);
  CHECK_FALSE(w0_grad_at_w2);
  CHECK(started_at_x == 4);
  CHECK(ddp.stats().buckets_started_in_hooks == 4);
  CHECK(ddp.stats().buckets_started_at_end == 0);
  CHECK(ddp.stats().backward_passes == 1);
  CHECK(ddp.stats().bytes == (32 + 512 + 128 + 2048 + 128 + 1024));
  h2.remove();
  hx.remove();
}

TEST_CASE("DDP: no_sync() keeps gradients local; the next backward averages what accumulated") {
  RANK_INFO();
  auto net = make_net(3);
  auto ref = make_net(3);      // one process on the whole batches
  auto local = make_net(3);    // this rank alone, for the no_sync pass
  DistributedDataParallel ddp(*net);
  Batch m1 = global_batch(world_, 3, 21), m2 = global_batch(world_, 3, 22);
  {
    auto guard = ddp.no_sync();
    mse_loss(net->forward(shard(m1, rank_, world_).x), shard(m1, rank_, world_).y).backward();
  }
  mse_loss(local->forward(shard(m1, rank_, world_).x), shard(m1, rank_, world_).y).backward();
  for (size_t i = 0; i < 6; ++i)
    check_close("local grad", net->parameters()[i].grad(), local->parameters()[i].grad(), 1e-13, 1e-15);
  CHECK(ddp.stats().backward_passes == 0);

  mse_loss(net->forward(shard(m2, rank_, world_).x), shard(m2, rank_, world_).y).backward();
  mse_loss(ref->forward(m1.x), m1.y).backward();
  mse_loss(ref->forward(m2.x), m2.y).backward();
  for (size_t i = 0; i < 6; ++i)
    check_close("accumulated grad", net->parameters()[i].grad(), ref->parameters()[i].grad(), 1e-12, 1e-14);
  CHECK(ddp.stats().backward_passes == 1);
}

namespace {

// Two heads; forward uses head b only when asked.
struct TwoHeads : nn::Module {
  TwoHeads() {
    manual_seed(9);
    a = register_module("a", std::make_shared<nn::Linear>(4, 3));
    b = register_module("b", std::make_shared<nn::Linear>(4, 3));
    to(kFloat64);
  }
  Tensor forward(const Tensor& x, bool use_b) { return use_b ? a->forward(x) + b->forward(x) : a->forward(x); }
  std::shared_ptr<nn::Linear> a, b;
};

Tensor head_input(int rank) {
  manual_seed(50 + static_cast<uint64_t>(rank));
  return randn({2, 4}).to(kFloat64);
}

}  // namespace

TEST_CASE("DDP: parameters without gradient are named, or handled with find_unused_parameters") {
  RANK_INFO();
  {
    TwoHeads m;
    DistributedDataParallel ddp(m);
    CHECK_ERROR(m.forward(head_input(rank_), false).sum().backward(),
                "[DistributedDataParallel] 2 parameter(s) got no gradient in this backward pass: b.bias, b.weight. "
                "Use every parameter in the loss, or construct DistributedDataParallel with find_unused_parameters = true");
    // The ranks are still in step: the next pass works.
    m.zero_grad();
    m.forward(head_input(rank_), true).sum().backward();
    CHECK(m.b->weight.grad().defined());
    CHECK(same_on_every_rank(m.b->weight.grad()));
  }
  {
    TwoHeads m;
    DistributedDataParallel ddp(m, {.find_unused_parameters = true});
    // b unused everywhere: its gradient stays undefined, a's is averaged.
    m.forward(head_input(rank_), false).sum().backward();
    CHECK_FALSE(m.b->weight.grad().defined());
    CHECK_FALSE(m.b->bias.grad().defined());
    CHECK(same_on_every_rank(m.a->weight.grad()));
    CHECK(ddp.stats().buckets_started_at_end == 1);  // one bucket, waiting for b at the end
    // b used by rank 0 only: every rank gets rank 0's gradient over the world size.
    m.zero_grad();
    m.forward(head_input(rank_), rank_ == 0).sum().backward();
    TwoHeads alone;
    alone.forward(head_input(0), true).sum().backward();
    REQUIRE(m.b->weight.grad().defined());
    check_close("b.weight.grad", m.b->weight.grad(), alone.b->weight.grad() / static_cast<double>(world_), 1e-14, 1e-15);
    check_close("b.bias.grad", m.b->bias.grad(), alone.b->bias.grad() / static_cast<double>(world_), 1e-14, 1e-15);
  }
}

TEST_CASE("DDP: errors") {
  RANK_INFO();
  auto net = make_net(4);
  CHECK_ERROR(DistributedDataParallel(*net, {.bucket_cap_mb = 0}),
              "[DistributedDataParallel] bucket_cap_mb must be a positive number of MiB, got 0");
  // Another module on every rank but 0: refused on every rank.
  auto other = rank_ == 0 ? make_net(4) : std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 4));
  if (world_ > 1) {
    CHECK_ERROR(DistributedDataParallel(*other), "[DistributedDataParallel] rank 1's module differs from rank 0's: 2 parameters and 0 buffers against 6 and 0 (every rank must build the same module)");
  }
  auto renamed = make_net(4);
  if (rank_ > 0) renamed->to(kFloat32);  // same names and shapes, other dtype
  if (world_ > 1) CHECK_ERROR(DistributedDataParallel(*renamed), "rank 1's module differs from rank 0's: 6 parameters and 0 buffers against 6 and 0, with other names, dtypes or shapes");
}

TEST_CASE("DDP: bfloat16 parameters are averaged in float32") {
  RANK_INFO();
  auto net = make_net(6, kBFloat16);
  DistributedDataParallel ddp(*net);
  Batch whole = global_batch(world_, 2, 31, kBFloat16);
  Batch mine = shard(whole, rank_, world_);
  mse_loss(net->forward(mine.x), mine.y).backward();
  // The reference: every rank's local gradient, gathered, averaged in float32, rounded once.
  auto local = make_net(6, kBFloat16);
  std::vector<Tensor> grads;
  for (int r = 0; r < world_; ++r) {
    local->zero_grad();
    Batch s = shard(whole, r, world_);
    mse_loss(local->forward(s.x), s.y).backward();
    grads.push_back(local->parameters()[4].grad().to(kFloat32));
  }
  Tensor sum = grads[0];
  for (size_t r = 1; r < grads.size(); ++r) sum = sum + grads[r];
  Tensor want = (sum / full({}, static_cast<double>(world_))).to(kBFloat16);
  CHECK(net->parameters()[4].grad().dtype() == kBFloat16);
  // MPI adds the ranks' float32 values in an order of its own: the same within one
  // bfloat16 rounding (2^-8 relative).
  check_close("4.weight.grad", net->parameters()[4].grad(), want, 1.0 / 256, 1e-6);
}
