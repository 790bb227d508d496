// Tensors: factories, dtypes, views and printing.
#include <doctest/doctest.h>

#include "test_util.h"

using namespace kiln;

TEST_CASE("views share storage with their base") {
  Tensor a = arange(0, 6, 1, kFloat32).reshape({2, 3});
  Tensor t = a.t();
  CHECK(t.same_storage(a));
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.at({2, 1}) == 5.0);
  Tensor b = a.clone();
  a.set({0, 0}, 42.0);
  CHECK(t.at({0, 0}) == 42.0);
  CHECK(b.at({0, 0}) == 0.0);
}
