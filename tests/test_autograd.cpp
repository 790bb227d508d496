#include <doctest/doctest.h>

#include "test_util.h"

using namespace kiln;

TEST_CASE("placeholder: one tensor sums to its elements") {
  CHECK(sum(ones({3, 4})).item() == 12.0);
}
