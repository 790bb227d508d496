// The graph and the backward engine: accumulation, retain_graph, grad mode, detach,
// retain_grad, deep graphs, memory release and the version counter.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;

namespace {

std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }

int64_t allocated() { return memory_stats().allocated_bytes; }

int64_t nbytes(const Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

TEST_CASE("backward fills .grad() of leaves and accumulates across calls") {
  Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
  Tensor w = tensor({4.0, 5.0, 6.0}, TensorOptions().requires_grad());
  Tensor c = tensor({1.0, 1.0, 1.0});  // no grad
  CHECK(x.is_leaf());
  CHECK_FALSE(x.grad().defined());

  Tensor y = (x * w + c).sum();
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  y.backward();
  CHECK(vec(x.grad()) == std::vector<double>{4, 5, 6});
  CHECK(vec(w.grad()) == std::vector<double>{1, 2, 3});
  CHECK_FALSE(c.grad().defined());
  CHECK(x.grad().shape() == x.shape());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK_FALSE(x.grad().requires_grad());

  // A second graph adds into the same .grad().
  (x * 2.0).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{6, 7, 8});
  CHECK(vec(w.grad()) == std::vector<double>{1, 2, 3});
}

TEST_CASE("gradients through shared subexpressions sum") {
  Tensor x = tensor({1, 2, 3}, TensorOptions(kFloat64).requires_grad());
  SUBCASE("x used twice in one op") {
    (x * x).sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{2, 4, 6});
  }
  SUBCASE("x used in several branches") {
    Tensor y = x * x * x + x * 3.0 + x;  // d/dx = 3x^2 + 4
    y.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{7, 16, 31});
  }
  SUBCASE("an intermediate used twice (a diamond)") {
    Tensor a = x + 1.0;          // shared
    Tensor b = a * a + exp(a);   // d/da = 2a + e^a
    b.sum().backward();
    std::vector<double> g = vec(x.grad());
    for (int i = 0; i < 3; ++i) CHECK(g[i] == doctest::Approx(2 * (i + 2) + std::exp(i + 2.0)));
  }
  SUBCASE("the same tensor as both matmul operands") {
    Tensor m = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_();
    matmul(m, m).sum().backward();  // d/dM sum(M M) = 1 M^T + M^T 1
    Tensor ones2 = ones({2, 2}, kFloat64);
    Tensor expect = matmul(ones2, m.detach().t()) + matmul(m.detach().t(), ones2);
    CHECK(equal(m.grad(), expect));
  }
}

TEST_CASE("retain_graph allows a second backward; the grads double") {
  Tensor x = tensor({1.0, 2.0}, TensorOptions().requires_grad());
  Tensor y = (exp(x) * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  std::vector<double> first = vec(x.grad());
  CHECK(first[0] == doctest::Approx(2 * std::exp(1.0)));  // (x + 1) e^x
  y.backward(Tensor(), true);
  std::vector<double> second = vec(x.grad());
  for (size_t i = 0; i < 2; ++i) CHECK(second[i] == doctest::Approx(2 * first[i]));
  y.backward();  // the last one frees the graph
  for (size_t i = 0; i < 2; ++i) CHECK(vec(x.grad())[i] == doctest::Approx(3 * first[i]));
  CHECK(error_of([&] { y.backward(); }).find("second time") != std::string::npos);
}

TEST_CASE("backward of a non-scalar with an explicit gradient") {
  Tensor x = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, TensorOptions().requires_grad());
  Tensor y = x * x;  // (2, 3)
  Tensor g = tensor({{1, 0, 2}, {0, 1, 0.5}});
  y.backward(g);
  CHECK(vec(x.grad()) == std::vector<double>{2, 0, 12, 0, 10, 6});  // 2 x g
  // A one-element non-scalar works without one.
  Tensor z = tensor({3.0}, TensorOptions().requires_grad());
  (z * 2.0).backward();
  CHECK(vec(z.grad()) == std::vector<double>{2});
}

TEST_CASE("NoGradGuard stops recording") {
  Tensor x = ones({3}, TensorOptions().requires_grad());
  CHECK(is_grad_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(is_grad_enabled());
    Tensor y = x * 2.0 + x;
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    Tensor z = matmul(x.view({1, 3}), x.view({3, 1}));
    CHECK(z.grad_fn() == nullptr);
    CHECK_FALSE(z.requires_grad());
    {
      EnableGradGuard enable;
      CHECK(is_grad_enabled());
      CHECK((x * 2.0).grad_fn() != nullptr);
    }
    CHECK_FALSE(is_grad_enabled());
    {
      NoGradGuard nested;
      CHECK_FALSE(is_grad_enabled());
    }
    CHECK_FALSE(is_grad_enabled());
  }
  CHECK(is_grad_enabled());
  Tensor y = x * 2.0;
  CHECK(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "mul");
  CHECK(y.requires_grad());
  // The leaf keeps requiring grad throughout.
  CHECK(x.requires_grad());
}

TEST_CASE("detach() shares storage and cuts the graph") {
  Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  CHECK(d.same_storage(y));
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.is_leaf());
  CHECK(vec(d) == vec(y));
  // No gradient flows through the detached branch.
  (x * d).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{2, 4, 6});
  // Detaching a leaf gives a tensor that doesn't require grad, same data.
  Tensor xd = x.detach();
  CHECK_FALSE(xd.requires_grad());
  CHECK(xd.same_storage(x));
  CHECK(x.requires_grad());
}

TEST_CASE("requires_grad_ turns recording on for a leaf") {
  Tensor x = tensor({1.0, 2.0});
  CHECK_FALSE(x.requires_grad());
  CHECK((x * 2.0).grad_fn() == nullptr);
  x.requires_grad_();
  CHECK(x.requires_grad());
  CHECK(x.is_leaf());
  Tensor y = (x * 3.0).sum();
  CHECK(y.grad_fn() != nullptr);
  y.backward();
  CHECK(vec(x.grad()) == std::vector<double>{3, 3});
  x.requires_grad_(false);
  CHECK_FALSE(x.requires_grad());
  CHECK((x * 2.0).grad_fn() == nullptr);
  // Factories can make a leaf that requires grad directly.
  Tensor z = zeros({2, 2}, TensorOptions(kFloat64).requires_grad());
  CHECK(z.requires_grad());
  CHECK(z.is_leaf());
  CHECK(z.dtype() == kFloat64);
  Tensor r = randn({3}, TensorOptions().requires_grad());
  CHECK(r.requires_grad());
  Tensor f = from_vector<float>({1, 2}, {2}, TensorOptions().requires_grad());
  CHECK(f.requires_grad());
  CHECK(f.is_leaf());
}

TEST_CASE("zero_grad: set to none, or zeroed in place") {
  Tensor x = tensor({1.0, 2.0}, TensorOptions().requires_grad());
  (x * x).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{2, 4});

  Tensor g = x.grad();
  x.zero_grad(/*set_to_none=*/false);
  CHECK(x.grad().defined());
  CHECK(x.grad().same_storage(g));
  CHECK(vec(x.grad()) == std::vector<double>{0, 0});
  (x * 3.0).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{3, 3});

  x.zero_grad();  // set_to_none by default
  CHECK_FALSE(x.grad().defined());
  (x * 5.0).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{5, 5});

  Tensor never = ones({2}, TensorOptions().requires_grad());
  never.zero_grad();  // no grad yet: nothing to do
  never.zero_grad(false);
  CHECK_FALSE(never.grad().defined());
}

TEST_CASE("retain_grad() keeps the gradient of a non-leaf") {
  Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
  Tensor y = x * 2.0;
  Tensor z = y * y;
  y.retain_grad();
  z.sum().backward();
  REQUIRE(y.grad().defined());
  CHECK(vec(y.grad()) == std::vector<double>{4, 8, 12});  // 2y
  CHECK(vec(x.grad()) == std::vector<double>{8, 16, 24});
  // Without retain_grad a non-leaf has no .grad().
  CHECK_FALSE(z.grad().defined());
  // retain_grad on a leaf is harmless.
  x.retain_grad();
  CHECK(vec(x.grad()) == std::vector<double>{8, 16, 24});
}

TEST_CASE("retain_grad() accumulates with retain_graph") {
  Tensor x = tensor({1.0, 2.0}, TensorOptions().requires_grad());
  Tensor y = x * 3.0;
  y.retain_grad();
  Tensor s = y.sum();
  s.backward(Tensor(), true);
  s.backward();
  CHECK(vec(y.grad()) == std::vector<double>{2, 2});
  CHECK(vec(x.grad()) == std::vector<double>{6, 6});
}

TEST_CASE("a chain of 100,000 ops: backward and destruction without stack overflow") {
  const int n = 100000;
  SUBCASE("y = y + x: gradient n + 1") {
    Tensor x = tensor({1.0}, TensorOptions(kFloat64).requires_grad());
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = y + x;
    CHECK(y.item() == n + 1.0);
    y.backward();
    CHECK(x.grad().item() == n + 1.0);
    // y (and the released chain behind it) is destroyed here.
  }
  SUBCASE("y = y * 1.0000001: gradient 1.0000001^n") {
    Tensor x = tensor({2.0}, TensorOptions(kFloat64).requires_grad());
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = y * 1.0000001;
    y.backward();
    CHECK(x.grad().item() == doctest::Approx(std::pow(1.0000001, n)).epsilon(1e-9));
    CHECK(y.item() == doctest::Approx(2.0 * std::pow(1.0000001, n)).epsilon(1e-9));
  }
  SUBCASE("a graph of 100,000 ops dropped without backward") {
    Tensor x = ones({4}, TensorOptions().requires_grad());
    int64_t before = allocated();
    {
      Tensor y = x;
      for (int i = 0; i < n; ++i) y = tanh(y);  // each node saves a tensor
      CHECK(allocated() > before);
    }
    CHECK(allocated() == before);
    CHECK_FALSE(x.grad().defined());
  }
  SUBCASE("retain_graph on a deep chain, then destruction") {
    Tensor x = tensor({1.0}, TensorOptions(kFloat64).requires_grad());
    Tensor y = x;
    for (int i = 0; i < n; ++i) y = y - x * 0.5;
    y.backward(Tensor(), true);
    y.backward(Tensor(), true);
    CHECK(x.grad().item() == doctest::Approx(2 * (1.0 - 0.5 * n)));
  }
}

TEST_CASE("memory: the graph is freed after backward; only .grad() remains") {
  Tensor x = randn({8, 16}, TensorOptions().requires_grad());
  Tensor w = randn({16, 4}, TensorOptions().requires_grad());
  Tensor b = randn({4}, TensorOptions().requires_grad());
  Tensor frozen = randn({8, 4});  // no grad
  const int64_t before = allocated();
  {
    Tensor h = tanh(matmul(x, w) + b);                 // (8, 4)
    Tensor s = softmax(h * frozen, -1);
    Tensor n = layer_norm(exp(s).t().contiguous(), {8});
    Tensor parts = cat({n, frozen.t()}, 1).view({4, 2, 8}).transpose(0, 1).sum({0});
    Tensor loss = (parts * parts).mean() + h.select(0, 2).sum() * 0.1;
    CHECK(allocated() > before);
    loss.backward();
  }
  const int64_t grads = nbytes(x.grad()) + nbytes(w.grad()) + nbytes(b.grad());
  CHECK(grads == (8 * 16 + 16 * 4 + 4) * 4);
  CHECK(allocated() == before + grads);
  // And dropping the grads gives everything back.
  x.zero_grad();
  w.zero_grad();
  b.zero_grad();
  CHECK(allocated() == before);
}

TEST_CASE("memory: a leaf's gradient holds only its own bytes") {
  // The gradient of a cat input is a slice of the gradient of the result: the leaf
  // must not keep the whole buffer alive.
  Tensor x = randn({2, 3}, TensorOptions().requires_grad());
  Tensor other = randn({50, 3});
  const int64_t before = allocated();
  {
    Tensor y = cat({x, other}, 0);
    (y * 2.0).sum().backward();
  }
  CHECK(vec(x.grad()) == std::vector<double>(6, 2.0));
  CHECK(allocated() == before + nbytes(x));

  Tensor z = randn({2, 3}, TensorOptions().requires_grad());
  const int64_t before2 = allocated();
  {
    Tensor y = cat({other, z}, 0);  // z's slice is at an offset
    (y * 3.0).sum().backward();
  }
  CHECK(vec(z.grad()) == std::vector<double>(6, 3.0));
  CHECK(z.grad().offset() == 0);
  CHECK(allocated() == before2 + nbytes(z));
}

TEST_CASE("memory: a graph dropped without backward frees everything") {
  Tensor x = randn({32, 32}, TensorOptions().requires_grad());
  Tensor w = randn({32, 32}, TensorOptions().requires_grad());
  const int64_t before = allocated();
  {
    Tensor y = relu(matmul(x, w));
    Tensor z = log_softmax(y, 1) * sigmoid(y);
    Tensor loss = cross_entropy(z, zeros({32}, kInt64)) + z.pow(2.0).mean();
    CHECK(allocated() > before);
  }
  CHECK(allocated() == before);
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());

  // Also when backward ran with retain_graph and the graph is dropped afterwards.
  {
    Tensor loss = (exp(x) * w).sum();
    loss.backward(Tensor(), true);
  }
  CHECK(allocated() == before + nbytes(x) + nbytes(w));
}

TEST_CASE("version counter: in-place change of what backward needs") {
  SUBCASE("a saved input modified under NoGradGuard makes backward throw") {
    Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
    Tensor w = tensor({4.0, 5.0, 6.0}, TensorOptions().requires_grad());
    Tensor y = (x * w).sum();  // saves both
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    std::string msg = error_of([&] { y.backward(); });
    CHECK(msg.find("[mul]") == 0);
    CHECK(msg.find("modified by an inplace operation") != std::string::npos);
  }
  SUBCASE("a saved output modified makes backward throw") {
    Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
    Tensor y = sigmoid(x);  // saves its output
    Tensor s = y.sum();
    {
      NoGradGuard no_grad;
      y.zero_();
    }
    CHECK(error_of([&] { s.backward(); }).find("[sigmoid]") == 0);
  }
  SUBCASE("modifying a tensor backward does not need is fine") {
    Tensor x = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
    Tensor c = tensor({4.0, 5.0, 6.0});
    Tensor y = (x * c).sum();  // only c is saved (x's own gradient needs c, c needs none)
    {
      NoGradGuard no_grad;
      x.add_(10.0);
    }
    Tensor d = tensor({1.0, 1.0, 1.0});
    Tensor z = (x + d).sum();  // add saves nothing
    d.mul_(5.0);
    CHECK(error_of([&] { y.backward(); }).empty());
    CHECK(vec(x.grad()) == std::vector<double>{4, 5, 6});
    CHECK(error_of([&] { z.backward(); }).empty());
    CHECK(vec(x.grad()) == std::vector<double>{5, 6, 7});
  }
  SUBCASE("set() and every in-place op bump the version") {
    Tensor t = zeros({3});
    uint64_t v = t.version();
    t.set({0}, 1.0);
    CHECK(t.version() == v + 1);
    t.add_(1.0);
    t.mul_(ones({3}));
    t.copy_(ones({3}));
    t.fill_(2.0);
    t.uniform_();
    CHECK(t.version() == v + 6);
    // Out-of-place ops don't.
    Tensor u = t * 2.0;
    CHECK(t.version() == v + 6);
    CHECK(u.version() == 0);
  }
}

TEST_CASE("views share the version counter with their base") {
  Tensor base = zeros({2, 3});
  Tensor v = base.view({3, 2});
  Tensor row = base.select(0, 1);
  Tensor tr = base.t();
  uint64_t v0 = base.version();
  CHECK(v.version() == v0);
  base.add_(1.0);
  CHECK(v.version() == v0 + 1);
  CHECK(row.version() == v0 + 1);
  CHECK(tr.version() == v0 + 1);
  row.mul_(3.0);
  CHECK(base.version() == v0 + 2);
  CHECK(v.version() == v0 + 2);
  CHECK(base.at({1, 2}) == 3.0);
  CHECK(base.at({0, 2}) == 1.0);
  // A detached tensor is a view too; a clone is not.
  Tensor d = base.detach();
  Tensor c = base.clone();
  d.zero_();
  CHECK(base.version() == v0 + 3);
  CHECK(c.version() == 0);

  // Saved for backward through a view, modified through the base: caught.
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, TensorOptions().requires_grad());
  Tensor p = zeros({2, 2});
  Tensor y = (x.view({2, 2}) * p.t()).sum();  // saves the view p.t()
  p.fill_(1.0);
  CHECK(error_of([&] { y.backward(); }).find("modified by an inplace operation") != std::string::npos);
}

TEST_CASE("a leaf receiving gradient through a broadcast gets its own shape") {
  Tensor x = ones({2, 3}, TensorOptions(kFloat64).requires_grad());
  Tensor row = tensor({1, 2, 3}, TensorOptions(kFloat64).requires_grad());         // (3,)
  Tensor col = from_vector<double>({1, 2}, {2, 1}, TensorOptions(kFloat64).requires_grad());  // (2, 1)
  Tensor s = scalar_tensor(2.0, TensorOptions(kFloat64).requires_grad());          // ()
  Tensor one3 = ones({1, 3}, TensorOptions(kFloat64).requires_grad());             // (1, 3)
  Tensor y = (x * row + col) * s - one3;
  y.sum().backward();
  CHECK(x.grad().shape() == Shape{2, 3});
  CHECK(row.grad().shape() == Shape{3});
  CHECK(col.grad().shape() == Shape{2, 1});
  CHECK(s.grad().shape() == Shape{});
  CHECK(one3.grad().shape() == Shape{1, 3});
  CHECK(vec(x.grad()) == std::vector<double>{2, 4, 6, 2, 4, 6});
  CHECK(vec(row.grad()) == std::vector<double>{4, 4, 4});  // sum over 2 rows of x * s
  CHECK(vec(col.grad()) == std::vector<double>{6, 6});     // 3 columns * s
  CHECK(s.grad().item() == 21.0);                          // sum(x * row + col) = 12 + 9
  CHECK(vec(one3.grad()) == std::vector<double>{-2, -2, -2});

  // Through expand, and with a batched matmul whose batch dims broadcast.
  Tensor e = tensor({5.0}, TensorOptions().requires_grad());
  e.expand({4, 3}).sum().backward();
  CHECK(e.grad().shape() == Shape{1});
  CHECK(e.grad().item() == 12.0);
  Tensor a = ones({3, 2, 4}, TensorOptions().requires_grad());
  Tensor m = ones({4, 5}, TensorOptions().requires_grad());
  Tensor bm = ones({1, 4, 5}, TensorOptions().requires_grad());
  (matmul(a, m) + matmul(a, bm)).sum().backward();
  CHECK(m.grad().shape() == Shape{4, 5});
  CHECK(bm.grad().shape() == Shape{1, 4, 5});
  CHECK(vec(m.grad()) == std::vector<double>(20, 6.0));
  CHECK(vec(bm.grad()) == std::vector<double>(20, 6.0));
  CHECK(a.grad().shape() == Shape{3, 2, 4});
}

TEST_CASE("gradients keep the leaf's dtype through conversions") {
  Tensor x = tensor({1.0, 2.0}, TensorOptions().requires_grad());  // float32
  Tensor y = x.to(kFloat64) * from_vector<double>({3, 4}, {2});
  CHECK(y.dtype() == kFloat64);
  y.sum().backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(vec(x.grad()) == std::vector<double>{3, 4});
  // A conversion to an integer type cuts the graph.
  CHECK_FALSE(x.to(kInt64).requires_grad());
}

TEST_CASE("backward through views and in-graph reshapes") {
  Tensor x = arange(0, 6, 1, kFloat64).requires_grad_();
  Tensor y = x.view({2, 3}).t().slice(0, 0, 3, 2).select(1, 1);  // x[3], x[5]
  CHECK(vec(y) == std::vector<double>{3, 5});
  (y * tensor({10, 20}, kFloat64)).sum().backward();
  CHECK(vec(x.grad()) == std::vector<double>{0, 0, 0, 10, 0, 20});
}

TEST_CASE("gradients of the chunks of one tensor are gathered into one buffer, in place") {
  // The backward engine adds a slice's gradient straight into its window of the buffer
  // already gathered for the sliced tensor (q, k, v of one projection), and sums into a
  // buffer in place when it alone holds it. The values must be those of the plain sums,
  // and nothing anyone else can see may change.
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, TensorOptions().requires_grad());
  Tensor y = x * 1.0;
  y.retain_grad();
  std::vector<Tensor> p = chunk(y, 3, 0);
  (p[0] * 2.0 + p[1] * 3.0 + p[2] * p[2]).sum().backward();
  CHECK(vec(y.grad()) == std::vector<double>{2, 2, 3, 3, 10, 12});
  CHECK(vec(x.grad()) == std::vector<double>{2, 2, 3, 3, 10, 12});

  // Only some chunks used: the others get zeros; overlapping windows add up.
  Tensor a = tensor({1.0, 1.0, 1.0, 1.0}, TensorOptions().requires_grad());
  (a.narrow(0, 1, 2) * 5.0 + a.narrow(0, 2, 2) * 7.0).sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{0, 5, 12, 7});
  a.zero_grad(/*set_to_none=*/true);
  (a.narrow(0, 0, 2) * 4.0).sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{4, 4, 0, 0});

  // A gradient handed to backward by the caller is never changed in place.
  Tensor b = tensor({1.0, 2.0, 3.0, 4.0}, TensorOptions().requires_grad());
  Tensor g = tensor({10.0, 20.0, 30.0, 40.0});
  cat({b.narrow(0, 2, 2), b.narrow(0, 0, 2)}, 0).backward(g);
  CHECK(vec(g) == std::vector<double>{10, 20, 30, 40});
  CHECK(vec(b.grad()) == std::vector<double>{30, 40, 10, 20});

  // The same gradient reaching one tensor twice (add's backward passes it on as is) is
  // summed into a new buffer, not into itself.
  Tensor c = tensor({1.0, 2.0}, TensorOptions().requires_grad());
  Tensor h = tensor({3.0, 4.0});
  (c + c).backward(h);
  CHECK(vec(c.grad()) == std::vector<double>{6, 8});
  CHECK(vec(h) == std::vector<double>{3, 4});

  // A retained gradient is not changed by what is later summed with it: y's gradient
  // flows on to x as a view of itself, and x gets a second gradient from elsewhere.
  Tensor x0 = tensor({1.0, 2.0, 3.0}, TensorOptions().requires_grad());
  Tensor x1 = x0 * 1.0;
  Tensor y1 = x1.reshape({3, 1});
  y1.retain_grad();
  ((y1 * 2.0).sum() + (x1 * 5.0).sum()).backward();
  CHECK(vec(y1.grad()) == std::vector<double>{2, 2, 2});
  CHECK(vec(x0.grad()) == std::vector<double>{7, 7, 7});
}

TEST_CASE("chunk's backward allocates one buffer for the chunked tensor, not one per chunk") {
  Tensor x = randn({240}, TensorOptions().requires_grad());
  // A non-leaf, so that the chunks' gradients meet in the engine; a view, so that x's
  // gradient is y's buffer itself.
  Tensor y = x.view({4, 60});
  std::vector<Tensor> p = chunk(y, 6, 1);
  Tensor loss = p[0].sum();
  for (int i = 1; i < 6; ++i) loss = loss + (p[static_cast<size_t>(i)] * static_cast<double>(i + 1)).sum();
  reset_peak_memory();
  const int64_t base = allocated();
  loss.backward();
  // At most y's gradient buffer (which becomes x's gradient) and a few chunk-sized
  // gradients. A zero buffer of y's size per chunk needs two of y's size at once.
  const int64_t full = nbytes(x), part = full / 6;
  CHECK(memory_stats().peak_bytes - base <= full + 3 * part);
  Tensor gx = x.grad().view({4, 60});
  CHECK(vec(gx.narrow(1, 10, 1)) == std::vector<double>(4, 2.0));
  CHECK(vec(gx.narrow(1, 59, 1)) == std::vector<double>(4, 6.0));
}

TEST_CASE("linear's backward adds its input gradient into a buffer already gathered for the input") {
  // out = linear(h, W) + 3h: the 3h branch's gradient reaches h first; linear's GEMM then
  // accumulates onto it (BLAS beta = 1) instead of writing a second (64, 32) tensor.
  Tensor x = randn({2048}, TensorOptions().requires_grad());
  Tensor w = randn({32, 32}, TensorOptions().requires_grad());
  Tensor h = x.view({64, 32});
  Tensor loss = (linear(h, w) + h * 3.0).sum();
  reset_peak_memory();
  const int64_t base = allocated();
  loss.backward();
  // Live at the peak: sum's gradient (64, 32), the 3h branch's (h's buffer), W's
  // gradient and the scalar seed; a separate linear input gradient would be one more.
  const int64_t full = nbytes(x);
  CHECK(memory_stats().peak_bytes - base <= 2 * full + nbytes(w) + 64);
  // d/dh: ones (64, 32) @ W + 3; d/dW: ones (32, 64) @ h.
  Tensor expect_x = (matmul(ones({64, 32}), w.detach()) + 3.0).view({2048});
  CHECK(allclose(x.grad(), expect_x, 1e-5, 1e-5));
  CHECK(allclose(w.grad(), matmul(ones({32, 64}), h.detach()), 1e-5, 1e-5));
}
