// Indexing, scatter, scan, sort and sampling ops (gather, scatter, scatter_add, index_add,
// cumsum, sort, argsort, topk, multinomial, one_hot): forward values against PyTorch
// (tests/fixtures/index_ops.txt, made by make_index_fixtures.py, which says how to
// regenerate it), the rules torch leaves open that Kiln fixes (repeated indices, ties),
// in-place forms, gradients that are exact by construction, thread-count independence,
// multinomial's statistics, and every error. Gradient checks are in test_gradcheck.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>

#include "backend/backend.h"
#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {

const testing::FixtureFile kFixtures("index_ops.txt", "make_index_fixtures.py");
Tensor fx(const std::string& name) { return kFixtures.get(name); }

// Moves of elements are exact; sums differ from torch's by summation order at most (the
// same order here, so a few ulps of slack is plenty). See test_ops_forward.cpp.
void check_fx(const Tensor& got, const std::string& name) {
  const Tensor ref = fx(name);
  const testing::Tol tol = ref.dtype() == kFloat64 ? testing::Tol{1e-12, 1e-14} : testing::Tol{1e-6, 1e-7};
  testing::check_matches(name, got, ref, tol);
}

const std::vector<std::string> kTags = {"f64", "f32"};

Tensor ints(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }
Tensor f64(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape); }

// Runs f with one thread and with several; the results must be bitwise equal.
template <class F>
void check_thread_independent(F f) {
  const int threads = get_num_threads();
  set_num_threads(1);
  Tensor one = f();
  set_num_threads(std::max(2, threads));
  Tensor many = f();
  set_num_threads(threads);
  CHECK(equal(one, many));
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---------------------------------------------------------------- gather
TEST_CASE("gather matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "gather." + tag + ".";
    Tensor x = fx(p + "x");  // (3, 4, 5)
    check_fx(gather(x, 1, fx(p + "index1")), p + "out1");
    check_fx(gather(x, 0, fx(p + "index0")), p + "out0");
    check_fx(x.gather(-1, fx(p + "indexl")), p + "outl");  // larger than x along dim
    const std::string t = "gather_t." + tag + ".";
    Tensor xt = fx(t + "x").t();
    REQUIRE_FALSE(xt.is_contiguous());
    check_fx(gather(xt, 1, fx(t + "index")), t + "out");
    check_fx(gather(xt, 1, fx(t + "index").t().contiguous().t()), t + "out");  // a transposed index too
  }
  check_fx(gather(fx("gather.i64.x"), 1, fx("gather.i64.index")), "gather.i64.out");
  check_fx(gather(fx("gather.f64.x").select(2, 0), 1, Tensor::empty({3, 0}, kInt64)), "gather.empty.out");
  check_fx(gather(scalar_tensor(2.5, kFloat64), 0, ints({0, 0, 0}, {3})), "gather.scalar.out");
  check_fx(gather(fx("gather.edge.x"), 1, fx("gather.edge.index")), "gather.edge.out");  // NaN, inf, -0
  // 0-D input with a 0-D index gives a 0-D result.
  Tensor s = gather(scalar_tensor(4.0, kFloat64), -1, ints({0}, {}));
  CHECK(s.dim() == 0);
  CHECK(s.item() == 4.0);
}

// ---------------------------------------------------------------- scatter
TEST_CASE("scatter matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "scatter." + tag + ".";
    Tensor x = fx(p + "x");  // (3, 5)
    check_fx(scatter(x, 1, fx(p + "index1"), fx(p + "src")), p + "out1");  // src larger than index
    check_fx(x.scatter(0, fx(p + "index0"), fx(p + "src0")), p + "out0");
    check_fx(scatter(x, 1, fx(p + "index1"), -2.5), p + "value");
    check_fx(scatter(x.t(), 1, fx(p + "index_t"), 7.0), p + "out_t");
    check_fx(scatter(x.t(), 1, fx(p + "index_t"), fx(p + "src0").t()), p + "out_t_src");
    // scatter is out of place: x is unchanged.
    check_fx(x, p + "x");
  }
  Tensor xi = fx("scatter.i64.x");
  check_fx(scatter(xi, 1, fx("scatter.i64.index"), fx("scatter.i64.src")), "scatter.i64.out");
  check_fx(scatter(xi, 1, fx("scatter.i64.index"), -3.75), "scatter.i64.value");
  check_fx(scatter(fx("gather.edge.x"), 1, ints({0, 2}, {2, 1}), kNaN), "scatter.edge.value_nan");
}

TEST_CASE("scatter with repeated indices: the last one in index order wins, whatever the thread count") {
  // torch leaves this undefined; Kiln writes along dim in index order.
  Tensor x = zeros({2, 3}, kFloat64);
  Tensor index = ints({1, 1, 1, 0, 2, 0}, {2, 3});
  Tensor src = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = scatter(x, 1, index, src);
  CHECK(equal(y, f64({0, 3, 0, 6, 0, 5}, {2, 3})));
  // A big scatter with many repeats along dim 0 goes parallel over columns.
  Generator g(5);
  Tensor big = randn({64, 2000}, kFloat64, &g);
  Tensor idx = randint(0, 8, {64, 2000}, kInt64, &g);
  check_thread_independent([&] { return scatter(zeros({8, 2000}, kFloat64), 0, idx, big); });
  // The winner of column c is the last row r with idx[r][c] == target.
  Tensor out = scatter(zeros({8, 2000}, kFloat64), 0, idx, big);
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  std::vector<double> bv = big.to_vector<double>(), ov = out.to_vector<double>();
  int bad = 0;
  for (int64_t c = 0; c < 2000; ++c) {
    std::vector<double> expect(8, 0.0);
    for (int64_t r = 0; r < 64; ++r) expect[iv[r * 2000 + c]] = bv[r * 2000 + c];
    for (int64_t t = 0; t < 8; ++t) bad += ov[t * 2000 + c] != expect[t];
  }
  CHECK(bad == 0);
}

// ---------------------------------------------------------------- scatter_add
TEST_CASE("scatter_add matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "scatter_add." + tag + ".";
    check_fx(scatter_add(fx(p + "x"), 1, fx(p + "index"), fx(p + "src")), p + "out");  // repeats sum
    check_fx(fx(p + "x3").scatter_add(0, fx(p + "index3"), fx(p + "src3")), p + "out3");
  }
  // int64 wraps around like torch (no signed-overflow UB); bool adds as "or".
  check_fx(scatter_add(fx("scatter_add.i64.x"), 0, fx("scatter_add.i64.index"), fx("scatter_add.i64.src")),
           "scatter_add.i64.out");
  check_fx(scatter_add(fx("scatter_add.bool.x"), 0, fx("scatter_add.bool.index"), fx("scatter_add.bool.src")),
           "scatter_add.bool.out");
}

TEST_CASE("scatter_add sums repeats in index order: exact and independent of the thread count") {
  Generator g(9);
  Tensor src = randn({3000, 40}, kFloat32, &g);
  Tensor idx = randint(0, 5, {3000, 40}, kInt64, &g);
  check_thread_independent([&] { return scatter_add(zeros({5, 40}, kFloat32), 0, idx, src); });
  // Against a serial float sum in row order.
  Tensor out = scatter_add(zeros({5, 40}, kFloat32), 0, idx, src);
  std::vector<float> sv = src.to_vector<float>(), ov = out.to_vector<float>();
  std::vector<int64_t> iv = idx.to_vector<int64_t>();
  std::vector<float> ref(5 * 40, 0.0f);
  for (int64_t r = 0; r < 3000; ++r)
    for (int64_t c = 0; c < 40; ++c) ref[iv[r * 40 + c] * 40 + c] += sv[r * 40 + c];
  CHECK(ov == ref);
}

// ---------------------------------------------------------------- index_add
TEST_CASE("index_add matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "index_add." + tag + ".";
    Tensor x = fx(p + "x"), idx = fx(p + "index"), src = fx(p + "src");
    check_fx(index_add(x, 0, idx, src), p + "out");
    check_fx(x.index_add(0, idx, src, 2.5), p + "out_alpha");
    check_fx(index_add(fx(p + "x3"), 1, fx(p + "index3"), fx(p + "src3"), -1.5), p + "out3");
    check_fx(index_add(x, 0, ints({3}, {}), src.slice(0, 0, 1)), p + "out_scalar_index");
    // A transposed self and source give the same numbers.
    check_fx(index_add(x.t().contiguous().t(), 0, idx, src.t().contiguous().t()), p + "out");
  }
  check_fx(index_add(fx("index_add.i64.x"), 0, ints({3, 3}, {2}), fx("index_add.i64.src"), 2.5),
           "index_add.i64.out_alpha");  // alpha truncated to 2, as torch
  CHECK(index_add(zeros({1}, kInt64), 0, ints({0}, {1}), ones({1}, kInt64), -9223372036854775808.0)
            .to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN});  // alpha = -2^63 fits int64
  check_fx(index_add(from_vector<bool>({false, true, false}, {3}), 0, ints({0, 0}, {2}),
                     from_vector<bool>({true, false}, {2})),
           "index_add.bool.out");
  // 0-D self with a 0-D source.
  Tensor s = index_add(scalar_tensor(1.0, kFloat64), 0, ints({0}, {1}), scalar_tensor(2.0, kFloat64), 3.0);
  CHECK(s.dim() == 0);
  CHECK(s.item() == 7.0);
}

TEST_CASE("index_add is independent of the thread count") {
  Generator g(11);
  Tensor src = randn({500, 300}, kFloat32, &g);
  Tensor idx = randint(0, 7, {500}, kInt64, &g);
  check_thread_independent([&] { return index_add(zeros({7, 300}, kFloat32), 0, idx, src, 0.5); });
  check_thread_independent([&] { return index_add(zeros({300, 7}, kFloat32), 1, idx, src.t()); });
}

// ---------------------------------------------------------------- cumsum
TEST_CASE("cumsum matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "cumsum." + tag + ".";
    Tensor x = fx(p + "x");  // (3, 4, 5)
    for (int64_t d : {0, 1, 2, -1}) check_fx(cumsum(x, d), p + "out" + std::to_string(d));
    check_fx(x.transpose(0, 2).cumsum(1), p + "out_t");
    check_fx(cumsum(fx(p + "edge_x"), 0), p + "edge");  // NaN stays, inf - inf is NaN
    check_fx(cumsum(f64({kInf, 1, -kInf, 2}, {4}).to(x.dtype()), 0), p + "infs");
  }
  check_fx(cumsum(fx("cumsum.f32.cancel_x"), 0), "cumsum.f32.cancel");  // float32 summed in double
  check_fx(cumsum(fx("cumsum.f64.x").to(kFloat32), 1, kFloat64), "cumsum.f32.to_f64");
  Tensor ci = fx("cumsum.i64.x");
  check_fx(cumsum(ci, 1), "cumsum.i64.out1");
  check_fx(ci.cumsum(0), "cumsum.i64.out0");
  check_fx(cumsum(ci, 1, kFloat32), "cumsum.i64.to_f32");
  check_fx(cumsum(fx("cumsum.i64.wrap_x"), 0), "cumsum.i64.wrap");  // wraps like torch
  check_fx(cumsum(fx("cumsum.bool.x"), 0), "cumsum.bool.out");     // bool counts in int64
  check_fx(cumsum(zeros({3, 0}, kFloat64), 1), "cumsum.empty.out");
  check_fx(cumsum(scalar_tensor(2.5, kFloat64), 0), "cumsum.scalar.out");
  CHECK(cumsum(zeros({0, 3}, kFloat64), 0).shape() == Shape{0, 3});
}

TEST_CASE("cumsum is exact in double for float32 and independent of the thread count") {
  Generator g(13);
  Tensor x = randn({200, 700}, kFloat32, &g);
  for (int64_t d : {0, 1}) {
    CAPTURE(d);
    check_thread_independent([&] { return cumsum(x, d); });
    Tensor ref = cumsum(x.to(kFloat64), d).to(kFloat32);  // a double running sum, rounded each step
    CHECK(equal(cumsum(x, d), ref));
  }
}

// ---------------------------------------------------------------- sort / argsort
TEST_CASE("sort matches torch") {
  for (const auto& tag : kTags) {
    const std::string p = "sort." + tag + ".";
    Tensor x = fx(p + "x");  // (3, 5, 4), no ties
    for (int64_t d : {0, 1, 2, -1}) {
      for (bool desc : {false, true}) {
        const std::string key = p + std::to_string(d) + (desc ? ".desc" : ".asc");
        ValuesIndices r = sort(x, d, desc);
        check_fx(r.values, key + ".values");
        check_fx(r.indices, key + ".indices");
        check_fx(argsort(x, d, desc), key + ".indices");
      }
    }
    ValuesIndices t = x.transpose(0, 2).sort(1);
    check_fx(t.values, p + "t.values");
    check_fx(t.indices, p + "t.indices");
    // NaN above +inf; -0 and 0 and the two NaNs tie and keep their order.
    for (bool desc : {false, true}) {
      const std::string key = p + "edge." + (desc ? "desc" : "asc");
      ValuesIndices e = sort(fx(p + "edge_x"), -1, desc, true);
      check_fx(e.values, key + ".values");
      check_fx(e.indices, key + ".indices");
    }
  }
  for (bool desc : {false, true}) {
    const std::string key = std::string("sort.i64.") + (desc ? "desc" : "asc");
    ValuesIndices r = sort(fx("sort.i64.x"), 1, desc, true);
    check_fx(r.values, key + ".values");
    check_fx(r.indices, key + ".indices");
  }
  ValuesIndices b = sort(fx("sort.bool.x"), 0, false, true);
  check_fx(b.values, "sort.bool.values");
  check_fx(b.indices, "sort.bool.indices");
  // 0-D and empty inputs.
  ValuesIndices s = sort(scalar_tensor(3.0));
  CHECK(s.values.dim() == 0);
  CHECK(s.indices.item() == 0.0);
  CHECK(sort(zeros({3, 0}), 1).indices.shape() == Shape{3, 0});
}

TEST_CASE("sort is stable whatever `stable` says, and independent of the thread count") {
  Tensor x = f64({1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {20});
  for (bool stable : {false, true}) {
    CHECK(equal(argsort(x, 0, false, stable),
                ints({1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, {20})));
    CHECK(equal(argsort(x, 0, true, stable),
                ints({0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19}, {20})));
  }
  Generator g(17);
  Tensor big = randint(0, 50, {300, 400}, kInt64, &g).to(kFloat32);
  for (int64_t d : {0, 1}) {
    check_thread_independent([&] { return sort(big, d).indices; });
    check_thread_independent([&] { return sort(big, d, true).values; });
  }
}

TEST_CASE("sort's gradient goes to the elements it picked") {
  Tensor x = f64({0.5, -1.0, 2.0, 0.25, 3.0, -2.0}, {2, 3}).requires_grad_();
  ValuesIndices r = sort(x, 1, true);
  Tensor g = f64({10, 20, 30, 40, 50, 60}, {2, 3});
  r.values.backward(g);
  // Row 0 descending: 2.0 (col 2), 0.5 (col 0), -1 (col 1); row 1: 3 (col 1), 0.25 (col 0), -2 (col 2).
  CHECK(equal(x.grad(), f64({20, 30, 10, 50, 40, 60}, {2, 3})));
  CHECK_FALSE(r.indices.requires_grad());
}

// ---------------------------------------------------------------- topk
TEST_CASE("topk matches torch") {
  struct Case {
    const char* name;
    int64_t k, dim;
    bool largest;
  };
  const Case cases[] = {{"k3", 3, -1, true}, {"k3small", 3, 1, false}, {"d0", 2, 0, true},
                        {"d0small", 2, 0, false}, {"all", 6, 1, true}, {"k1", 1, 1, false}};
  for (const auto& tag : kTags) {
    const std::string p = "topk." + tag + ".";
    Tensor x = fx(p + "x");  // (4, 6), no ties
    for (const Case& c : cases) {
      ValuesIndices r = topk(x, c.k, c.dim, c.largest);
      check_fx(r.values, p + c.name + ".values");
      check_fx(r.indices, p + c.name + ".indices");
    }
    ValuesIndices t = x.t().topk(2, 1);
    check_fx(t.values, p + "t.values");
    check_fx(t.indices, p + "t.indices");
    for (bool largest : {true, false}) {
      const std::string key = p + "edge." + (largest ? "largest" : "smallest");
      ValuesIndices e = topk(fx(p + "edge_x"), 3, -1, largest);  // NaN counts as the largest
      check_fx(e.values, key + ".values");
      check_fx(e.indices, key + ".indices");
    }
  }
  ValuesIndices ri = topk(fx("topk.i64.x"), 2, 1);
  check_fx(ri.values, "topk.i64.values");
  check_fx(ri.indices, "topk.i64.indices");
  // k = 0 and 0-D inputs, as torch.
  CHECK(topk(zeros({3, 4}), 0).values.shape() == Shape{3, 0});
  for (int64_t k : {0, 1}) {
    ValuesIndices s = topk(scalar_tensor(3.0), k);
    CHECK(s.values.dim() == 0);
    CHECK(s.values.item() == 3.0);
  }
}

TEST_CASE("topk: ties in index order, sorted or not, and the gradient goes to the picked elements") {
  Tensor x = f64({1, 2, 2, 1, 2}, {5});
  CHECK(equal(topk(x, 3).indices, ints({1, 2, 4}, {3})));
  CHECK(equal(topk(x, 3, -1, true, false).indices, ints({1, 2, 4}, {3})));
  CHECK(equal(topk(x, 2, -1, false).indices, ints({0, 3}, {2})));
  Tensor leaf = f64({0.5, -1.0, 2.0, 0.25}, {4}).requires_grad_();
  topk(leaf, 2).values.backward(f64({7, 9}, {2}));
  CHECK(equal(leaf.grad(), f64({9, 0, 7, 0}, {4})));
}

// ---------------------------------------------------------------- one_hot
TEST_CASE("one_hot matches torch") {
  check_fx(one_hot(fx("one_hot.x")), "one_hot.out");
  check_fx(one_hot(fx("one_hot.x"), 6), "one_hot.out6");
  check_fx(one_hot(ints({2}, {}), 4), "one_hot.scalar");
  check_fx(one_hot(Tensor::empty({0, 2}, kInt64), 3), "one_hot.empty");
}

// ---------------------------------------------------------------- in place
TEST_CASE("scatter_, scatter_add_ and index_add_ write into self and bump its version") {
  Tensor x = zeros({2, 4}, kFloat64);
  uint64_t v0 = x.version();
  Tensor& r = x.scatter_(1, ints({3, 0}, {2, 1}), f64({5, 6}, {2, 1}));
  CHECK(&r == &x);
  CHECK(x.version() > v0);
  CHECK(equal(x, f64({0, 0, 0, 5, 6, 0, 0, 0}, {2, 4})));
  v0 = x.version();
  x.scatter_(1, ints({1, 1}, {2, 1}), -1.0);
  CHECK(x.version() > v0);
  CHECK(equal(x, f64({0, -1, 0, 5, 6, -1, 0, 0}, {2, 4})));
  v0 = x.version();
  x.scatter_add_(0, ints({1, 1, 1, 1}, {1, 4}), f64({1, 1, 1, 1}, {1, 4}));
  CHECK(x.version() > v0);
  CHECK(equal(x, f64({0, -1, 0, 5, 7, 0, 1, 1}, {2, 4})));
  v0 = x.version();
  x.index_add_(1, ints({2, 2}, {2}), f64({1, 2, 3, 4}, {2, 2}), 10.0);
  CHECK(x.version() > v0);
  CHECK(equal(x, f64({0, -1, 30, 5, 7, 0, 71, 1}, {2, 4})));
  // Into a non-contiguous view: the base tensor changes.
  Tensor base = zeros({3, 2}, kFloat64);
  Tensor view = base.t();
  view.scatter_(1, ints({2, 0}, {2, 1}), 4.0);
  CHECK(equal(base, f64({0, 4, 0, 0, 4, 0}, {3, 2})));
}

TEST_CASE("in-place scatters follow torch's in-place rules: refused on a leaf that requires grad, recorded on graph tensors") {
  Tensor leaf = zeros({2, 3}, kFloat64).requires_grad_();
  CHECK_ERROR(leaf.scatter_(1, ints({0}, {1, 1}), 1.0), "[scatter_]", "leaf tensor that requires grad");
  CHECK_ERROR(leaf.scatter_add_(1, ints({0}, {1, 1}), ones({1, 1}, kFloat64)), "[scatter_add_]", "leaf");
  CHECK_ERROR(leaf.index_add_(0, ints({0}, {1}), ones({1, 3}, kFloat64)), "[index_add_]", "leaf");
  {
    // On a non-leaf they are recorded and give the out-of-place forms' gradients.
    Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
    Tensor src = f64({10, 20}, {2, 1}).requires_grad_();
    Tensor idx = ints({2, 0}, {2, 1});
    auto inplace = [&](int which) {
      Tensor y = a * 1.0;
      if (which == 0) y.scatter_(1, idx, src);
      if (which == 1) y.scatter_add_(1, idx, src);
      if (which == 2) y.index_add_(1, ints({0}, {1}), src, 2.0);
      if (which == 3) y.scatter_(1, idx, 7.0);
      return y;
    };
    auto outofplace = [&](int which) {
      if (which == 0) return scatter(a, 1, idx, src);
      if (which == 1) return scatter_add(a, 1, idx, src);
      if (which == 2) return index_add(a, 1, ints({0}, {1}), src, 2.0);
      return scatter(a, 1, idx, 7.0);
    };
    Tensor w = f64({1, -2, 3, 0.5, 5, -1}, {2, 3});
    // The gradients of sum(y * w) with respect to a and src.
    auto grads = [&](const Tensor& y) {
      a.zero_grad();
      src.zero_grad();
      (y * w).sum().backward();
      return std::pair<Tensor, Tensor>{a.grad(), src.grad()};
    };
    for (int which = 0; which < 4; ++which) {
      CAPTURE(which);
      Tensor y1 = inplace(which);
      REQUIRE(y1.requires_grad());
      auto [ga1, gs1] = grads(y1);
      Tensor y2 = outofplace(which);
      auto [ga2, gs2] = grads(y2);
      CHECK(equal(y1.detach(), y2.detach()));
      CHECK(equal(ga1, ga2));
      CHECK(gs1.defined() == gs2.defined());
      if (gs1.defined()) CHECK(equal(gs1, gs2));
    }
  }
  {
    NoGradGuard no_grad;
    leaf.scatter_(1, ints({2}, {1, 1}), 1.0);  // allowed outside grad mode
  }
  CHECK(leaf.at({0, 2}) == 1.0);
  // Changing the index after the forward makes backward fail loudly instead of scattering wrongly.
  Tensor x = f64({1, 2, 3}, {3}).requires_grad_();
  Tensor idx = ints({2, 0}, {2});
  Tensor y = gather(x, 0, idx);
  idx.fill_(1);
  CHECK_ERROR(y.sum().backward(), "[gather]", "modified");
}

TEST_CASE("in-place scatters refuse a self whose memory is shared (expanded, or read by the op)") {
  Tensor row = zeros({1, 4}, kFloat64);
  Tensor wide = row.expand({3, 4});
  CHECK_ERROR(wide.scatter_add_(1, zeros({3, 1}, kInt64), ones({3, 1}, kFloat64)), "[scatter_add_]", "stride 0",
              "clone()");
  CHECK_ERROR(wide.scatter_(1, zeros({3, 1}, kInt64), 1.0), "[scatter_]", "stride 0");
  CHECK_ERROR(wide.index_add_(0, ints({0}, {1}), ones({1, 4}, kFloat64)), "[index_add_]", "stride 0");
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_ERROR(x.scatter_(1, ints({0, 0}, {2, 1}), x.slice(1, 2, 3)), "[scatter_]", "same memory");
  CHECK_ERROR(x.index_add_(1, ints({0}, {1}), x.slice(1, 1, 2)), "[index_add_]", "same memory");
  Tensor xi = zeros({2, 2}, kInt64);
  CHECK_ERROR(xi.scatter_(0, xi, 1.0), "[scatter_]", "same memory");
  CHECK(equal(x, f64({1, 2, 3, 4, 5, 6}, {2, 3})));
  // Disjoint parts of one storage are fine: row 1 into row 0.
  Tensor y = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor top = y.slice(0, 0, 1);
  top.scatter_(1, ints({2, 1, 0}, {1, 3}), y.slice(0, 1, 2));
  CHECK(equal(y, f64({6, 5, 4, 4, 5, 6}, {2, 3})));
}

TEST_CASE("scatter with a src larger than index: the src gradient is zero outside the window read") {
  Tensor x = zeros({2, 3}, kFloat64).requires_grad_();
  Tensor src = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}).requires_grad_();
  Tensor y = scatter(x, 1, ints({2, 0}, {2, 1}), src);
  y.backward(f64({10, 20, 30, 40, 50, 60}, {2, 3}));
  CHECK(equal(src.grad(), f64({30, 0, 0, 40, 0, 0, 0, 0, 0}, {3, 3})));
  CHECK(equal(x.grad(), f64({10, 20, 0, 0, 50, 60}, {2, 3})));
}

// ---------------------------------------------------------------- host staging
TEST_CASE("Backend's host-staged defaults (what CUDA runs today) give the CPU kernels' results") {
  // The base-class versions, called on the CPU backend: inputs copied to fresh host
  // tensors, the CPU kernel run, results copied back into the (strided) outputs.
  Backend& be = backend_for(kCPU);
  Generator g(21);
  Tensor x = randn({5, 4}, kFloat64, &g).t();  // (4, 5), non-contiguous
  Tensor idx = randint(0, 5, {4, 3}, kInt64, &g);
  Tensor want = Tensor::empty({4, 3}, kFloat64), got = zeros({3, 4}, kFloat64).t();
  be.gather(x, 1, idx, want);
  be.Backend::gather(x, 1, idx, got);
  CHECK(equal(got, want));
  Tensor self_a = x.clone(), self_b = x.t().contiguous().t();
  Tensor src = randn({4, 3}, kFloat64, &g);
  be.scatter(self_a, 1, idx, src, true);
  be.Backend::scatter(self_b, 1, idx, src, true);
  CHECK(equal(self_b, self_a));
  Tensor ia = from_vector<int64_t>({4, 0, 4}, {3});
  be.index_add(self_a, 1, ia, src, 0.5);
  be.Backend::index_add(self_b, 1, ia, src, 0.5);
  CHECK(equal(self_b, self_a));
  Tensor cs_a = Tensor::empty({4, 5}, kFloat64), cs_b = Tensor::empty({4, 5}, kFloat64);
  be.cumsum(x, 1, true, cs_a);
  be.Backend::cumsum(x, 1, true, cs_b);
  CHECK(equal(cs_b, cs_a));
  Tensor va = Tensor::empty({4, 5}, kFloat64), vb = Tensor::empty({4, 5}, kFloat64);
  Tensor ja = Tensor::empty({4, 5}, kInt64), jb = Tensor::empty({4, 5}, kInt64);
  be.sort(x, 0, true, va, ja);
  be.Backend::sort(x, 0, true, vb, jb);
  CHECK(equal(vb, va));
  CHECK(equal(jb, ja));
  Tensor ka = Tensor::empty({4, 2}, kFloat64), kb = Tensor::empty({4, 2}, kFloat64);
  Tensor la = Tensor::empty({4, 2}, kInt64), lb = Tensor::empty({4, 2}, kInt64);
  be.topk(x, 2, 1, false, ka, la);
  be.Backend::topk(x, 2, 1, false, kb, lb);
  CHECK(equal(kb, ka));
  CHECK(equal(lb, la));
  Tensor ma = Tensor::empty({4, 7}, kInt64), mb = Tensor::empty({4, 7}, kInt64);
  be.multinomial(x.abs(), 7, true, 5, 100, ma);
  be.Backend::multinomial(x.abs(), 7, true, 5, 100, mb);
  CHECK(equal(mb, ma));
  // Errors come through unchanged.
  CHECK_ERROR(be.Backend::gather(x, 1, from_vector<int64_t>({9}, {1, 1}), Tensor::empty({1, 1}, kFloat64)),
              "[gather] index 9 is out of bounds for dim 1 with size 5");
}

// ---------------------------------------------------------------- multinomial
TEST_CASE("multinomial with replacement: reproducible by seed, frequencies follow the weights") {
  const std::vector<double> w = {1, 2, 3, 0, 4};  // not normalised; a zero weight is never drawn
  Tensor probs = f64(w, {5});
  Generator g1(42), g2(42), g3(43);
  const int64_t n = 100000;
  Tensor a = multinomial(probs, n, true, &g1);
  CHECK(a.dtype() == kInt64);
  CHECK(a.shape() == Shape{n});
  CHECK(equal(a, multinomial(probs, n, true, &g2)));        // same seed, same draws
  CHECK_FALSE(equal(a, multinomial(probs, n, true, &g3)));  // another seed, others
  CHECK_FALSE(equal(a, multinomial(probs, n, true, &g1)));  // the generator moved on
  std::vector<int64_t> counts(5, 0);
  int64_t outside = 0;
  for (int64_t c : a.to_vector<int64_t>()) {
    if (c >= 0 && c < 5) {
      ++counts[c];
    } else {
      ++outside;
    }
  }
  CHECK(outside == 0);
  CHECK(counts[3] == 0);
  // Each frequency's standard deviation is at most sqrt(0.25 / 1e5) = 0.0016; the bound is
  // six of them, and the seed is fixed, so the check cannot flake.
  for (int c = 0; c < 5; ++c) {
    CAPTURE(c);
    CHECK(std::abs(static_cast<double>(counts[c]) / n - w[c] / 10.0) < 0.01);
  }
  // float32 weights and a 2-D batch: each row follows its own weights.
  Tensor rows = f64({0, 0, 1, 1, 1, 0}, {2, 3}).to(kFloat32);
  Generator g4(7);
  Tensor b = multinomial(rows, 1000, true, &g4);
  CHECK(b.shape() == Shape{2, 1000});
  CHECK(equal(b.select(0, 0), full({1000}, 2, kInt64)));
  std::vector<int64_t> r1 = b.select(0, 1).to_vector<int64_t>();
  CHECK(std::count(r1.begin(), r1.end(), 2) == 0);
  CHECK(std::abs(std::count(r1.begin(), r1.end(), 0) - 500.0) < 100.0);  // 6 sigma is 95
}

TEST_CASE("multinomial without replacement: distinct samples drawn in proportion to the weights") {
  const std::vector<double> w = {0.1, 0.2, 0.3, 0.4};
  const int64_t R = 25000;
  Tensor probs = f64(w, {1, 4}).expand({R, 4});  // any strides
  Generator g(2024);
  Tensor s = probs.multinomial(2, false, &g);
  CHECK(s.shape() == Shape{R, 2});
  std::vector<int64_t> v = s.to_vector<int64_t>();
  std::vector<double> first(4, 0), second(4, 0);
  int same = 0;
  for (int64_t r = 0; r < R; ++r) {
    same += v[2 * r] == v[2 * r + 1];
    first[v[2 * r]] += 1.0 / R;
    second[v[2 * r + 1]] += 1.0 / R;
  }
  CHECK(same == 0);
  // Draws in order without replacement: P(first = i) = w_i, P(second = j) = sum over
  // i != j of w_i w_j / (1 - w_i). Standard deviations are below 0.0032; bound 0.02.
  for (int j = 0; j < 4; ++j) {
    double p2 = 0;
    for (int i = 0; i < 4; ++i)
      if (i != j) p2 += w[i] * w[j] / (1 - w[i]);
    CAPTURE(j);
    CHECK(std::abs(first[j] - w[j]) < 0.02);
    CHECK(std::abs(second[j] - p2) < 0.02);
  }
  // All categories: a permutation of each row, zero weights last.
  Generator g2(5);
  Tensor perm = multinomial(f64({0, 3, 0, 1, 2}, {5}), 5, false, &g2);
  std::vector<int64_t> pv = perm.to_vector<int64_t>();
  CHECK(std::set<int64_t>(pv.begin(), pv.end()).size() == 5);
  CHECK(std::set<int64_t>(pv.begin() + 3, pv.end()) == std::set<int64_t>{0, 2});
  // The same seed gives the same draws; the draws do not depend on the thread count.
  Generator g3(2024);
  CHECK(equal(s, probs.multinomial(2, false, &g3)));
  check_thread_independent([&] {
    Generator gt(99);
    return multinomial(probs, 3, false, &gt);
  });
  check_thread_independent([&] {
    Generator gt(99);
    return multinomial(probs, 3, true, &gt);
  });
  // With no generator the default one draws: manual_seed makes it repeatable.
  manual_seed(3);
  Tensor d1 = multinomial(f64(w, {4}), 50, true);
  manual_seed(3);
  CHECK(equal(d1, multinomial(f64(w, {4}), 50, true)));
}

// ---------------------------------------------------------------- errors
TEST_CASE("gather and scatter errors") {
  Tensor x = zeros({3, 4});
  CHECK_ERROR(gather(x, 1, ints({7}, {1, 1})), "[gather] index 7 is out of bounds for dim 1 with size 4");
  CHECK_ERROR(gather(x, -1, ints({-1}, {1, 1})), "[gather] index -1 is out of bounds for dim 1 with size 4");
  CHECK_ERROR(gather(x, 2, ints({0}, {1, 1})), "[gather]", "dim 2", "out of range");
  CHECK_ERROR(gather(x, 1, ints({0}, {1})), "[gather]", "index of shape (1,)", "(3, 4)", "dimensions");
  CHECK_ERROR(gather(x, 1, zeros({4, 1}, kInt64)), "[gather]", "(4, 1)", "(3, 4)", "dim 0");
  CHECK_ERROR(gather(x, 1, zeros({1, 1})), "[gather]", "int64", "float32");
  CHECK_ERROR(gather(Tensor(), 1, zeros({1, 1}, kInt64)), "[gather]", "undefined");
  CHECK_ERROR(scatter(x, 1, ints({4}, {1, 1}), 1.0), "[scatter] index 4 is out of bounds for dim 1 with size 4");
  CHECK_ERROR(scatter(x, 0, ints({3}, {1, 1}), ones({1, 1})),
              "[scatter] index 3 is out of bounds for dim 0 with size 3");
  CHECK_ERROR(scatter(x, 1, ints({0}, {1, 1}), ones({1, 1}, kFloat64)), "[scatter]", "src has dtype float64",
              "float32");
  CHECK_ERROR(scatter(x, 1, ints({0, 1}, {1, 2}), ones({1, 1})), "[scatter]", "(1, 2)", "larger than src", "(1, 1)");
  CHECK_ERROR(scatter(x, 1, zeros({4, 1}, kInt64), ones({5, 5})), "[scatter]", "(4, 1)", "(3, 4)", "dim 0");
  CHECK_ERROR(scatter(x, 1, zeros({1, 1}, kInt64), ones({5})), "[scatter]", "src of shape (5,)", "dimensions");
  CHECK_ERROR(scatter(zeros({3}, kInt64), 0, ints({1}, {1}), kNaN), "[scatter]", "nan", "int64");
  CHECK_ERROR(scatter(zeros({3}, kInt64), 0, ints({1}, {1}), 1e19), "[scatter]", "int64", "overflow");
  CHECK_ERROR(scatter_add(x, 0, ints({-2}, {1, 1}), ones({1, 1})),
              "[scatter_add] index -2 is out of bounds for dim 0 with size 3");
  CHECK_ERROR(scatter_add(x, 0, ints({0}, {1, 1}), ones({1, 1}, kInt64)), "[scatter_add]", "int64", "float32");
  CHECK_ERROR(x.scatter_(0, ints({5}, {1, 1}), 2.0), "[scatter] index 5 is out of bounds for dim 0 with size 3");
  CHECK_ERROR(x.scatter_add_(0, ints({0}, {1, 1}), ones({1, 1}, kFloat64)), "[scatter_add_]", "float64");
  CHECK(equal(x, zeros({3, 4})));  // a failed in-place scatter leaves self alone
}

TEST_CASE("index_add errors") {
  Tensor x = zeros({3, 4});
  CHECK_ERROR(index_add(x, 0, ints({3}, {1}), ones({1, 4})),
              "[index_add] index 3 is out of bounds for dim 0 with size 3");
  CHECK_ERROR(index_add(x, 1, ints({-1}, {1}), ones({3, 1})),
              "[index_add] index -1 is out of bounds for dim 1 with size 4");
  CHECK_ERROR(index_add(x, 0, ints({1}, {1}), ones({1, 4}, kFloat64)), "[index_add]", "float64", "float32");
  CHECK_ERROR(index_add(x, 0, ints({1}, {1}), ones({1, 5})), "[index_add]", "(1, 5)", "(3, 4)", "dim 1");
  CHECK_ERROR(index_add(x, 0, ints({1, 2}, {2}), ones({1, 4})), "[index_add]", "number of indices (2)",
              "source.size(0) (1)");
  CHECK_ERROR(index_add(x, 0, ints({1}, {1, 1}), ones({1, 4})), "[index_add]", "0-D or 1-D", "(1, 1)");
  CHECK_ERROR(index_add(x, 0, ones({1}), ones({1, 4})), "[index_add]", "int64", "float32");
  CHECK_ERROR(index_add(x, 0, ints({1}, {1}), ones({4})), "[index_add]", "(4,)", "dimensions");
  CHECK_ERROR(index_add(x, 2, ints({1}, {1}), ones({1, 4})), "[index_add]", "dim 2", "out of range");
  CHECK_ERROR(index_add(zeros({3}, kInt64), 0, ints({1}, {1}), ones({1}, kInt64), kInf), "[index_add]", "alpha",
              "int64");
  CHECK_ERROR(x.index_add_(0, ints({9}, {1}), ones({1, 4})), "[index_add] index 9 is out of bounds");
  CHECK(equal(x, zeros({3, 4})));
}

TEST_CASE("cumsum, sort and topk errors") {
  Tensor x = zeros({3, 4});
  CHECK_ERROR(cumsum(x, 2), "[cumsum]", "dim 2", "out of range");
  CHECK_ERROR(cumsum(scalar_tensor(1.0), 1), "[cumsum]", "dim 1", "out of range");
  CHECK_ERROR(cumsum(x, 0, kBool), "[cumsum]", "bool");
  CHECK_ERROR(cumsum(Tensor(), 0), "[cumsum]", "undefined");
  CHECK_ERROR(sort(x, 2), "[sort]", "dim 2", "out of range");
  CHECK_ERROR(sort(scalar_tensor(1.0), 1), "[sort]", "dim 1");
  CHECK_ERROR(argsort(x, -3), "[sort]", "dim -3");
  CHECK_ERROR(topk(x, 5), "[topk]", "k out of range", "k = 5", "size 4");
  CHECK_ERROR(topk(x, -1), "[topk]", "k = -1");
  CHECK_ERROR(topk(x, 4, 0), "[topk]", "k = 4", "dim 0", "size 3");
  CHECK_ERROR(topk(x, 1, 2), "[topk]", "dim 2", "out of range");
  CHECK_ERROR(topk(scalar_tensor(1.0), 2), "[topk]", "k = 2");
  CHECK_ERROR(topk(zeros({3}, kBool), 1), "[topk]", "bool");
}

TEST_CASE("multinomial errors") {
  CHECK_ERROR(multinomial(f64({1, -1}, {2}), 1), "[multinomial]", "inf, nan or element < 0", "-1");
  CHECK_ERROR(multinomial(f64({1, kNaN}, {2}), 1, true), "[multinomial]", "inf, nan or element < 0", "nan");
  CHECK_ERROR(multinomial(f64({kInf, 1}, {2}), 1), "[multinomial]", "inf, nan or element < 0", "inf");
  CHECK_ERROR(multinomial(f64({1, 1, 0, 0}, {2, 2}), 1), "[multinomial]", "sum of probabilities <= 0", "row 1");
  CHECK_ERROR(multinomial(f64({0, 0}, {2}), 3, true), "[multinomial]", "sum of probabilities <= 0");
  CHECK_ERROR(multinomial(f64({1, 1}, {2}), 3), "[multinomial]", "without replacement", "num_samples = 3",
              "2 categories");
  CHECK_ERROR(multinomial(f64({1, 1}, {2}), 0), "[multinomial]", "n_sample <= 0", "num_samples = 0");
  CHECK_ERROR(multinomial(f64({1, 1}, {2}), -2, true), "[multinomial]", "num_samples = -2");
  CHECK_ERROR(multinomial(ones({2, 2, 2}), 1), "[multinomial]", "1 or 2 dim", "(2, 2, 2)");
  CHECK_ERROR(multinomial(scalar_tensor(1.0), 1), "[multinomial]", "1 or 2 dim", "()");
  CHECK_ERROR(multinomial(ints({1, 2}, {2}), 1), "[multinomial]", "floating", "int64");
  CHECK_ERROR(multinomial(ones({2, 0}), 1), "[multinomial]", "without replacement");
  CHECK(multinomial(ones({0, 3}), 2).shape() == Shape{0, 2});  // no rows: nothing to draw, as torch
}

TEST_CASE("one_hot errors") {
  CHECK_ERROR(one_hot(ints({0, -2, 1}, {3})), "[one_hot]", "non-negative", "-2");
  CHECK_ERROR(one_hot(ints({0, 3, 1}, {3}), 3), "[one_hot]", "smaller than num_classes (3)", "got 3");
  CHECK_ERROR(one_hot(ints({0}, {1}), 0), "[one_hot]", "smaller than num_classes (0)");
  CHECK_ERROR(one_hot(ints({0}, {1}), -2), "[one_hot]", "num_classes (-2)");
  CHECK_ERROR(one_hot(Tensor::empty({0}, kInt64)), "[one_hot]", "empty tensor", "num_classes = -1");
  CHECK_ERROR(one_hot(ones({2})), "[one_hot]", "int64", "float32");
  CHECK_ERROR(one_hot(ints({std::numeric_limits<int64_t>::max()}, {1})), "[one_hot]", "too large");
}
