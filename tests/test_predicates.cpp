// isnan / isinf / isfinite and all / any, as torch's (values written out from torch's
// definitions: NaN is nonzero, integers are always finite).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "test_util.h"

using namespace kiln;

namespace {
const double inf = std::numeric_limits<double>::infinity();
std::vector<bool> bools(const Tensor& t) {
  REQUIRE(t.dtype() == kBool);
  std::vector<bool> out;
  for (double v : t.to(kFloat64).to_vector<double>()) out.push_back(v != 0);
  return out;
}
}  // namespace

TEST_CASE("isnan, isinf, isfinite on floats and integers") {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = from_vector<double>({1.0, NAN, inf, -inf, -0.0, 1e308}, {6}).to(dt);
    CHECK(bools(isnan(x)) == std::vector<bool>{false, true, false, false, false, false});
    CHECK(bools(x.isinf()) == std::vector<bool>{false, false, true, true, false, dt == kFloat32});
    CHECK(bools(x.isfinite()) == std::vector<bool>{true, false, false, false, true, dt == kFloat64});
  }
  Tensor i = arange(3.0);
  CHECK(bools(isnan(i)) == std::vector<bool>{false, false, false});
  CHECK(bools(isfinite(i)) == std::vector<bool>{true, true, true});
  CHECK(isnan(zeros({2, 0})).shape() == Shape{2, 0});
}

TEST_CASE("all and any, over everything and over one dim") {
  Tensor m = from_vector<double>({1, 0, 2, 3, NAN, 4}, {2, 3});
  CHECK(m.all().item() == 0);
  CHECK(m.any().item() == 1);
  CHECK(bools(all(m, 1)) == std::vector<bool>{false, true});  // NaN counts as true
  CHECK(bools(any(m, 0)) == std::vector<bool>{true, true, true});
  CHECK(all(m, -1, true).shape() == Shape{2, 1});
  CHECK(all(zeros({0})).item() == 1);  // vacuous truth, as torch
  CHECK(any(zeros({0})).item() == 0);
  CHECK(all(ones({2}, kBool)).item() == 1);
  CHECK(all(m).dtype() == kBool);
  CHECK_THROWS_WITH_AS(all(m, 2), doctest::Contains("[all]"), Error);
}
