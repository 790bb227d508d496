// data::DistributedSampler and the DataLoaders taking it, in one process: the
// sampler is told its num_replicas and rank, so every rank's shard can be checked here.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

#include "test_util.h"

using namespace kiln;
using data::DistributedSampler;
using data::DistributedSamplerOptions;
using Indices = std::vector<int64_t>;

namespace {

DistributedSampler sampler(int64_t n, int64_t replicas, int64_t rank, bool shuffle, bool drop_last = false,
                           uint64_t seed = 0) {
  return DistributedSampler(n, {.num_replicas = replicas, .rank = rank, .shuffle = shuffle, .seed = seed,
                                .drop_last = drop_last});
}

std::vector<data::TokenPair> pairs(int64_t n) {
  std::vector<data::TokenPair> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({{i + 1, i + 2}, {1, i + 3, 2}});
  return out;
}

}  // namespace

TEST_CASE("DistributedSampler: torch's shards, padding by repeating from the start, or drop_last") {
  // 10 indices over 3 replicas: padded to 12 with 0 and 1, every 3rd from the rank.
  CHECK(sampler(10, 3, 0, false).indices() == Indices{0, 3, 6, 9});
  CHECK(sampler(10, 3, 1, false).indices() == Indices{1, 4, 7, 0});
  CHECK(sampler(10, 3, 2, false).indices() == Indices{2, 5, 8, 1});
  CHECK(sampler(10, 3, 2, false).size() == 4);
  CHECK(sampler(10, 3, 2, false).total_size() == 12);
  // drop_last: the last index goes instead.
  CHECK(sampler(10, 3, 0, false, true).indices() == Indices{0, 3, 6});
  CHECK(sampler(10, 3, 2, false, true).indices() == Indices{2, 5, 8});
  CHECK(sampler(10, 3, 2, false, true).size() == 3);
  // Fewer indices than replicas: repeated as often as needed.
  for (int64_t r = 0; r < 5; ++r) CHECK(sampler(2, 5, r, false).indices() == Indices{r % 2});
  CHECK(sampler(2, 5, 4, false, true).size() == 0);
  CHECK(sampler(0, 2, 1, true).indices().empty());
}

TEST_CASE("DistributedSampler: shuffled shards are disjoint, cover the dataset, and follow (seed, epoch)") {
  const int64_t n = 78;
  for (int64_t replicas : {1, 2, 3, 4}) {
    INFO(replicas << " replicas");
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < replicas; ++r)
      for (int64_t i : sampler(n, replicas, r, true, false, 5).indices()) seen.insert(i);
    // 78 = 4 · 19 + 2: four replicas read 2 of them twice (padding); otherwise once each.
    CHECK(static_cast<int64_t>(seen.size()) == (n + replicas - 1) / replicas * replicas);
    for (int64_t i = 0; i < n; ++i) CHECK(seen.count(i) >= 1);
  }
  DistributedSampler s = sampler(n, 2, 1, true, false, 5);
  const Indices epoch0 = s.indices();
  s.set_epoch(1);
  CHECK(s.epoch() == 1);
  CHECK(s.indices() != epoch0);
  CHECK(s.indices(0) == epoch0);
  CHECK(sampler(n, 2, 1, true, false, 6).indices() != epoch0);  // another seed
  // One replica reads PairDataLoader's own shuffled order for the same seed and epoch.
  DistributedSampler one = sampler(n, 1, 0, true, false, 5);
  data::PairDataLoader plain(pairs(n), {.batch_size = n, .shuffle = true, .seed = 5});
  for (int64_t epoch : {0, 3}) {
    std::vector<size_t> order = plain.batch_indices(epoch).front();
    CHECK(Indices(order.begin(), order.end()) == one.indices(epoch));
  }
}

TEST_CASE("PairDataLoader with a sampler: rank r's batch k, over the ranks, is one process's batch k at R times the size") {
  const int64_t n = 78, b = 4;
  for (int64_t replicas : {2, 3}) {
    INFO(replicas << " replicas");
    auto whole = std::make_shared<DistributedSampler>(sampler(n, 1, 0, true, false, 11));
    data::PairDataLoader big(pairs(n), {.batch_size = b * replicas, .shuffle = false, .sampler = whole});
    for (int64_t epoch : {0, 1}) {
      std::vector<std::vector<size_t>> want = big.batch_indices(epoch);
      for (int64_t r = 0; r < replicas; ++r) {
        auto s = std::make_shared<DistributedSampler>(sampler(n, replicas, r, true, false, 11));
        data::PairDataLoader mine(pairs(n), {.batch_size = b, .shuffle = false, .sampler = s});
        std::vector<std::vector<size_t>> got = mine.batch_indices(epoch);
        CHECK(mine.num_batches() == big.num_batches());
        REQUIRE(got.size() == want.size());
        for (size_t k = 0; k < got.size(); ++k)
          for (size_t j = 0; j < got[k].size(); ++j) CHECK(got[k][j] == want[k][j * replicas + r]);
      }
    }
  }
}

TEST_CASE("DataLoader (TensorDataset) with a sampler: the shard of the sampler's epoch, in batches") {
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(10.0).reshape({10, 1})});
  auto s = std::make_shared<DistributedSampler>(sampler(10, 3, 1, false));
  data::DataLoader loader(ds, 3, s);
  CHECK(loader.size() == 2);
  std::vector<std::vector<int64_t>> rows;
  for (const data::Sample& batch : loader) rows.push_back(batch[0].reshape({-1}).to_vector<int64_t>());
  CHECK(rows == std::vector<std::vector<int64_t>>{{1, 4, 7}, {0}});
  data::DataLoader dropping(ds, 3, s, /*drop_last=*/true);
  CHECK(dropping.size() == 1);
  auto shuffled = std::make_shared<DistributedSampler>(sampler(10, 3, 1, true, false, 2));
  data::DataLoader l2(ds, 4, shuffled);
  shuffled->set_epoch(4);
  CHECK(l2.next_epoch_indices().front() == shuffled->indices(4));
}

TEST_CASE("DistributedSampler and the loaders: errors") {
  CHECK_ERROR(sampler(10, 2, 2, true), "[DistributedSampler] rank 2 is out of range for 2 replicas (0 to 1)");
  CHECK_ERROR(sampler(10, 2, -1, true), "[DistributedSampler] rank -1 is out of range");
  CHECK_ERROR(sampler(10, 0, 0, true), "[DistributedSampler] num_replicas must be at least 1, got 0");
  CHECK_ERROR(sampler(-1, 2, 0, true), "[DistributedSampler] dataset_size must be non-negative, got -1");
  CHECK_ERROR(DistributedSampler(10),
              "[DistributedSampler] num_replicas and rank were not given and the process group is not initialized "
              "(call kiln::distributed::init() first, or give both)");
  DistributedSampler s = sampler(10, 2, 0, true);
  CHECK_ERROR(s.set_epoch(-2), "[DistributedSampler.set_epoch] epoch must be non-negative, got -2");
  auto shared = std::make_shared<DistributedSampler>(s);
  CHECK_ERROR(data::PairDataLoader(pairs(10), {.shuffle = true, .sampler = shared}),
              "[DataLoader] shuffle must be false with a sampler");
  CHECK_ERROR(data::PairDataLoader(pairs(9), {.shuffle = false, .sampler = shared}),
              "[DataLoader] the sampler covers 10 examples but the dataset has 9");
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{zeros({4, 2})});
  CHECK_ERROR(data::DataLoader(ds, 2, shared), "[DataLoader] the sampler covers 10 samples but the dataset has 4");
  CHECK_ERROR(data::DataLoader(ds, 2, std::shared_ptr<DistributedSampler>()), "[DataLoader] the sampler is null");
}
