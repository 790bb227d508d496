// What the structure ops (triu, tril, repeat, repeat_interleave, flip, roll, outer,
// einsum), std and norm promise beyond their values: new memory, extreme arguments,
// agreement with the ops einsum stands for, gradients at a constant row and at zero
// (tests/fixtures/shape_ops.txt, made by make_shape_fixtures.py). Their values,
// gradients and errors are rows of the op table (tests/op_table).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::Tol;

namespace {

const testing::FixtureFile kFixtures("shape_ops.txt", "make_shape_fixtures.py");
Tensor fx(const std::string& name) { return kFixtures.get(name); }

// std and norm round, in another order than torch's: 1e-12 relative is a few thousand
// ulps of float64; the absolute floor covers results that cancel to near zero.
constexpr Tol kExact{0, 0};
constexpr Tol kTol64{1e-12, 1e-13};

void check_fx(const Tensor& got, const std::string& name, Tol tol = kExact) {
  testing::check_matches(name, got, fx(name), tol);
}

}  // namespace

TEST_CASE("triu: a diagonal far outside int range of the offsets is clamped, not overflowed") {
  // A diagonal far outside int range of the offsets is clamped, not overflowed.
  CHECK(equal(triu(ones({2, 3}), std::numeric_limits<int64_t>::max()), zeros({2, 3})));
  CHECK(equal(triu(ones({2, 3}), std::numeric_limits<int64_t>::min()), ones({2, 3})));
}

// ---------------------------------------------------------------- repeat
TEST_CASE("repeat and repeat_interleave return new memory even when nothing repeats") {
  Tensor x = fx("rep.f64.x");
  Tensor a = repeat(x, {1, 1}), b = repeat_interleave(x, 1, 0), c = roll(x, 0, 1), d = flip(x, {});
  for (Tensor* t : {&a, &b, &c, &d}) {
    CHECK_FALSE(t->same_storage(x));
    CHECK(equal(*t, x));
  }
}

// ---------------------------------------------------------------- repeat_interleave
// ---------------------------------------------------------------- flip / roll
TEST_CASE("roll: a shift of INT64_MIN wraps without overflow") {
  // int64 extremes: a shift of INT64_MIN wraps without overflow.
  Tensor r = arange(5.0, TensorOptions(kFloat64));
  CHECK(equal(roll(r, std::numeric_limits<int64_t>::min()), roll(r, std::numeric_limits<int64_t>::min() % 5)));
}

// ---------------------------------------------------------------- outer
// ---------------------------------------------------------------- einsum
TEST_CASE("einsum agrees with the ops it stands for") {
  Tensor a = randn({3, 4}, kFloat64), b = randn({4, 5}, kFloat64), c = randn({5, 2}, kFloat64);
  CHECK(allclose(einsum("ij,jk,kl->il", {a, b, c}), matmul(matmul(a, b), c), 1e-12, 1e-12));
  CHECK(allclose(einsum("ij->ji", {a}), a.t()));
  CHECK(allclose(einsum("ji,jk->ik", {a.t().contiguous(), b}), matmul(a, b), 1e-12, 1e-12));
  CHECK(allclose(einsum("ij,kj->ik", {a, b.t()}), matmul(a, b), 1e-12, 1e-12));
  CHECK(allclose(einsum("ij,ij->ij", {a, a}), mul(a, a)));  // no contraction: a broadcast mul
  Tensor q = randn({2, 3, 5, 4}, kFloat64), k = randn({2, 3, 6, 4}, kFloat64);
  CHECK(allclose(einsum("bhqd,bhkd->bhqk", {q, k}), matmul(q, k.transpose(-1, -2)), 1e-12, 1e-12));
}

// ---------------------------------------------------------------- std
TEST_CASE("std of a constant row has gradient 0, not NaN, as torch") {
  Tensor x = fx("std.const.x").detach().requires_grad_();
  Tensor y = kiln::std(x, {1});
  check_fx(y, "std.const.out", kTol64);
  y.backward(from_vector<double>({1.0, 0.5}, {2}));
  check_fx(x.grad(), "std.const.grad", kTol64);
}

// ---------------------------------------------------------------- norm
TEST_CASE("norm of zeros has gradient 0, not NaN; p = 0 is recorded with no gradient to give") {
  // The gradients against torch's are rows of the op table (tests/op_table/norms.cpp).
  Tensor z = zeros({3}, TensorOptions(kFloat64).requires_grad());
  norm(z).backward();
  check_fx(z.grad(), "norm.zero.grad");  // 0, not NaN
  // p = 0 counts non-zeros: recorded (like torch) but with no gradient to give.
  Tensor x = fx("norm.f64.x").detach().requires_grad_();
  Tensor y = norm(x, 0.0);
  CHECK(y.requires_grad());
  y.backward();
  CHECK_FALSE(x.grad().defined());
}

// ---------------------------------------------------------------- errors
