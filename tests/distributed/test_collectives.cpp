// kiln::distributed's collectives under mpirun -np 2 and -np 3: each rank
// builds its own input from its rank, and checks the result against values computed
// here by hand (closed forms or a loop over the ranks' inputs), for every dtype, for
// non-contiguous tensors, and for the errors of bad arguments.
#include <cmath>
#include <cstdint>
#include <vector>

#include "../test_util.h"
#include "mpi_test_util.h"

using namespace kiln;
namespace dist = kiln::distributed;
using dist::ReduceOp;

namespace {

const std::vector<DType> kAllDTypes = {kFloat32, kFloat64, kInt64, kBool, kBFloat16};

// Rank r's value at i: small integers (exact in bfloat16) that differ by rank and place;
// for bool, true at i == r.
double value(int r, int64_t i, DType dt) {
  if (dt == kBool) return i == r ? 1.0 : 0.0;
  return static_cast<double>((r + 1) * (i + 1) + ((r * 7 + static_cast<int>(i)) % 5));
}

Tensor input(int r, int64_t n, DType dt, int64_t offset = 0) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(value(r, i + offset, dt));
  return from_vector<double>(v, {n}).to(dt);
}

// The reduction of every rank's value at i, computed by a loop over the ranks.
double reduced(ReduceOp op, int world, int64_t i, DType dt) {
  double acc = op == ReduceOp::kMax ? -INFINITY : 0.0;
  for (int r = 0; r < world; ++r) {
    const double v = value(r, i, dt);
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (dt == kBool) return acc > 0 ? 1.0 : 0.0;  // sum and max of bools: or
  return op == ReduceOp::kMean ? acc / world : acc;
}

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).reshape({-1}).to_vector<double>(); }

}  // namespace

TEST_CASE("world: rank and world_size agree with the launcher") {
  RANK_INFO();
  CHECK(dist::is_initialized());
  CHECK(rank_ >= 0);
  CHECK(rank_ < world_);
  const char* env = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (env) CHECK(world_ == std::atoi(env));
  dist::barrier();
  // Every rank's rank, gathered: 0 … world - 1 in order.
  std::vector<Tensor> ranks;
  dist::all_gather(ranks, tensor({static_cast<int64_t>(rank_)}));
  REQUIRE(static_cast<int>(ranks.size()) == world_);
  for (int r = 0; r < world_; ++r) CHECK(ranks[static_cast<size_t>(r)].item_int64() == r);
}

TEST_CASE("all_reduce: sum, mean and max in every dtype against the values by hand") {
  RANK_INFO();
  const int64_t n = 7;
  for (DType dt : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      if (op == ReduceOp::kMean && !is_floating(dt)) continue;
      INFO(dtype_name(dt) << " " << dist::reduce_op_name(op));
      Tensor t = input(rank_, n, dt);
      const uint64_t version = t.version();
      dist::all_reduce(t, op);
      CHECK(t.dtype() == dt);
      CHECK(t.shape() == Shape{n});
      CHECK(t.version() > version);
      std::vector<double> got = values(t);
      for (int64_t i = 0; i < n; ++i) {
        // Exact: every value and result here is representable in each dtype (bfloat16's
        // mean of 3 ranks too: the sums are multiples of 3 … or rounded once, below).
        double want = reduced(op, world_, i, dt);
        if (dt == kBFloat16) want = static_cast<float>(bfloat16(static_cast<float>(want)));
        if (dt == kFloat32) want = static_cast<float>(want);
        CHECK(got[static_cast<size_t>(i)] == want);
      }
    }
  }
}

TEST_CASE("all_reduce: int64 stays exact beyond 2^53, bfloat16 sums in float32 and rounds once") {
  RANK_INFO();
  Tensor big = from_vector<int64_t>({(int64_t(1) << 60) + rank_, -(int64_t(1) << 58) - 3 * rank_}, {2});
  dist::all_reduce(big);
  int64_t sum_r = 0;
  for (int r = 0; r < world_; ++r) sum_r += r;
  CHECK(big.to_vector<int64_t>()[0] == world_ * (int64_t(1) << 60) + sum_r);
  CHECK(big.to_vector<int64_t>()[1] == -world_ * (int64_t(1) << 58) - 3 * sum_r);
  dist::all_reduce(big, ReduceOp::kMax);
  CHECK(big.to_vector<int64_t>()[0] == world_ * (int64_t(1) << 60) + sum_r);

  // 1 + 2^-8 + 2^-8 (+ 2^-8 …): added in bfloat16 one at a time each 2^-8 would round
  // away (ties to even at 1); summed in float32 and rounded once, 1 + 2^-7 survives from
  // three ranks on.
  Tensor b = full({3}, rank_ == 0 ? 1.0 : std::ldexp(1.0, -8), kBFloat16);
  dist::all_reduce(b);
  const float exact = 1.0f + static_cast<float>(world_ - 1) * std::ldexp(1.0f, -8);
  const double want = static_cast<float>(bfloat16(exact));
  for (double v : values(b)) CHECK(v == want);
  if (world_ >= 3) CHECK(want == 1.0 + std::ldexp(1.0, -7));
}

TEST_CASE("all_reduce: non-contiguous tensors are staged and written back; the rest is untouched") {
  RANK_INFO();
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    // A transposed (4, 6) -> (6, 4) view.
    Tensor base = input(rank_, 24, dt).reshape({4, 6});
    Tensor view = base.transpose(0, 1);
    REQUIRE_FALSE(view.is_contiguous());
    dist::all_reduce(view, ReduceOp::kSum);
    std::vector<double> got = values(base);
    for (int64_t i = 0; i < 24; ++i) CHECK(got[static_cast<size_t>(i)] == reduced(ReduceOp::kSum, world_, i, dt));

    // Every other element of a row: the others keep this rank's values.
    Tensor row = input(rank_, 10, dt);
    Tensor strided = row.reshape({5, 2}).select(1, 0);  // elements 0, 2, 4, 6, 8
    REQUIRE(strided.stride(0) == 2);
    dist::all_reduce(strided, ReduceOp::kMax);
    std::vector<double> r = values(row);
    for (int64_t i = 0; i < 10; ++i)
      CHECK(r[static_cast<size_t>(i)] == (i % 2 == 0 ? reduced(ReduceOp::kMax, world_, i, dt) : value(rank_, i, dt)));
  }
}

TEST_CASE("all_reduce: a leaf that requires grad, an empty tensor, a scalar") {
  RANK_INFO();
  Tensor w = full({3}, rank_ + 1.0, TensorOptions().requires_grad());
  dist::all_reduce(w, ReduceOp::kMean);  // not recorded, not an in-place error
  CHECK(w.requires_grad());
  CHECK(w.is_leaf());
  for (double v : values(w)) CHECK(v == (world_ + 1) / 2.0);
  Tensor e = empty({0, 3});
  dist::all_reduce(e);
  CHECK(e.numel() == 0);
  Tensor s = scalar_tensor(static_cast<double>(rank_), kFloat64);
  dist::all_reduce(s, ReduceOp::kMax);
  CHECK(s.item() == world_ - 1);
}

TEST_CASE("all_reduce_async: started, completed, written back; a Work destroyed unwaited still delivers") {
  RANK_INFO();
  Tensor a = input(rank_, 5, kFloat32);
  Tensor b = input(rank_, 5, kBFloat16);
  dist::Work wa = dist::all_reduce_async(a, ReduceOp::kSum);
  dist::Work wb = dist::all_reduce_async(b, ReduceOp::kMean);
  while (!wa.is_completed()) {
  }
  wa.wait();
  wb.wait();
  wb.wait();  // a second wait does nothing
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(values(a)[static_cast<size_t>(i)] == reduced(ReduceOp::kSum, world_, i, kFloat32));
    CHECK(values(b)[static_cast<size_t>(i)] ==
          static_cast<float>(bfloat16(static_cast<float>(reduced(ReduceOp::kMean, world_, i, kBFloat16)))));
  }
  Tensor c = input(rank_, 6, kFloat64).reshape({3, 2}).select(1, 0);  // elements 0, 2, 4
  { dist::Work wc = dist::all_reduce_async(c, ReduceOp::kMax); }
  for (int64_t i = 0; i < 3; ++i) CHECK(values(c)[static_cast<size_t>(i)] == reduced(ReduceOp::kMax, world_, 2 * i, kFloat64));
}

TEST_CASE("broadcast: every dtype from every src, non-contiguous too") {
  RANK_INFO();
  for (DType dt : kAllDTypes) {
    for (int src = 0; src < world_; ++src) {
      INFO(dtype_name(dt) << " from " << src);
      Tensor t = input(rank_, 6, dt).reshape({2, 3}).transpose(0, 1);
      dist::broadcast(t, src);
      CHECK(values(t.contiguous()) == values(input(src, 6, dt).reshape({2, 3}).transpose(0, 1).contiguous()));
    }
  }
}

TEST_CASE("all_gather: every dtype, into new or given (non-contiguous) tensors") {
  RANK_INFO();
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    std::vector<Tensor> out;
    dist::all_gather(out, input(rank_, 4, dt).reshape({2, 2}));
    REQUIRE(static_cast<int>(out.size()) == world_);
    for (int r = 0; r < world_; ++r) {
      CHECK(out[static_cast<size_t>(r)].dtype() == dt);
      CHECK(values(out[static_cast<size_t>(r)]) == values(input(r, 4, dt)));
    }
    std::vector<Tensor> given;
    for (int r = 0; r < world_; ++r) given.push_back(zeros({2, 2}, dt).transpose(0, 1));
    dist::all_gather(given, input(rank_, 4, dt).reshape({2, 2}).transpose(0, 1));
    for (int r = 0; r < world_; ++r)
      CHECK(values(given[static_cast<size_t>(r)].contiguous()) ==
            values(input(r, 4, dt).reshape({2, 2}).transpose(0, 1).contiguous()));
  }
}

TEST_CASE("reduce_scatter: every dtype, sum, mean and max") {
  RANK_INFO();
  const int64_t n = 3;
  for (DType dt : kAllDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      if (op == ReduceOp::kMean && !is_floating(dt)) continue;
      INFO(dtype_name(dt) << " " << dist::reduce_op_name(op));
      // in[j] on rank r: values at offset j * n; rank j receives the reduction of every
      // rank's in[j].
      std::vector<Tensor> in;
      for (int j = 0; j < world_; ++j) in.push_back(input(rank_, n, dt, j * n));
      Tensor out = zeros({n}, dt);
      dist::reduce_scatter(out, in, op);
      std::vector<double> got = values(out);
      for (int64_t i = 0; i < n; ++i) {
        double want = reduced(op, world_, rank_ * n + i, dt);
        if (dt == kBFloat16) want = static_cast<float>(bfloat16(static_cast<float>(want)));
        if (dt == kFloat32) want = static_cast<float>(want);
        CHECK(got[static_cast<size_t>(i)] == want);
      }
    }
  }
}

TEST_CASE("collectives: errors name the op and what was given") {
  RANK_INFO();
  Tensor t = ones({2, 2});
  CHECK_ERROR(dist::broadcast(t, world_), "[broadcast] src rank ", " is out of range for a world of ",
              "processes (ranks 0 to ");
  CHECK_ERROR(dist::broadcast(t, -1), "[broadcast] src rank -1 is out of range");
  CHECK_ERROR(dist::all_reduce(ones({2}, kInt64), ReduceOp::kMean),
              "[all_reduce] ReduceOp::kMean needs a floating-point tensor (float32, float64 or bfloat16), got int64");
  CHECK_ERROR(dist::all_reduce(ones({2}, kBool), ReduceOp::kMean), "got bool");
  CHECK_ERROR(dist::all_reduce(Tensor()), "[all_reduce] the tensor is an undefined tensor");

  std::vector<Tensor> wrong_count(static_cast<size_t>(world_ + 1), ones({2, 2}));
  CHECK_ERROR(dist::all_gather(wrong_count, t), "[all_gather] out holds ", " tensors but the world has ");
  std::vector<Tensor> wrong_shape(static_cast<size_t>(world_), ones({2, 2}));
  wrong_shape.back() = ones({4});
  CHECK_ERROR(dist::all_gather(wrong_shape, t), "[all_gather] out[", "] has shape (4,) but the tensor has shape (2, 2)");
  std::vector<Tensor> wrong_dtype(static_cast<size_t>(world_), ones({2, 2}));
  wrong_dtype.front() = ones({2, 2}, kFloat64);
  CHECK_ERROR(dist::all_gather(wrong_dtype, t), "[all_gather] out[0] is float64 but the tensor is float32");

  if (world_ > 1)
    CHECK_ERROR(dist::reduce_scatter(t, {t}, ReduceOp::kSum), "[reduce_scatter] in holds 1 tensors but the world has ");
  std::vector<Tensor> in(static_cast<size_t>(world_), ones({2, 2}));
  in.back() = ones({2, 3});
  CHECK_ERROR(dist::reduce_scatter(t, in), "[reduce_scatter] in[", "] has shape (2, 3) but out has shape (2, 2)");
  in.back() = ones({2, 2}, kBFloat16);
  CHECK_ERROR(dist::reduce_scatter(t, in), "] is bfloat16 but out is float32");
  CHECK_ERROR(dist::reduce_scatter(ones({2}, kInt64), std::vector<Tensor>(static_cast<size_t>(world_), ones({2}, kInt64)),
                                   ReduceOp::kMean),
              "[reduce_scatter] ReduceOp::kMean needs a floating-point tensor");
  CHECK_ERROR(dist::init_process_group("mpi"), "[init_process_group] trying to initialize the default process group twice");
  dist::init();  // a second init() does nothing
  CHECK(dist::is_initialized());
  // After all these refusals the ranks are still in step.
  Tensor s = ones({1});
  dist::all_reduce(s);
  CHECK(s.item() == world_);
}

TEST_CASE("comm_stats counts collectives and the bytes this rank sent") {
  RANK_INFO();
  dist::reset_comm_stats();
  dist::all_reduce(ones({5}));                // 20 bytes
  dist::all_reduce(ones({5}, kBFloat16));     // staged in float32: 20 bytes
  dist::broadcast(ones({3}, kFloat64), 0);    // 24 bytes
  dist::barrier();                            // none
  dist::CommStats s = dist::comm_stats();
  CHECK(s.collectives == 4);
  CHECK(s.bytes == 64);
  CHECK(s.wait_seconds >= 0);
}

TEST_CASE("CUDA tensors are staged through host memory (where a GPU is)") {
  RANK_INFO();
  if (!cuda::is_available()) return;
  Device gpu("cuda:0");
  Tensor t = input(rank_, 6, kFloat32).to(gpu);
  dist::all_reduce(t, ReduceOp::kSum);
  CHECK(t.device() == gpu);
  for (int64_t i = 0; i < 6; ++i) CHECK(values(t.to(Device()))[static_cast<size_t>(i)] == reduced(ReduceOp::kSum, world_, i, kFloat32));
  std::vector<Tensor> out;
  dist::all_gather(out, input(rank_, 2, kBFloat16).to(gpu));
  for (int r = 0; r < world_; ++r) CHECK(values(out[static_cast<size_t>(r)].to(Device())) == values(input(r, 2, kBFloat16)));
}
