// What ops promise beyond their rows in the op table (tests/op_table, whose rows read
// tests/fixtures/ops_forward.txt, made by tests/fixtures/make_op_fixtures.py): sums that
// do not depend on the thread count, dropout's stream and fused paths, views against
// copies, and the ops with nothing to ask torch (factories, conversions, promotion),
// checked against numbers worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>

#include "test_util.h"

using namespace kiln;

namespace {

const testing::FixtureFile kFixtures("ops_forward.txt", "make_op_fixtures.py");
Tensor fx(const std::string& name) { return kFixtures.get(name); }

using kiln::testing::Tol;

// Torch and Kiln evaluate the same formulas in the same precision, but with different
// math libraries (SLEEF/vectorised vs. libm), BLAS kernels and summation orders, so
// results may differ by a few units in the last place; any real bug is far larger.
// float64: 1 ulp is 2.2e-16 relative; 1e-12 allows a few thousand ulps (summation order
// in reductions and matmul compounds a little). float32: 1 ulp is 1.2e-7 relative;
// 1e-6 allows ~8 ulps. The absolute floor covers results that come out near zero by
// cancellation, whose error is a few ulps of the O(1) inputs rather than of the result.
constexpr Tol kTol64{1e-12, 1e-14};
constexpr Tol kTol32{1e-6, 1e-7};

Tol tol_for(DType t) { return t == kFloat64 ? kTol64 : kTol32; }

void check_matches(const std::string& what, const Tensor& got, const Tensor& ref) {
  kiln::testing::check_matches(what, got, ref, tol_for(ref.dtype()));
}

const std::vector<std::string> kTags = {"f64", "f32"};

}  // namespace

// ---------------------------------------------------------------- elementwise
TEST_CASE("clamp of int64 with integral bounds keeps int64") {
  check_matches("clamp int64 integral bounds", clamp(fx("int.a"), -2.0, 3.0),
                from_vector<int64_t>({-2, -2, -2, -2, -2, -1, 0, 1, 2, 3, 3, 3}, {3, 4}));
}

// ---------------------------------------------------------------- reductions
TEST_CASE("column sums of a tall matrix (a bias gradient) are exact to float and do not depend on the thread count") {
  // Sums over dim 0 of (rows, cols) are cut into slices of rows summed in parallel for
  // few columns; the result must be the double-accumulated sum rounded once.
  Generator g(3);
  for (int64_t cols : {1, 7, 512, 1500}) {
    CAPTURE(cols);
    Tensor x = randn({6400, cols}, kFloat32, &g);
    std::vector<float> v = x.to_vector<float>();
    std::vector<double> ref(static_cast<size_t>(cols), 0.0);
    for (int64_t r = 0; r < 6400; ++r)
      for (int64_t c = 0; c < cols; ++c) ref[static_cast<size_t>(c)] += v[static_cast<size_t>(r * cols + c)];
    testing::ThreadsGuard guard;
    set_num_threads(1);
    Tensor one = sum(x, {0});
    set_num_threads(std::max(2, guard.saved));
    Tensor many = sum(x, {0});
    CHECK(equal(one, many));
    std::vector<float> got = many.to_vector<float>();
    int bad = 0;
    for (int64_t c = 0; c < cols; ++c) {
      // float rounding of the exact sum, plus the double accumulation's error (far less)
      const double r = ref[static_cast<size_t>(c)];
      bad += std::abs(got[static_cast<size_t>(c)] - r) > 1e-6 * std::max(1.0, std::abs(r));
    }
    CHECK(bad == 0);
  }
}

// ---------------------------------------------------------------- fused nn ops
TEST_CASE("scaled_dot_product_attention with dropout equals its unfused formula under the same generator") {
  // The fused kernel numbers the (N, H, L, S) weights as a contiguous tensor and draws
  // dropout's stream from the same Philox counters, so one seed gives one mask.
  Generator init(3);
  for (DType dt : {kFloat64, kFloat32}) {
    TensorOptions o(dt);
    Tensor q = randn({2, 3, 6, 8}, o, &init).requires_grad_(), k = randn({2, 3, 7, 8}, o, &init).requires_grad_(),
           v = randn({2, 3, 7, 5}, o, &init).requires_grad_();
    Tensor allowed = gt(rand({2, 1, 1, 7}, TensorOptions(kFloat64), &init), 0.3);
    allowed = logical_or(allowed, eq(arange(7.0).reshape({1, 1, 1, 7}), 0));  // every query sees key 0
    Tensor g = randn({2, 3, 6, 5}, o, &init);
    Generator g1(11), g2(11);
    Tensor fused = scaled_dot_product_attention(q, k, v, allowed, 0.4, false, std::nullopt, &g1);
    fused.backward(g);
    Tensor gq = q.grad(), gk = k.grad(), gv = v.grad();
    q.set_grad(Tensor());
    k.set_grad(Tensor());
    v.set_grad(Tensor());
    Tensor w = softmax(masked_fill(matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(8.0)), logical_not(allowed),
                                   -std::numeric_limits<double>::infinity()),
                       -1);
    Tensor unfused = matmul(dropout(w, 0.4, true, &g2), v);
    unfused.backward(g);
    const Tol tol = dt == kFloat64 ? Tol{1e-12, 1e-13} : Tol{2e-6, 1e-6};
    kiln::testing::check_matches("output", fused, unfused, tol);
    kiln::testing::check_matches("grad q", gq, q.grad(), tol);
    kiln::testing::check_matches("grad k", gk, k.grad(), tol);
    kiln::testing::check_matches("grad v", gv, v.grad(), tol);
    CHECK(g1.get_state().offset == g2.get_state().offset);  // both reserved the same blocks
  }
}

TEST_CASE("scaled_dot_product_attention on long float32 heads equals its formula in float64") {
  // Heads of 96 queries, 80 keys and 32 features: products large enough that the kernel
  // takes oneDNN's matmul where it is built in (OpenBLAS below). Strided heads, as a
  // projection's (batch, tokens, heads, features) viewed per head; a bool mask with one
  // query that may attend to nothing, an additive mask, causal, and dropout, each
  // against the unfused formula on the same values in float64 (forward and gradients).
  Generator init(7);
  const int64_t N = 2, H = 2, L = 96, S = 80, E = 32;
  const auto heads = [&](int64_t T) { return randn({N, T, H, E}, TensorOptions(kFloat32), &init).transpose(1, 2); };
  const Tensor q32 = heads(L), k32 = heads(S), v32 = heads(S);
  const Tensor g32 = randn({N, H, L, E}, TensorOptions(kFloat32), &init);
  Tensor allowed = gt(rand({N, 1, L, S}, TensorOptions(kFloat64), &init), 0.25);
  std::vector<double> dead(static_cast<size_t>(N * L * S), 0.0);
  std::fill_n(dead.begin() + (1 * L + 5) * S, S, 1.0);  // batch 1's query 5 sees nothing
  allowed = logical_and(allowed, eq(from_vector(dead, {N, 1, L, S}), 0.0));
  const Tensor additive = rand({1, H, L, S}, TensorOptions(kFloat32), &init) * -3.0;
  const Tensor causal_allowed = logical_not(triu(ones({L, S}, TensorOptions(kBool)), 1));
  struct Case {
    const char* name;
    Tensor mask;  // bool (true = may attend) or additive; undefined: none
    bool causal;
    double p;
  };
  for (const Case& c : {Case{"bool mask", allowed, false, 0.0}, Case{"additive mask", additive, false, 0.0},
                        Case{"causal", Tensor(), true, 0.0}, Case{"bool mask, dropout", allowed, false, 0.3}}) {
    CAPTURE(c.name);
    Tensor q = q32.detach().requires_grad_(), k = k32.detach().requires_grad_(), v = v32.detach().requires_grad_();
    Generator g1(13), g2(13);
    Tensor fused = scaled_dot_product_attention(q, k, v, c.mask, c.p, c.causal, std::nullopt, &g1);
    fused.backward(g32);
    Tensor q64 = q32.to(kFloat64).requires_grad_(), k64 = k32.to(kFloat64).requires_grad_(),
           v64 = v32.to(kFloat64).requires_grad_();
    Tensor scores = matmul(q64, k64.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(E)));
    const double kNegInf = -std::numeric_limits<double>::infinity();
    if (c.causal) scores = masked_fill(scores, logical_not(causal_allowed), kNegInf);
    else if (c.mask.dtype() == kBool) scores = masked_fill(scores, logical_not(c.mask), kNegInf);
    else scores = scores + c.mask.to(kFloat64);
    Tensor w = softmax(scores, -1);
    w = masked_fill(w, isnan(w), 0.0);  // a query that sees nothing: zeros, as the kernel
    Tensor unfused = matmul(c.p > 0 ? dropout(w, c.p, true, &g2) : w, v64);
    unfused.backward(g32.to(kFloat64));
    const Tol tol{1e-5, 2e-6};
    kiln::testing::check_matches("output", fused, unfused.to(kFloat32), tol);
    kiln::testing::check_matches("grad q", q.grad(), q64.grad().to(kFloat32), tol);
    kiln::testing::check_matches("grad k", k.grad(), k64.grad().to(kFloat32), tol);
    kiln::testing::check_matches("grad v", v.grad(), v64.grad().to(kFloat32), tol);
  }
  // The same bits at one thread and at two.
  testing::ThreadsGuard guard;
  set_num_threads(1);
  const Tensor one = scaled_dot_product_attention(q32, k32, v32, allowed);
  set_num_threads(std::max(2, guard.saved));
  CHECK(equal(one, scaled_dot_product_attention(q32, k32, v32, allowed)));
}

TEST_CASE("dropout draws bernoulli(1 - p)'s stream and backward reuses its mask") {
  for (DType dt : {kFloat64, kFloat32}) {
    Generator g1(5), g2(5);
    Tensor x = (rand({7, 9}, TensorOptions(dt)) + 0.5).requires_grad_();
    Tensor y = dropout(x, 0.3, true, &g1);
    Tensor keep = bernoulli({7, 9}, 0.7, TensorOptions(dt), &g2);
    kiln::testing::check_matches("forward", y, x.detach() * keep / 0.7, Tol{1e-6, 0});
    y.backward(ones({7, 9}, TensorOptions(dt)));
    kiln::testing::check_matches("backward", x.grad(), keep / 0.7, Tol{1e-6, 0});
    const double kept = sum(keep).item();
    CHECK(kept > 20);  // 63 draws at 0.7: far from all or none
    CHECK(kept < 60);
  }
}

TEST_CASE("relu_dropout equals dropout(relu(x)) under the same generator, forward and backward") {
  for (DType dt : {kFloat64, kFloat32}) {
    Generator g1(21), g2(21);
    Tensor x = randn({5, 11}, TensorOptions(dt)).requires_grad_();
    Tensor g = randn({5, 11}, TensorOptions(dt));
    Tensor fused = relu_dropout(x, 0.25, true, &g1);
    fused.backward(g);
    Tensor fused_grad = x.grad();
    x.set_grad(Tensor());
    Tensor plain = dropout(relu(x), 0.25, true, &g2);
    plain.backward(g);
    CHECK(equal(fused, plain));
    CHECK(equal(fused_grad, x.grad()));
    CHECK(sum(eq(fused, 0.0)).item() > sum(le(x, 0.0)).item());  // some positives were dropped
  }
}

TEST_CASE("relu_dropout: the backend's fused pass has the bits of relu then dropout (sizes past a task, NaN, -0, strided input)") {
  // Bitwise, so that NaN and the sign of 0 count.
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const Tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.shape() == cb.shape() && ca.dtype() == cb.dtype() &&
           std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
  };
  for (DType dt : {kFloat32, kFloat64}) {
    // 37 x 1001: many Philox batches and parallel tasks, an odd tail.
    Tensor base = randn({37, 1001}, TensorOptions(dt));
    base.select(0, 0).select(0, 0).fill_(std::numeric_limits<double>::quiet_NaN());
    base.select(0, 0).select(0, 1).fill_(-0.0);
    base.select(0, 0).select(0, 2).fill_(std::numeric_limits<double>::infinity());
    for (bool strided : {false, true}) {
      INFO(dtype_name(dt) << (strided ? ", transposed input" : ", contiguous input"));
      Tensor x = (strided ? base.t().contiguous().t() : base).detach().requires_grad_();
      Tensor g = randn({37, 1001}, TensorOptions(dt));
      Generator g1(5), g2(5);
      Tensor fused = relu_dropout(x, 0.3, true, &g1);
      fused.backward(g);
      Tensor fused_grad = x.grad();
      x.set_grad(Tensor());
      Tensor plain = dropout(relu(x), 0.3, true, &g2);
      plain.backward(g);
      CHECK(same_bits(fused, plain));
      CHECK(same_bits(fused_grad, x.grad()));
      // A gradient broadcast to the output's shape (a stride-0 view) takes the same rule.
      x.set_grad(Tensor());
      Generator g3(5);
      relu_dropout(x, 0.3, true, &g3).sum().backward();
      const Tensor sum_grad = x.grad();
      x.set_grad(Tensor());
      Generator g4(5);
      dropout(relu(x), 0.3, true, &g4).sum().backward();
      CHECK(same_bits(sum_grad, x.grad()));
    }
  }
}

// ---------------------------------------------------------------- shape ops
TEST_CASE("transpose gives a view, contiguous a copy (their values are rows of tests/op_table)") {
  const Tensor tr = fx("shp.f64.t").transpose(0, 2);
  CHECK_FALSE(tr.is_contiguous());
  CHECK(tr.contiguous().is_contiguous());
}

// ---------------------------------------------------------------- by hand
TEST_CASE("factories: arange, eye, full") {
  check_matches("arange(5)", arange(5), from_vector<int64_t>({0, 1, 2, 3, 4}, {5}));
  check_matches("arange(2, -3, -2)", arange(2, -3, -2), from_vector<int64_t>({2, 0, -2}, {3}));
  check_matches("arange f32", arange(1, 2, 0.25, kFloat32), from_vector<float>({1, 1.25f, 1.5f, 1.75f}, {4}));
  Tensor r = arange(0, 1, 0.1, kFloat64);  // torch: 10 elements, i * 0.1
  std::vector<double> tenths;
  for (int i = 0; i < 10; ++i) tenths.push_back(i * 0.1);
  kiln::testing::check_matches("arange(0, 1, 0.1)", r, from_vector<double>(tenths, {10}), Tol{0, 0});
  check_matches("arange empty", arange(3, 3), from_vector<int64_t>({}, {0}));
  check_matches("eye(3)", eye(3), from_vector<float>({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  check_matches("eye(2, 3)", eye(2, 3, kFloat64), from_vector<double>({1, 0, 0, 0, 1, 0}, {2, 3}));
  check_matches("eye(3, 2) int", eye(3, 2, kInt64), from_vector<int64_t>({1, 0, 0, 1, 0, 0}, {3, 2}));
  check_matches("full", full({2, 2}, 3.5), from_vector<float>({3.5f, 3.5f, 3.5f, 3.5f}, {2, 2}));
  check_matches("full int", full({3}, -7, kInt64), from_vector<int64_t>({-7, -7, -7}, {3}));
  check_matches("full bool", full({2}, 1, kBool), from_vector<bool>({true, true}, {2}));
  check_matches("zeros", zeros({2}, kFloat64), from_vector<double>({0, 0}, {2}));
  check_matches("ones_like", ones_like(arange(3)), from_vector<int64_t>({1, 1, 1}, {3}));
  check_matches("scalar_tensor", scalar_tensor(2.5, kFloat64), from_vector<double>({2.5}, {}));
  check_matches("tensor 2-D", tensor({{1.0, 2.0}, {3.0, 4.0}}), from_vector<float>({1, 2, 3, 4}, {2, 2}));
}

TEST_CASE("dtype conversions: truncation toward zero, nonzero is true") {
  Tensor f = from_vector<double>({-2.7, -0.5, -0.0, 0.5, 2.7, 3.0, 1e10}, {7});
  check_matches("f64 -> int64", f.to(kInt64), from_vector<int64_t>({-2, 0, 0, 0, 2, 3, 10000000000}, {7}));
  check_matches("f64 -> bool", f.to(kBool), from_vector<bool>({true, true, false, true, true, true, true}, {7}));
  Tensor g = from_vector<float>({-1.9f, 1.9f, 0.0f, std::numeric_limits<float>::quiet_NaN()}, {4});
  check_matches("f32 -> bool", g.to(kBool), from_vector<bool>({true, true, false, true}, {4}));  // NaN != 0
  check_matches("f32 -> int64", g.slice(0, 0, 3).to(kInt64), from_vector<int64_t>({-1, 1, 0}, {3}));
  check_matches("f64 -> f32", from_vector<double>({0.1, 1e40}, {2}).to(kFloat32),
                from_vector<float>({0.1f, std::numeric_limits<float>::infinity()}, {2}));
  Tensor i = from_vector<int64_t>({-3, 0, 5}, {3});
  check_matches("int64 -> f64", i.to(kFloat64), from_vector<double>({-3, 0, 5}, {3}));
  check_matches("int64 -> bool", i.to(kBool), from_vector<bool>({true, false, true}, {3}));
  Tensor b = from_vector<bool>({true, false}, {2});
  check_matches("bool -> f32", b.to(kFloat32), from_vector<float>({1, 0}, {2}));
  check_matches("bool -> int64", b.to(kInt64), from_vector<int64_t>({1, 0}, {2}));
  check_matches("to_dtype", to_dtype(f, kInt64), from_vector<int64_t>({-2, 0, 0, 0, 2, 3, 10000000000}, {7}));
  // Conversions of a non-contiguous view read through its strides.
  Tensor m = arange(0, 6, 1, kFloat64).reshape({2, 3}).t();
  check_matches("strided -> int64", m.to(kInt64), from_vector<int64_t>({0, 3, 1, 4, 2, 5}, {3, 2}));
}

TEST_CASE("result dtypes follow torch's promotion") {
  Tensor f32 = ones({2}), f64 = ones({2}, kFloat64), i64 = ones({2}, kInt64), bl = ones({2}, kBool);
  CHECK(add(f32, f64).dtype() == kFloat64);
  CHECK(add(i64, f32).dtype() == kFloat32);
  CHECK(mul(i64, i64).dtype() == kInt64);
  CHECK(div(i64, i64).dtype() == kFloat32);
  CHECK(add(i64, bl).dtype() == kInt64);
  CHECK(sum(i64).dtype() == kInt64);
  CHECK(sum(bl).dtype() == kInt64);
  CHECK(sum(f32).dtype() == kFloat32);
  CHECK(eq(f32, f64).dtype() == kBool);
  CHECK(lt(i64, 0.5).dtype() == kBool);
  CHECK(amax(i64).dtype() == kInt64);
  CHECK(max(f64, 0).indices.dtype() == kInt64);
  CHECK(argmax(f32).dtype() == kInt64);
  CHECK(where(eq(f32, f32), i64, f32).dtype() == kFloat32);
  CHECK(masked_fill(i64, eq(i64, i64), 0.5).dtype() == kInt64);  // masked_fill keeps x's dtype
  CHECK(masked_fill(i64, eq(i64, i64), 0.5).to_vector<int64_t>() == std::vector<int64_t>{0, 0});
}

TEST_CASE("where and masked_fill over long runs pick each element by its own condition") {
  // 1,003 elements: the vectorized runs and their tail; a side broadcast from one value
  // (masked_fill's), and both; float32, float64 and int64.
  manual_seed(5);
  const int64_t n = 1003;
  const Tensor cond = rand({n}) > 0.5;
  const std::vector<int64_t> c = cond.to(kInt64).to_vector<int64_t>();
  for (DType dt : {kFloat32, kFloat64, kInt64}) {
    CAPTURE(dt);
    const Tensor a = (randn({n}) * 100.0).to(dt), b = (randn({n}) * 100.0).to(dt);
    const std::vector<double> av = a.to(kFloat64).to_vector<double>(), bv = b.to(kFloat64).to_vector<double>();
    const std::vector<double> both = where(cond, a, b).to(kFloat64).to_vector<double>();
    const std::vector<double> filled = masked_fill(a, cond, 7.0).to(kFloat64).to_vector<double>();
    const std::vector<double> scalars = where(cond, full({1}, 3.0, TensorOptions(dt)), full({1}, -2.0, TensorOptions(dt)))
                                            .to(kFloat64)
                                            .to_vector<double>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      wrong += both[i] != (c[i] ? av[i] : bv[i]);
      wrong += filled[i] != (c[i] ? 7.0 : av[i]);
      wrong += scalars[i] != (c[i] ? 3.0 : -2.0);
    }
    CHECK(wrong == 0);
  }
}
