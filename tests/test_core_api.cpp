// The core Tensor API of issue 12: comparison and in-place operators, in-place ops under
// autograd with torch's rules (recorded on the graph, views rebased, saved tensors
// checked, leaves protected), tensor literals, single int dims and printing shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ops/op_helpers.h"
#include "test_util.h"

// ------------------------------------------------------------------ printing shapes
// Code outside namespace kiln, without `using namespace kiln`, with an operator<< of its
// own that hides every other by ordinary lookup: Shape's must still be found.
namespace user_code {
struct Other {};
inline std::ostream& operator<<(std::ostream& os, Other) { return os << "other"; }
inline std::string print_sizes(const kiln::Tensor& x) {
  std::ostringstream os;
  os << x.sizes() << ' ' << Other{};
  return os.str();
}
}  // namespace user_code

using namespace kiln;
using kiln::testing::error_of;

namespace {

std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }

TensorOptions f64_grad() { return TensorOptions(kFloat64).requires_grad(); }

// A float64 leaf with the given values and shape.
Tensor leaf(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape, f64_grad()); }

}  // namespace

TEST_CASE("a shape prints like torch.Size, as kiln.Size, with or without using namespace kiln") {
  CHECK(user_code::print_sizes(zeros({2, 3})) == "kiln.Size([2, 3]) other");
  CHECK(user_code::print_sizes(zeros({})) == "kiln.Size([]) other");
  CHECK(user_code::print_sizes(zeros({0, 4, 1})) == "kiln.Size([0, 4, 1]) other");
  std::ostringstream os;
  os << Shape{5};
  CHECK(os.str() == "kiln.Size([5])");
}

TEST_CASE("Shape is a vector: every use of one still works, both ways") {
  Shape s = {2, 3};
  std::vector<int64_t> v = s;  // to a vector
  Shape back = v;              // and back
  CHECK(back == s);
  CHECK(s == std::vector<int64_t>{2, 3});
  s.push_back(4);
  CHECK(s.size() == 3);
  CHECK(Shape(s.begin(), s.end() - 1) == Shape{2, 3});
  CHECK(Shape(3, 1) == Shape{1, 1, 1});
  CHECK(shape_str(s) == "(2, 3, 4)");
  CHECK(zeros(v).shape() == Shape{2, 3});
}

// ------------------------------------------------------------------ operators
TEST_CASE("== and != are elementwise, with tensors and with scalars on either side") {
  Tensor a = tensor({1, 0, 3});
  Tensor b = tensor({1, 2, 3});
  Tensor eq_t = a == b;
  CHECK(eq_t.dtype() == kBool);
  CHECK(vec(eq_t) == std::vector<double>{1, 0, 1});
  CHECK(vec(a != b) == std::vector<double>{0, 1, 0});
  CHECK(vec(a == 0) == std::vector<double>{0, 1, 0});
  CHECK(vec(0 == a) == std::vector<double>{0, 1, 0});
  CHECK(vec(a != 0) == std::vector<double>{1, 0, 1});
  CHECK(vec(3 != a) == std::vector<double>{1, 1, 0});
  // Broadcasting, and a mask the way a padding mask is built.
  Tensor src = tensor({{5, 0, 0}, {7, 8, 0}});
  Tensor pad_mask = (src != 0).unsqueeze(1);
  CHECK(pad_mask.shape() == Shape{2, 1, 3});
  CHECK(vec(pad_mask) == std::vector<double>{1, 0, 0, 1, 1, 0});
  CHECK(vec(tensor({{1}, {2}}) == tensor({1, 2})) == std::vector<double>{1, 0, 0, 1});
  // NaN is unequal to everything, itself included; -0 equals 0.
  Tensor f = tensor({std::nan(""), -0.0, 1.5});
  CHECK(vec(f == f) == std::vector<double>{0, 1, 1});
  CHECK(vec(f != f) == std::vector<double>{1, 0, 0});
  CHECK(vec(f == 0) == std::vector<double>{0, 1, 0});
}

TEST_CASE("comparisons with the scalar on the left, and the scalar methods") {
  Tensor x = tensor({-1.0, 0.5, 2.0});
  CHECK(vec(0.5 < x) == std::vector<double>{0, 0, 1});
  CHECK(vec(0.5 <= x) == std::vector<double>{0, 1, 1});
  CHECK(vec(0.5 > x) == std::vector<double>{1, 0, 0});
  CHECK(vec(0.5 >= x) == std::vector<double>{1, 1, 0});
  CHECK(vec(x.eq(0.5)) == std::vector<double>{0, 1, 0});
  CHECK(vec(x.ne(0.5)) == std::vector<double>{1, 0, 1});
  CHECK(vec(x.lt(0)) == std::vector<double>{1, 0, 0});
  CHECK(vec(x.le(0.5)) == std::vector<double>{1, 1, 0});
  CHECK(vec(x.gt(0)) == std::vector<double>{0, 1, 1});
  CHECK(vec(x.ge(2)) == std::vector<double>{0, 0, 1});
  CHECK(x.eq(0).dtype() == kBool);
  // An int tensor against a fractional scalar compares as float, as in torch.
  CHECK(vec(tensor({0, 1, 2}) < 1.5) == std::vector<double>{1, 1, 0});
  CHECK(vec(-x) == std::vector<double>{1, -0.5, -2});
}

TEST_CASE("in-place operators with a tensor and with a scalar") {
  Tensor x = tensor({1.0, 2.0, 3.0});
  x += tensor({1.0, 1.0, 1.0});
  CHECK(vec(x) == std::vector<double>{2, 3, 4});
  x -= 1;
  CHECK(vec(x) == std::vector<double>{1, 2, 3});
  x *= tensor({2.0});  // broadcast
  CHECK(vec(x) == std::vector<double>{2, 4, 6});
  x /= 2;
  CHECK(vec(x) == std::vector<double>{1, 2, 3});
  x -= tensor({1.0, 1.0, 1.0});
  x *= 3;
  x += 0.5;
  x /= tensor({1.0, 2.0, 4.0});
  CHECK(vec(x) == std::vector<double>{0.5, 3.5 / 2, 6.5 / 4});
  // On a temporary view, as x.narrow(0, 0, 2) += 1 in libtorch: writes through to x.
  Tensor y = zeros({2, 3});
  y.narrow(0, 1, 1) += 1;
  y.select(1, 2) *= 0;
  CHECK(vec(y) == std::vector<double>{0, 0, 0, 1, 1, 0});
  CHECK(y.version() == 2);
  // An int tensor takes an integer update; /= into it is true division, refused.
  Tensor i = tensor({1, 2});
  i += 1;
  CHECK(i.dtype() == kInt64);
  CHECK(vec(i) == std::vector<double>{2, 3});
  CHECK(error_of([&] { i /= 2; }).find("[div_] true division into a int64 tensor") == 0);
  CHECK(error_of([&] { i += tensor({0.5, 0.5}); }).find("[add_] result type float32 can't be cast") == 0);
}

// ------------------------------------------------------------------ in-place under autograd
TEST_CASE("masked_fill_ on a matmul output is recorded (the seed's attention scores)") {
  Tensor q = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor k = leaf({1, -1, 0, 2, 1, 1}, {2, 3});
  Tensor mask = tensor({{false, true}, {false, false}});
  Tensor scores = matmul(q, k.t());
  auto* old_fn = scores.grad_fn().get();
  scores.masked_fill_(mask, -1e9);
  CHECK(scores.grad_fn().get() != old_fn);
  CHECK(std::string(scores.grad_fn()->name()) == "masked_fill_");
  CHECK(scores.grad_fn()->next[0].get() == old_fn);  // the edge to matmul
  softmax(scores, -1).select(1, 0).sum().backward();

  // The same through the out-of-place op.
  Tensor q2 = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor k2 = leaf({1, -1, 0, 2, 1, 1}, {2, 3});
  softmax(masked_fill(matmul(q2, k2.t()), mask, -1e9), -1).select(1, 0).sum().backward();
  CHECK(allclose(q.grad(), q2.grad(), 1e-12, 1e-12));
  CHECK(allclose(k.grad(), k2.grad(), 1e-12, 1e-12));
  CHECK(vec(q.grad()).size() == 6);
}

TEST_CASE("an operand that requires grad makes self part of the graph") {
  SUBCASE("copy_") {
    Tensor y = leaf({1, 2, 3}, {3});
    Tensor x = zeros({3}, kFloat64);
    x.copy_(y);
    CHECK(x.requires_grad());
    CHECK_FALSE(x.is_leaf());
    (x * tensor({1.0, 2.0, 3.0}, kFloat64)).sum().backward();
    CHECK(vec(y.grad()) == std::vector<double>{1, 2, 3});
  }
  SUBCASE("add_ with a broadcast operand of another dtype") {
    Tensor y = from_vector<float>({1, 2}, {2, 1}, TensorOptions(kFloat32).requires_grad());
    Tensor x = ones({2, 3}, kFloat64);
    x.add_(y, 2.0);
    CHECK(x.requires_grad());
    x.sum().backward();
    CHECK(y.grad().dtype() == kFloat32);
    CHECK(y.grad().shape() == Shape{2, 1});
    CHECK(vec(y.grad()) == std::vector<double>{6, 6});
  }
  SUBCASE("copy_ from another dtype") {
    Tensor y = leaf({1, 2}, {2});
    Tensor x = zeros({2});  // float32
    x.copy_(y);
    (x * 3.0).sum().backward();
    CHECK(y.grad().dtype() == kFloat64);
    CHECK(vec(y.grad()) == std::vector<double>{3, 3});
  }
}

TEST_CASE("in-place ops on a non-leaf give the right gradients") {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({4, 5, 6}, {3});
  Tensor y = a * 2.0;
  y.mul_(b);   // y = 2ab
  y.add_(a);   // y = 2ab + a
  y.sub_(b, 0.5);
  y.div_(2.0);  // y = ab + a/2 - b/4
  y += 1.0;
  y.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{4.5, 5.5, 6.5});     // b + 1/2
  CHECK(vec(b.grad()) == std::vector<double>{0.75, 1.75, 2.75});  // a - 1/4
  CHECK(vec(y.detach()) == std::vector<double>{1 * 4 + 0.5 - 1 + 1, 2 * 5 + 1 - 1.25 + 1, 3 * 6 + 1.5 - 1.5 + 1});
}

TEST_CASE("an op's result is its own base even when its forward made it as a view under NoGradGuard") {
  // flip runs its gathers under NoGradGuard, then records its node on their result.
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor y = flip(a, {0});
  y.mul_(2.0);
  y.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{2, 2, 2});
  // The same when the input needs no gradient (the op records nothing) and the in-place
  // operand does, and for index_select's result made under NoGradGuard: each is a fresh
  // tensor, as in torch, so the in-place op is recorded on it.
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor f = flip(from_vector<double>({4, 5, 6}, {3}), {0});
  f.mul_(w);
  f.sum().backward();
  CHECK(vec(w.grad()) == std::vector<double>{6, 5, 4});
  Tensor picked;
  {
    NoGradGuard no_grad;
    picked = index_select(from_vector<double>({4, 5, 6}, {3}), 0, from_vector<int64_t>({2, 0}, {2}));
  }
  Tensor v = leaf({1, 2}, {2});
  picked.mul_(v);
  picked.sum().backward();
  CHECK(vec(v.grad()) == std::vector<double>{6, 4});
}

TEST_CASE("fill_ and zero_ on a non-leaf cut the old value's gradient to zero") {
  Tensor a = leaf({1, 2}, {2});
  Tensor y = a * 3.0;
  y.zero_();
  (y + a).sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{1, 1});  // only the `+ a`
  Tensor b = leaf({1, 2}, {2});
  Tensor z = b * b;
  z.fill_(7.0);
  CHECK(std::string(z.grad_fn()->name()) == "fill_");
  (z * b).sum().backward();
  CHECK(vec(b.grad()) == std::vector<double>{7, 7});
}

TEST_CASE("in-place on a view rebases its base's history (CopySlices)") {
  SUBCASE("y.narrow(0, 0, 1).mul_(2)") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor y = x * 1.0;
    y.narrow(0, 0, 1).mul_(2.0);
    CHECK(vec(y.detach()) == std::vector<double>{2, 4, 6, 4, 5, 6});
    (y * y).sum().backward();  // d/dx of (2x)^2 = 8x on row 0, 2x on row 1
    CHECK(vec(x.grad()) == std::vector<double>{8, 16, 24, 8, 10, 12});
  }
  SUBCASE("y.select(1, 0).zero_()") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor y = x * 2.0;
    y.select(1, 0).zero_();
    y.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{0, 2, 2, 0, 2, 2});
  }
  SUBCASE("the view itself carries on from the base's new history") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor w = leaf({10, 20}, {2});
    Tensor y = x * 1.0;
    Tensor row = y.select(0, 1);
    row.mul_(w);  // row = x[1] * w
    CHECK(std::string(row.grad_fn()->name()) == "as_strided");
    CHECK(std::string(y.grad_fn()->name()) == "mul_");
    row.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{0, 0, 10, 20});
    CHECK(vec(w.grad()) == std::vector<double>{3, 4});
  }
  SUBCASE("a base that did not require grad joins the graph") {
    Tensor w = leaf({1, 2, 3}, {3});
    Tensor buf = zeros({2, 3}, kFloat64);
    buf.select(0, 1).copy_(w * 2.0);
    CHECK(buf.requires_grad());
    (buf * buf).sum().backward();  // (2w)^2 -> 8w
    CHECK(vec(w.grad()) == std::vector<double>{8, 16, 24});
  }
  SUBCASE("a transposed view, written through the base's non-contiguous window") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor o = leaf({1, 1, 1, 2, 2, 2}, {3, 2});
    Tensor y = x * 1.0;
    y.t().mul_(o);  // y[i][j] *= o[j][i]
    y.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{1, 1, 2, 1, 2, 2});
    CHECK(vec(o.grad()) == std::vector<double>{1, 4, 2, 5, 3, 6});
  }
}

TEST_CASE("a view made before its base was changed in place sees the new history") {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * 1.0;
  Tensor row0 = y.select(0, 0);  // a view, made before
  y.mul_(3.0);
  CHECK(vec(row0.detach()) == std::vector<double>{3, 6});
  row0.sum().backward();  // torch: 3 on row 0, nothing on row 1
  CHECK(vec(x.grad()) == std::vector<double>{3, 3, 0, 0});
  // And through another view of the same base.
  Tensor a = leaf({1, 2, 3, 4}, {2, 2});
  Tensor b = a * 1.0;
  Tensor col = b.select(1, 1);
  b.select(0, 1).mul_(10.0);
  col.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{0, 1, 0, 10});
}

TEST_CASE("retain_grad follows a tensor through an in-place op") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);
  (y * 5.0).sum().backward();
  CHECK(vec(y.grad()) == std::vector<double>{5, 5});
  CHECK(vec(x.grad()) == std::vector<double>{30, 30});
}

TEST_CASE("a leaf that requires grad cannot be changed in place under grad mode") {
  Tensor w = ones({3}, TensorOptions().requires_grad());
  const char* leaf_msg = "a leaf tensor that requires grad is being used in an in-place operation";
  CHECK(error_of([&] { w.add_(1.0); }) == std::string("[add_] ") + leaf_msg);
  CHECK(error_of([&] { w.mul_(ones({3})); }) == std::string("[mul_] ") + leaf_msg);
  CHECK(error_of([&] { w.fill_(0.0); }) == std::string("[fill_] ") + leaf_msg);
  CHECK(error_of([&] { w.zero_(); }) == std::string("[zero_] ") + leaf_msg);
  CHECK(error_of([&] { w.copy_(zeros({3})); }) == std::string("[copy_] ") + leaf_msg);
  CHECK(error_of([&] { w.normal_(); }) == std::string("[normal_] ") + leaf_msg);
  CHECK(error_of([&] { w -= 1.0; }) == std::string("[sub_] ") + leaf_msg);
  CHECK(error_of([&] { w.narrow(0, 0, 2).zero_(); }) ==
        "[zero_] a view of a leaf tensor that requires grad is being used in an in-place operation");
  CHECK(error_of([&] { w.clamp_(0.0, 0.5); }).find("[clamp_] a leaf tensor") == 0);
  CHECK(vec(w) == std::vector<double>{1, 1, 1});
  CHECK(w.version() == 0);  // nothing was written
  // The old advice (wrap it in NoGradGuard) is gone: it silently dropped graph ops.
  CHECK(error_of([&] { w.add_(1.0); }).find("NoGradGuard") == std::string::npos);
  // Under NoGradGuard (an optimizer step) it is allowed, and nothing is recorded.
  {
    NoGradGuard no_grad;
    w.add_(1.0);
    w.narrow(0, 0, 1).mul_(3.0);
  }
  CHECK(vec(w) == std::vector<double>{6, 2, 2});
  CHECK(w.is_leaf());
  CHECK(w.version() == 2);
  // A non-leaf modified under NoGradGuard is not recorded either (as torch).
  Tensor y = w * 1.0;
  auto* fn = y.grad_fn().get();
  {
    NoGradGuard no_grad;
    y.add_(1.0);
  }
  CHECK(y.grad_fn().get() == fn);
}

TEST_CASE("a tensor saved for backward and modified afterwards: torch's error") {
  SUBCASE("a saved input") {
    Tensor x = leaf({1, 2, 3}, {3});
    Tensor c = full({3}, 2.0, kFloat32);
    Tensor y = (x * c).sum();  // mul saves c for x's gradient
    c.add_(1.0);
    CHECK(error_of([&] { y.backward(); }) ==
          "[mul] one of the variables needed for gradient computation has been modified by an inplace operation: "
          "float32 tensor of shape (3,), is at version 1; expected version 0 instead");
  }
  SUBCASE("a saved output, modified by a recorded in-place op") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor e = exp(x);  // saves its output
    e.mul_(2.0);
    CHECK(error_of([&] { e.sum().backward(); }) ==
          "[exp] one of the variables needed for gradient computation has been modified by an inplace operation: "
          "float64 tensor of shape (2, 2), is at version 1; expected version 0 instead");
  }
  SUBCASE("through a view, twice") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor s = sigmoid(x);
    Tensor loss = s.sum();
    s.select(0, 0).zero_();
    s.select(0, 1).zero_();
    std::string msg = error_of([&] { loss.backward(); });
    CHECK(msg.find("[sigmoid] one of the variables") == 0);
    CHECK(msg.find("is at version 2; expected version 0 instead") != std::string::npos);
  }
  SUBCASE("mul_ of a tensor by itself saves the operand before the write") {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * 1.0;
    y.mul_(y);
    CHECK(error_of([&] { y.sum().backward(); }).find("[mul_] one of the variables needed") == 0);
  }
  SUBCASE("the scaled dot product attention's float mask") {
    Tensor q = leaf({1, 2, 3, 4}, {1, 2, 2});
    Tensor m = zeros({2, 2}, kFloat64);
    Tensor out = scaled_dot_product_attention(q, q, q, m);
    m.fill_(1.0);
    CHECK(error_of([&] { out.sum().backward(); }).find("[scaled_dot_product_attention] one of the variables") == 0);
  }
}

TEST_CASE("in-place errors name the op and what was given") {
  SUBCASE("a tensor whose elements share memory") {
    Tensor e = zeros({3}).expand({2, 3});
    CHECK(error_of([&] { e.add_(1.0); }).find("[add_] unsupported operation: more than one element of the "
                                              "written-to tensor (shape (2, 3), strides (0, 1))") == 0);
    CHECK(error_of([&] { e.fill_(1.0); }).find("[fill_] unsupported operation") == 0);
  }
  SUBCASE("a view made under NoGradGuard, written with grad mode on") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor y = x * 1.0;
    Tensor v;
    {
      NoGradGuard no_grad;
      v = y.select(0, 0);
    }
    CHECK(error_of([&] { v.mul_(leaf({1, 1}, {2})); })
              .find("[mul_] a view made under NoGradGuard is being modified in place with grad mode on") == 0);
  }
  SUBCASE("an op without a derivative yet") {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * 1.0;
    bool wrote = false;
    std::string msg = error_of([&] { detail::apply_inplace("scatter_", y, {}, [&] { wrote = true; }); });
    CHECK(msg == "[scatter_] the derivative for scatter_ is not implemented (self or an operand requires grad)");
    CHECK_FALSE(wrote);
    CHECK(y.version() == 0);
    // Outside the graph it runs.
    Tensor z = zeros({2});
    detail::apply_inplace("scatter_", z, {}, [&] { wrote = true; });
    CHECK(wrote);
    CHECK(z.version() == 1);
  }
  SUBCASE("bad operands") {
    Tensor y = zeros({2, 3});
    CHECK(error_of([&] { y.add_(ones({3, 3})); }).find("[add_]") == 0);
    CHECK(error_of([&] { y.mul_(ones({2, 3, 1})); }).find("[mul_]") == 0);
    CHECK(error_of([&] { y.copy_(ones({4})); }).find("[copy_] shapes (2, 3) and (4,) cannot be broadcast") == 0);
    CHECK(error_of([&] { y.masked_fill_(ones({2, 3}), 0.0); }).find("[masked_fill] mask must be a bool tensor") == 0);
    CHECK(error_of([&] { y.clamp_(std::nullopt, std::nullopt); }).find("[clamp_] at least one") == 0);
    CHECK(error_of([&] { Tensor().add_(1.0); }).find("[add_] input is an undefined tensor") == 0);
    CHECK(error_of([&] { y.add_(Tensor()); }).find("[add_] operand is an undefined tensor") == 0);
    CHECK(error_of([&] { tensor({true}).add_(1.0); }).find("[add_] not defined for bool tensors") == 0);
  }
}

TEST_CASE("check_inplace, for in-place ops not yet on apply_inplace, refuses tensors in the graph") {
  Tensor w = leaf({1, 2}, {2});
  CHECK(error_of([&] { detail::check_inplace("scatter_", w); })
            .find("[scatter_] a leaf tensor that requires grad is being used in an in-place operation") == 0);
  Tensor y = w * 2.0;
  CHECK(error_of([&] { detail::check_inplace("scatter_", y); })
            .find("[scatter_] does not record in-place changes yet") == 0);
  CHECK(error_of([&] { detail::check_inplace("scatter_", zeros({2})); }).empty());
  NoGradGuard no_grad;
  CHECK(error_of([&] { detail::check_inplace("scatter_", w); }).empty());
  CHECK(error_of([&] { detail::check_inplace("scatter_", y); }).empty());
}

// ------------------------------------------------------------------ tensor literals
TEST_CASE("tensor literals: each spelling, its dtype and shape, as torch.tensor") {
  struct Case {
    const char* spelling;
    Tensor t;
    DType dtype;
    Shape shape;
  };
  const Case cases[] = {
      {"tensor(3.5)", tensor(3.5), kFloat32, {}},
      {"tensor(3)", tensor(3), kInt64, {}},
      {"tensor(true)", tensor(true), kBool, {}},
      {"tensor(2.5f)", tensor(2.5f), kFloat32, {}},
      {"tensor({1, 2, 3})", tensor({1, 2, 3}), kInt64, {3}},
      {"tensor({1.5, 2})", tensor({1.5, 2}), kFloat32, {2}},
      {"tensor({1.5, 2}, kFloat64)", tensor({1.5, 2}, kFloat64), kFloat64, {2}},
      {"tensor({true, false})", tensor({true, false}), kBool, {2}},
      {"tensor({true, 2})", tensor({true, 2}), kInt64, {2}},
      {"tensor({{1, 2}, {3, 4}})", tensor({{1, 2}, {3, 4}}), kInt64, {2, 2}},
      {"tensor({{1, 2.5}, {3, 4}})", tensor({{1, 2.5}, {3, 4}}), kFloat32, {2, 2}},
      {"tensor({{0}}, kInt64)", tensor({{0}}, kInt64), kInt64, {1, 1}},
      {"tensor({{0}})", tensor({{0}}), kInt64, {1, 1}},
      {"tensor({7})", tensor({7}), kInt64, {1}},
      {"tensor({{1, 2}}, kFloat32)", tensor({{1, 2}}, kFloat32), kFloat32, {1, 2}},
      {"tensor({{{1}, {2}}, {{3}, {4}}})", tensor({{{1}, {2}}, {{3}, {4}}}), kInt64, {2, 2, 1}},
      {"4-D", tensor({{{{1.0, 2.0}}, {{3.0, 4.0}}}}), kFloat32, {1, 2, 1, 2}},
      {"tensor({})", tensor({}), kFloat32, {0}},
      {"tensor({{}, {}})", tensor({{}, {}}), kFloat32, {2, 0}},
      {"tensor({}, kInt64)", tensor({}, kInt64), kInt64, {0}},
      {"tensor({1, 2}, kBool)", tensor({0, 2}, kBool), kBool, {2}},
      {"tensor({1, 2}, TensorOptions(kFloat64).requires_grad())",
       tensor({1, 2}, TensorOptions(kFloat64).requires_grad()), kFloat64, {2}},
      {"tensor({1.0, 2.0}, TensorOptions().requires_grad())", tensor({1.0, 2.0}, TensorOptions().requires_grad()),
       kFloat32, {2}},
      {"int64 beyond 2^53 stays exact", tensor({int64_t{9007199254740993}}), kInt64, {1}},
  };
  for (const Case& c : cases) {
    INFO(c.spelling);
    CHECK(c.t.dtype() == c.dtype);
    CHECK(c.t.shape() == c.shape);
  }
  CHECK(vec(tensor({{1, 2}, {3, 4}})) == std::vector<double>{1, 2, 3, 4});
  CHECK(tensor(3.5).item() == 3.5);
  CHECK(vec(tensor({{{{1.0, 2.0}}, {{3.0, 4.0}}}})) == std::vector<double>{1, 2, 3, 4});
  CHECK(tensor({int64_t{9007199254740993}}).to_vector<int64_t>()[0] == 9007199254740993);
  CHECK(tensor({1, 2}, TensorOptions(kFloat64).requires_grad()).requires_grad());
  CHECK(vec(tensor({true, false})) == std::vector<double>{1, 0});
  CHECK(vec(tensor({0, 2}, kBool)) == std::vector<double>{0, 1});
  Tensor special = tensor({-0.0, std::numeric_limits<double>::infinity(), std::nan("")});
  std::vector<double> sv = vec(special);
  CHECK(std::signbit(sv[0]));
  CHECK(std::isinf(sv[1]));
  CHECK(std::isnan(sv[2]));
}

TEST_CASE("tensor literals: ragged nesting and integer gradients are errors naming the position") {
  CHECK(error_of([] { tensor({{1, 2}, {3}}); }) ==
        "[tensor] expected a sequence of length 2 at dim 1, got 1 (at position [1])");
  CHECK(error_of([] { tensor({{{1}, {2, 3}}}); }) ==
        "[tensor] expected a sequence of length 1 at dim 2, got 2 (at position [0][1])");
  CHECK(error_of([] { tensor({1, {2}}); }) == "[tensor] expected a number at dim 1, got a sequence (at position [1])");
  CHECK(error_of([] { tensor({{1}, 2}); }) == "[tensor] expected a sequence at dim 1, got a number (at position [1])");
  CHECK(error_of([] { tensor({{}, {1}}); }) ==
        "[tensor] expected a sequence of length 0 at dim 1, got 1 (at position [1])");
  CHECK(error_of([] { tensor({1, 2}, TensorOptions().requires_grad()); })
            .find("[tensor] only floating-point tensors can require gradients, got int64") == 0);
}

// ------------------------------------------------------------------ single int dims
TEST_CASE("reductions take a single int dim, and braced lists keep meaning lists of dims") {
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}});
  CHECK(vec(x.sum(-1)) == std::vector<double>{9, 12});
  CHECK(vec(sum(x, -1)) == std::vector<double>{9, 12});
  CHECK(vec(x.sum(0)) == std::vector<double>{5, 7, 9});
  CHECK(x.sum(0, true).shape() == Shape{1, 3});
  CHECK(vec(x.mean(1)) == std::vector<double>{3, 4});
  CHECK(vec(mean(x, 0)) == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(vec(x.amax(-1)) == std::vector<double>{5, 6});
  CHECK(vec(amin(x, 1)) == std::vector<double>{1, 2});
  CHECK(vec(x.amin(0, true)) == std::vector<double>{1, 2, 3});
  CHECK(vec(amax(x, 0)) == std::vector<double>{4, 5, 6});
  CHECK(allclose(x.logsumexp(1), logsumexp(x, {1})));
  CHECK(allclose(logsumexp(x, -1, true), logsumexp(x, {1}, true)));
  CHECK(vec(x.var(1)) == std::vector<double>{4, 4});
  CHECK(vec(var(x, 1, 0)) == vec(var(x, {1}, 0)));
  CHECK(vec(x.var(0, 1, true)) == vec(x.var({0}, 1, true)));
  int64_t d = 1;
  CHECK(vec(x.sum(d)) == std::vector<double>{9, 12});
  // Braced lists: {0, 1} and {} reduce over all dims, {0} over dim 0.
  CHECK(x.sum({0, 1}).item() == 21);
  CHECK(x.sum({}).item() == 21);
  CHECK(sum(x, {}, true).shape() == Shape{1, 1});
  CHECK(x.sum({0}).shape() == Shape{3});
  CHECK(mean(x, {}).item() == 3.5);
  CHECK(x.amax({}).item() == 6);
  CHECK(error_of([&] { x.sum(2); }).find("[sum] dim 2 out of range") == 0);
  CHECK(error_of([&] { mean(x, -3); }).find("[mean] dim -3 out of range") == 0);
  // Gradients flow through the int forms like the list forms.
  Tensor w = leaf({1, 2, 3, 4}, {2, 2});
  w.sum(-1).mean(0).backward();
  CHECK(vec(w.grad()) == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}
