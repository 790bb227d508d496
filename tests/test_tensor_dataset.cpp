// data::TensorDataset and data::DataLoader (torch.utils.data's): batches, shuffling,
// drop_last, a dataset of one's own, and the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "test_util.h"

using namespace kiln;

namespace {

// Sample i is (i, 10 i) as two 1-element int64 tensors: a Dataset without a fast path.
struct Squares : data::Dataset {
  int64_t size() const override { return 5; }
  data::Sample get(int64_t i) const override {
    return {from_vector<int64_t>({i}, {1}), from_vector<int64_t>({10 * i}, {1})};
  }
};

}  // namespace

TEST_CASE("TensorDataset gives rows; DataLoader batches them in order without shuffle") {
  Tensor a = arange(10.0).view({5, 2});
  Tensor b = arange(5.0);
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{a, b});
  CHECK(ds->size() == 5);
  data::Sample s = ds->get(3);
  CHECK(s[0].to_vector<int64_t>() == std::vector<int64_t>{6, 7});
  CHECK(s[1].item() == 3);

  data::DataLoader loader(ds, 2);
  CHECK(loader.size() == 3);
  std::vector<std::vector<int64_t>> firsts;
  for (const data::Sample& batch : loader) {
    CHECK(batch.size() == 2);
    CHECK(batch[0].size(1) == 2);
    CHECK(batch[0].size(0) == batch[1].size(0));
    firsts.push_back(batch[1].to_vector<int64_t>());
  }
  CHECK(firsts == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}});

  data::DataLoader dropping(ds, 2, false, /*drop_last=*/true);
  CHECK(dropping.size() == 2);
  int batches = 0;
  for (const data::Sample& batch : dropping) {
    CHECK(batch[0].size(0) == 2);
    ++batches;
  }
  CHECK(batches == 2);
}

TEST_CASE("DataLoader with shuffle: every sample once per epoch, a new order each epoch, seeded") {
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(100.0)});
  Generator g1(7), g2(7);
  data::DataLoader l1(ds, 8, true, false, &g1), l2(ds, 8, true, false, &g2);
  std::vector<std::vector<int64_t>> orders;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen, seen2;
    for (const data::Sample& b : l1)
      for (int64_t v : b[0].to_vector<int64_t>()) seen.push_back(v);
    for (const data::Sample& b : l2)
      for (int64_t v : b[0].to_vector<int64_t>()) seen2.push_back(v);
    CHECK(seen == seen2);  // same generator seed, same orders
    std::vector<int64_t> sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> expect(100);
    for (int64_t i = 0; i < 100; ++i) expect[static_cast<size_t>(i)] = i;
    CHECK(sorted == expect);
    orders.push_back(seen);
  }
  CHECK(orders[0] != orders[1]);
  std::vector<int64_t> identity(100);
  for (int64_t i = 0; i < 100; ++i) identity[static_cast<size_t>(i)] = i;
  CHECK(orders[0] != identity);
}

TEST_CASE("a Dataset of one's own is collated by stacking its samples") {
  data::DataLoader loader(std::make_shared<Squares>(), 3);
  std::vector<data::Sample> batches;
  for (const data::Sample& b : loader) batches.push_back(b);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0][0].shape() == Shape{3, 1});
  CHECK(batches[0][1].to_vector<int64_t>() == std::vector<int64_t>{0, 10, 20});
  CHECK(batches[1][1].to_vector<int64_t>() == std::vector<int64_t>{30, 40});
}

TEST_CASE("TensorDataset and DataLoader errors name what was given") {
  CHECK_THROWS_WITH_AS(data::TensorDataset({zeros({3}), zeros({4})}),
                       doctest::Contains("[TensorDataset] size mismatch between tensors: tensor 1 has 4 rows, tensor 0 has 3"),
                       Error);
  CHECK_THROWS_WITH_AS(data::TensorDataset({}), doctest::Contains("[TensorDataset] needs at least one tensor"), Error);
  CHECK_THROWS_WITH_AS(data::TensorDataset({scalar_tensor(1.0)}), doctest::Contains("is 0-d"), Error);
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{zeros({3})});
  CHECK_THROWS_WITH_AS(ds->get(3), doctest::Contains("[TensorDataset] index 3 is out of range for 3 samples"), Error);
  CHECK_THROWS_WITH_AS(ds->get(-1), doctest::Contains("index -1 is out of range"), Error);
  CHECK_THROWS_WITH_AS(data::DataLoader(ds, 0), doctest::Contains("[DataLoader] batch_size must be positive, got 0"),
                       Error);
  CHECK_THROWS_WITH_AS(data::DataLoader(nullptr, 1), doctest::Contains("[DataLoader] the dataset is null"), Error);
}
