// Indexing, scatter, scan, sort and sampling ops beyond their op-table rows
// (tests/op_table/indexing.cpp holds the values against PyTorch, gradchecks and errors of
// gather, scatter, scatter_add, index_add, cumsum, sort, argsort, topk, one_hot and the
// in-place forms): the rules torch leaves open that Kiln fixes (repeated indices, ties),
// the in-place forms' writes and versions, gradients that are exact by construction,
// thread-count independence (multinomial's too), the host-staged backend defaults.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>

#include "backend/backend.h"
#include "test_util.h"

using namespace kiln;

namespace {

Tensor ints(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }
Tensor f64(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape); }

// Runs f with one thread and with several; the results must be bitwise equal.
template <class F>
void check_thread_independent(F f) {
  testing::ThreadsGuard guard;
  set_num_threads(1);
  Tensor one = f();
  set_num_threads(std::max(2, guard.saved));
  Tensor many = f();
  CHECK(equal(one, many));
}

}  // namespace

// ---------------------------------------------------------------- scatter
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
TEST_CASE("index_add is independent of the thread count") {
  Generator g(11);
  Tensor src = randn({500, 300}, kFloat32, &g);
  Tensor idx = randint(0, 7, {500}, kInt64, &g);
  check_thread_independent([&] { return index_add(zeros({7, 300}, kFloat32), 0, idx, src, 0.5); });
  check_thread_independent([&] { return index_add(zeros({300, 7}, kFloat32), 1, idx, src.t()); });
}

// ---------------------------------------------------------------- cumsum
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
TEST_CASE("topk: ties in index order, sorted or not, and the gradient goes to the picked elements") {
  Tensor x = f64({1, 2, 2, 1, 2}, {5});
  CHECK(equal(topk(x, 3).indices, ints({1, 2, 4}, {3})));
  CHECK(equal(topk(x, 3, -1, true, false).indices, ints({1, 2, 4}, {3})));
  CHECK(equal(topk(x, 2, -1, false).indices, ints({0, 3}, {2})));
  Tensor leaf = f64({0.5, -1.0, 2.0, 0.25}, {4}).requires_grad_();
  topk(leaf, 2).values.backward(f64({7, 9}, {2}));
  CHECK(equal(leaf.grad(), f64({9, 0, 7, 0}, {4})));
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

TEST_CASE("in-place scatters are recorded on graph tensors and give the out-of-place forms' gradients") {
  Tensor leaf = zeros({2, 3}, kFloat64).requires_grad_();
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

TEST_CASE("in-place scatters that refuse shared memory leave self alone; disjoint parts of one storage are fine") {
  // The messages are checked in the op table (tests/op_table/indexing.cpp).
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_AS(x.scatter_(1, ints({0, 0}, {2, 1}), x.slice(1, 2, 3)), Error);
  CHECK_THROWS_AS(x.index_add_(1, ints({0}, {1}), x.slice(1, 1, 2)), Error);
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
// (Its draws and errors: the op table, tests/op_table/random.cpp.)
TEST_CASE("multinomial's draws do not depend on the thread count") {
  Tensor probs = f64({0.1, 0.2, 0.3, 0.4}, {1, 4}).expand({25000, 4});
  for (const bool replacement : {false, true})
    check_thread_independent([&] {
      Generator gt(99);
      return multinomial(probs, 3, replacement, &gt);
    });
}

// ---------------------------------------------------------------- errors
TEST_CASE("a failed in-place scatter or index_add leaves self alone") {
  // The messages are checked in the op table (tests/op_table/indexing.cpp).
  Tensor x = zeros({3, 4});
  CHECK_THROWS_AS(x.scatter_(0, ints({5}, {1, 1}), 2.0), Error);
  CHECK_THROWS_AS(x.scatter_add_(0, ints({0}, {1, 1}), ones({1, 1}, kFloat64)), Error);
  CHECK_THROWS_AS(x.index_add_(0, ints({9}, {1}), ones({1, 4})), Error);
  CHECK(equal(x, zeros({3, 4})));
}

