// Structure ops (triu, tril, repeat, repeat_interleave, flip, roll, outer, einsum):
// forward values against PyTorch
// (tests/fixtures/shape_ops.txt, made by make_shape_fixtures.py), what they promise
// beyond values (dtypes kept, new memory, methods), and their errors; what std and norm
// promise at a constant row and at zero (their values are rows of tests/op_table). The
// gradient checks are in test_gradcheck.cpp.
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

// Moves and copies are exact: only the reductions (einsum's contractions, std, norm)
// round, in another order than torch's. float64: 1e-12 relative is a few thousand ulps;
// float32: 1e-5 is ~80 ulps, for sums of a few dozen products. The absolute floors cover
// results that cancel to near zero.
constexpr Tol kExact{0, 0};
constexpr Tol kTol64{1e-12, 1e-13};
constexpr Tol kTol32{1e-5, 1e-6};
Tol tol_for(const std::string& tag) { return tag == "f64" ? kTol64 : kTol32; }

void check_fx(const Tensor& got, const std::string& name, Tol tol = kExact) {
  testing::check_matches(name, got, fx(name), tol);
}

const std::vector<std::string> kTags = {"f64", "f32"};

// "-1" -> "m1", "0.5" -> "0p5", "inf" -> "inf", as the fixture script names numbers.
std::string key(double v) {
  std::string s;
  if (std::isinf(v)) {
    s = v < 0 ? "minf" : "inf";
  } else {
    std::ostringstream os;
    os << v;
    s = os.str();
    for (char& c : s) c = c == '-' ? 'm' : c == '.' ? 'p' : c;
  }
  return s;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---------------------------------------------------------------- triu / tril
TEST_CASE("triu and tril match torch for every diagonal, batched, with NaN, inf and -0") {
  for (const auto& tag : kTags) {
    const std::string p = "tri." + tag + ".";
    Tensor x = fx(p + "x"), tall = fx(p + "tall");  // (2, 3, 4) and (4, 3)
    for (int64_t d : {-5, -2, -1, 0, 1, 2, 5}) {
      const std::string k = key(static_cast<double>(d));
      check_fx(triu(x, d), p + "triu." + k);
      check_fx(tril(x, d), p + "tril." + k);
      check_fx(x.triu(d), p + "triu." + k);
      check_fx(x.tril(d), p + "tril." + k);
      check_fx(triu(tall, d), p + "tall_triu." + k);
      check_fx(tril(tall, d), p + "tall_tril." + k);
    }
    check_fx(x.triu(), p + "triu.0");
    check_fx(x.tril(), p + "tril.0");
  }
}

TEST_CASE("triu and tril keep int64 and bool, build the seeds' masks, and take empty tensors") {
  check_fx(triu(fx("tri.int.x")), "tri.int.triu");
  check_fx(tril(fx("tri.int.x"), -1), "tri.int.tril_m1");
  check_fx(triu(ones({5, 5}), 1), "tri.mask.triu1");
  check_fx(triu(fx("tri.bool.x"), 1), "tri.bool.triu1");
  check_fx(fx("tri.bool.x").tril(), "tri.bool.tril");
  check_fx(triu(ones({2, 0, 3})), "tri.empty.triu");
  check_fx(tril(ones({0, 3})), "tri.empty.tril");
  // A diagonal far outside int range of the offsets is clamped, not overflowed.
  CHECK(equal(triu(ones({2, 3}), std::numeric_limits<int64_t>::max()), zeros({2, 3})));
  CHECK(equal(triu(ones({2, 3}), std::numeric_limits<int64_t>::min()), ones({2, 3})));
}

// ---------------------------------------------------------------- repeat
TEST_CASE("repeat tiles like torch, with leading repeat dims and zero counts") {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"2_1", {2, 1}}, {"1_3", {1, 3}}, {"2_2_3", {2, 2, 3}}, {"0_2", {0, 2}}, {"1_1", {1, 1}}};
  for (const auto& tag : kTags) {
    Tensor x = fx("rep." + tag + ".x");  // (2, 3)
    for (const auto& [name, r] : cases) {
      check_fx(repeat(x, r), "rep." + tag + ".repeat." + name);
      check_fx(x.repeat(r), "rep." + tag + ".repeat." + name);
    }
  }
  check_fx(repeat(fx("rep.scalar.x"), {3}), "rep.scalar.repeat_3");
  check_fx(repeat(fx("rep.scalar.x"), {}), "rep.scalar.repeat_none");
  check_fx(fx("rep.int.x").repeat({2, 2}), "rep.int.repeat_2_2");
  check_fx(fx("rep.bool.x").repeat({2, 2}), "rep.bool.repeat_2_2");
}

TEST_CASE("repeat and repeat_interleave return new memory even when nothing repeats") {
  Tensor x = fx("rep.f64.x");
  Tensor a = repeat(x, {1, 1}), b = repeat_interleave(x, 1, 0), c = roll(x, 0, 1), d = flip(x, {});
  for (Tensor* t : {&a, &b, &c, &d}) {
    CHECK_FALSE(t->same_storage(x));
    CHECK(equal(*t, x));
  }
}

// ---------------------------------------------------------------- repeat_interleave
TEST_CASE("repeat_interleave with one count and with per-element counts matches torch") {
  Tensor counts = fx("ri.counts"), flat_counts = fx("ri.flat_counts");
  for (const auto& tag : kTags) {
    const std::string p = "ri." + tag + ".";
    Tensor x = fx(p + "x");  // (2, 3)
    check_fx(repeat_interleave(x, 2), p + "r2");
    check_fx(repeat_interleave(x, 2, 0), p + "r2_d0");
    check_fx(x.repeat_interleave(3, 1), p + "r3_d1");
    check_fx(repeat_interleave(x, 2, -1), p + "r2_dm1");
    check_fx(repeat_interleave(x, 0, 1), p + "r0_d1");
    check_fx(repeat_interleave(x, counts, 1), p + "counts_d1");
    check_fx(x.repeat_interleave(flat_counts), p + "counts_flat");
    check_fx(repeat_interleave(x, from_vector<int64_t>({3}, {1}), 0), p + "one_count_d0");
    check_fx(repeat_interleave(x, scalar_tensor(2, kInt64), 1), p + "scalar_count_d1");
  }
  check_fx(repeat_interleave(counts), "ri.index");
  check_fx(repeat_interleave(flat_counts), "ri.index_flat");
  check_fx(repeat_interleave(fx("ri.int.x"), counts, 1), "ri.int.counts_d1");
  check_fx(repeat_interleave(fx("ri.int.x"), 2, 0), "ri.int.r2_d0");
  check_fx(repeat_interleave(fx("rep.scalar.x"), 3), "ri.scalar.r3");
}

// ---------------------------------------------------------------- flip / roll
TEST_CASE("flip and roll match torch, flattened and along dims, repeated dims included") {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> flips = {
      {"d0", {0}}, {"d12", {1, 2}}, {"dm1", {-1}}, {"d012", {0, 1, 2}}, {"dm3m1", {-3, -1}}};
  struct RollCase {
    std::string name;
    std::vector<int64_t> shifts, dims;
  };
  const std::vector<RollCase> rolls = {
      {"flat1", {1}, {}},       {"flatm5", {-5}, {}},       {"flat30", {30}, {}},
      {"d0_1", {1}, {0}},       {"d1_5", {5}, {1}},         {"dm1_m1", {-1}, {-1}},
      {"d02", {1, 2}, {0, 2}},  {"d22", {1, -7}, {2, 2}},   {"d1_0", {0}, {1}}};
  for (const auto& tag : kTags) {
    const std::string p = "fr." + tag + ".";
    Tensor x = fx(p + "x");  // (2, 3, 4)
    for (const auto& [name, dims] : flips) {
      check_fx(flip(x, dims), p + "flip." + name);
      check_fx(x.flip(dims), p + "flip." + name);
    }
    for (const RollCase& r : rolls) {
      check_fx(roll(x, r.shifts, r.dims), p + "roll." + r.name);
      check_fx(x.roll(r.shifts, r.dims), p + "roll." + r.name);
    }
    check_fx(roll(x, 1), p + "roll.flat1");
    check_fx(x.roll(-5), p + "roll.flatm5");
    check_fx(roll(x, 5, 1), p + "roll.d1_5");
    check_fx(x.roll(-1, -1), p + "roll.dm1_m1");
  }
  check_fx(flip(fx("fr.int.x"), {1}), "fr.int.flip_d1");
  check_fx(roll(fx("fr.int.x"), 1, 1), "fr.int.roll_d1");
  check_fx(flip(fx("fr.bool.x"), {0}), "fr.bool.flip");
  check_fx(roll(fx("fr.bool.x"), 1), "fr.bool.roll");
  check_fx(roll(fx("fr.scalar.x"), 3), "fr.scalar.roll");
  check_fx(flip(fx("fr.empty.x"), {0, 1}), "fr.empty.flip");
  check_fx(roll(fx("fr.empty.x"), 2, 0), "fr.empty.roll");
  // int64 extremes: a shift of INT64_MIN wraps without overflow.
  Tensor r = arange(5.0, TensorOptions(kFloat64));
  CHECK(equal(roll(r, std::numeric_limits<int64_t>::min()), roll(r, std::numeric_limits<int64_t>::min() % 5)));
}

// ---------------------------------------------------------------- outer
TEST_CASE("outer matches torch and promotes like mul") {
  for (const auto& tag : kTags) {
    const std::string p = "outer." + tag + ".";
    check_fx(outer(fx(p + "a"), fx(p + "b")), p + "out");  // b holds an inf
    check_fx(fx(p + "a").outer(fx(p + "b")), p + "out");
  }
  check_fx(outer(fx("outer.int.a"), fx("outer.int.a")), "outer.int.out");
  check_fx(outer(fx("outer.int.a"), fx("outer.f32.b")), "outer.mixed.out");
}

// ---------------------------------------------------------------- einsum
TEST_CASE("einsum matches torch: implicit/explicit, batch, ..., permutations, sums, diagonals, chains") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"matmul_implicit", "ij,jk"},
      {"matmul", "ij,jk->ik"},
      {"matmul_spaces", " i j , j k -> i k "},
      {"bmm", "bij,bjk->bik"},
      {"transpose", "ij->ji"},
      {"permute3", "ijk->kij"},
      {"sum_all", "ij->"},
      {"sum_rows", "ij->i"},
      {"sum_cols", "ij->j"},
      {"outer", "i,j->ij"},
      {"outer_implicit", "i,j"},
      {"dot", "i,i->"},
      {"dot_implicit", "i,i"},
      {"hadamard", "ij,ij->ij"},
      {"diag", "ii->i"},
      {"trace", "ii->"},
      {"trace_implicit", "ii"},
      {"diag3", "iii->i"},
      {"batch_diag", "bii->bi"},
      {"diag_times", "ii,ij->ij"},
      {"attention", "bhqd,bhkd->bhqk"},
      {"attention_v", "bhqk,bhkd->bhqd"},
      {"chain3", "ij,jk,kl->il"},
      {"chain3_implicit", "ij,jk,kl"},
      {"three_shared", "ij,ij,ij->i"},
      {"bilinear", "bn,anm,bm->ba"},
      {"ellipsis_matmul", "...ij,...jk->...ik"},
      {"ellipsis_broadcast", "...ij,...jk->...ik"},
      {"ellipsis_transpose", "...ij->...ji"},
      {"ellipsis_implicit", "...ij,...jk"},
      {"ellipsis_summed", "...ij->ij"},
      {"ellipsis_front", "i...,i...->..."},
      {"ellipsis_middle", "a...b,b...c->a...c"},
      {"upper_lower", "Ab,bC->CA"},
      {"implicit_ascii", "bA,Ca"},
      {"broadcast_one", "ij,jk->ik"},
      {"batch_broadcast_one", "bij,bjk->bik"},
      {"sum_then_outer", "ij,k->k"},
      {"scalar", ""},
      {"scalar_product", ",i->i"},
      {"empty_contraction", "ij,jk->ik"},
  };
  for (const auto& [name, eq] : cases) {
    for (const auto& tag : kTags) {
      const std::string p = "es." + name + "." + tag + ".";
      std::vector<Tensor> ops;
      for (int i = 0; kFixtures.all().count(p + "in" + std::to_string(i)); ++i) ops.push_back(fx(p + "in" + std::to_string(i)));
      REQUIRE(!ops.empty());
      check_fx(einsum(eq, ops), p + "out", tol_for(tag));
    }
  }
}

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
TEST_CASE("structure ops reject bad input with clear messages") {
  SUBCASE("triu / tril") {
    CHECK_ERROR_STARTS("[triu]", triu(ones({3})), "at least 2 dimensions", "(3,)");
    CHECK_ERROR_STARTS("[tril]", tril(scalar_tensor(1.0)), "at least 2 dimensions", "()");
  }
  SUBCASE("repeat") {
    CHECK_ERROR_STARTS("[repeat]", repeat(ones({2, 3}), {2}), "(2,)", "(2, 3)", "can not be smaller");
    CHECK_ERROR_STARTS("[repeat]", ones({2, 3}).repeat({2, -1}), "negative", "(2, -1)");
    CHECK_ERROR_STARTS("[repeat]", repeat(ones({2}), {std::numeric_limits<int64_t>::max()}), "overflows");
  }
  SUBCASE("repeat_interleave") {
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), -1), "negative", "-1");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), 2, 2), "dim 2", "out of range");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(scalar_tensor(1.0), 2, 0), "0-d");
    Tensor two = from_vector<int64_t>({1, 2}, {2});
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), two, 1), "2 repeats", "size 3");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), two), "2 repeats", "size 6");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), from_vector<int64_t>({1, -2}, {2}), 0),
                "negative", "-2");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), ones({2}), 0), "int64", "float32");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 3}), ones({1, 2}, kInt64), 0), "0-D or 1-D",
                "(1, 2)");
    CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(ones({2, 2}, kInt64)), "0-D or 1-D", "(2, 2)");
  }
  SUBCASE("flip / roll") {
    CHECK_ERROR_STARTS("[flip]", flip(ones({2, 3}), {0, 0}), "dim 0", "more than once");
    CHECK_ERROR_STARTS("[flip]", flip(ones({2, 3}), {2}), "dim 2", "out of range");
    CHECK_ERROR_STARTS("[roll]", roll(ones({2, 3}), {1, 2}), "align", "2 shifts");
    CHECK_ERROR_STARTS("[roll]", roll(ones({2, 3}), {1, 2}, {0}), "align", "2 shifts", "1 dims");
    CHECK_ERROR_STARTS("[roll]", roll(ones({2, 3}), 1, 5), "dim 5", "out of range");
    CHECK_ERROR_STARTS("[roll]", roll(ones({2, 3}), std::vector<int64_t>{}, std::vector<int64_t>{}), "empty");
    CHECK_ERROR_STARTS("[roll]", roll(scalar_tensor(1.0), 1, 0), "0-d");
  }
  SUBCASE("outer") {
    CHECK_ERROR_STARTS("[outer]", outer(ones({2, 3}), ones({3})), "1-D first", "(2, 3)");
    CHECK_ERROR_STARTS("[outer]", outer(ones({2}), scalar_tensor(1.0)), "1-D second", "()");
  }
  SUBCASE("einsum: operand count, subscripts against ndim") {
    CHECK_ERROR_STARTS("[einsum]", einsum("ij,jk", {ones({2, 3})}), "2 operand terms", "1 operand was given");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij", {ones({2, 3}), ones({3})}), "1 operand term", "2 operands were given");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij", {}), "at least one operand");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij", {ones({2, 3, 4})}), "subscripts in the equation (2)",
                "number of dimensions (3)", "operand 0", "no ellipsis");
    CHECK_ERROR_STARTS("[einsum]", einsum("ijk...", {ones({2, 3})}), "(3)", "more than", "(2)");
  }
  SUBCASE("einsum: sizes of a repeated letter") {
    CHECK_ERROR_STARTS("[einsum]", einsum("ij,jk", {ones({2, 3}), ones({4, 5})}), "subscript j", "size 4", "operand 1",
                "previously seen size 3");
    CHECK_ERROR_STARTS("[einsum]", einsum("ii", {ones({2, 3})}), "subscript i", "repeated", "2 != 3");
    CHECK_ERROR_STARTS("[einsum]", einsum("...i,...i", {ones({2, 3}), ones({4, 3})}), "'...' dim 0", "size 4");
  }
  SUBCASE("einsum: bad characters and outputs") {
    CHECK_ERROR_STARTS("[einsum]", einsum("i#", {ones({2, 3})}), "invalid subscript '#'", "index 1");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij->j->i", {ones({2, 3})}), "invalid subscript '-'", "index 5");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij->i,j", {ones({2, 3})}), "invalid subscript ','");
    CHECK_ERROR_STARTS("[einsum]", einsum("i..j", {ones({2, 3})}), "'.'", "not part of an ellipsis");
    CHECK_ERROR_STARTS("[einsum]", einsum("...i...", {ones({2, 3})}), "'.'", "after its ellipsis");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij->k", {ones({2, 3})}), "output subscript k", "does not appear");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij->ii", {ones({2, 3})}), "output subscript i", "more than once");
  }
  SUBCASE("einsum: dtypes") {
    CHECK_ERROR_STARTS("[einsum]", einsum("ij,jk", {ones({2, 3}, kInt64), ones({3, 2}, kInt64)}), "floating-point",
                "int64", "operand 0");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij,jk", {ones({2, 3}), ones({3, 2}, kFloat64)}), "one dtype", "float32",
                "float64");
    CHECK_ERROR_STARTS("[einsum]", einsum("ij,jk", {ones({2, 3}), Tensor()}), "operand 1", "undefined");
  }
}
