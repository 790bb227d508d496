// Bad input: each documented error is a kiln::Error (never a crash, abort or garbage)
// whose message starts with the op in brackets and shows what was given. Then the
// limits: sizes whose product overflows int64 or that memory cannot hold, messages that
// name the op called and the shapes given, NaN and infinities reaching integer
// conversions (run in the sanitizer tree), and optimizer state loaded from a file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;

TEST_CASE("every message starts with the op in brackets") {
  std::string msg = error_of([] { matmul(ones({2, 3}), ones({4, 5})); });
  CHECK(msg.rfind("[matmul] ", 0) == 0);
  CHECK(msg.find("[matmul] shapes (2, 3) and (4, 5) cannot be multiplied") == 0);
}

TEST_CASE("shapes that don't fit") {
  SUBCASE("backward with a gradient of the wrong shape") {
    Tensor x = ones({2, 3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.backward(ones({3, 2})), "[backward]", "(3, 2)", "(2, 3)");
  }
}

TEST_CASE("wrong dtypes") {
  SUBCASE("requires_grad_ on an integer or bool tensor") {
    Tensor i = ones({3}, kInt64);
    CHECK_ERROR(i.requires_grad_(), "[requires_grad_]", "int64");
    Tensor b = ones({3}, kBool);
    CHECK_ERROR(b.requires_grad_(), "[requires_grad_]", "bool");
    CHECK_ERROR(ones({3}, TensorOptions(kInt64).requires_grad()), "[requires_grad_]", "int64");
    CHECK_FALSE(i.requires_grad());
  }
  SUBCASE("data<T>() of the wrong type") {
    CHECK_ERROR(ones({3}).data<double>(), "[data]", "float32", "float64");
  }
}

TEST_CASE("dims and indices out of range") {
  Tensor x = ones({2, 3});
  CHECK_ERROR(x.size(2), "[size]", "dim 2");
  CHECK_ERROR(x.at({2, 0}), "[at]", "index 2", "size 2");
  CHECK_ERROR(x.at({0}), "[at]", "expected 2 indices", "(2, 3)");
  CHECK_ERROR(x.set({0, 3}, 1.0), "[set]", "index 3", "size 3");
}

TEST_CASE("0-d tensors have no dim to index, but reductions over dim 0 / -1 are allowed") {
  Tensor s = scalar_tensor(2.5);
  CHECK_ERROR(s.size(0), "[size]", "no dimensions");
  CHECK_ERROR(s.stride(-1), "[stride]", "no dimensions");
  // As PyTorch: reducing a 0-d tensor over dim 0 or -1 gives it back.
  CHECK(s.sum({0}).item() == 2.5);
  CHECK(s.sum({0}).dim() == 0);
  CHECK(s.mean({-1}, true).item() == 2.5);
  CHECK(s.amax({0}).item() == 2.5);
  CHECK(logsumexp(s, {0}).item() == doctest::Approx(2.5));
  CHECK(max(s, 0).values.item() == 2.5);
  Tensor g = scalar_tensor(2.0, TensorOptions().requires_grad());
  (g.sum({0}) * 3.0).backward();
  CHECK(g.grad().item() == 3.0);
}

TEST_CASE("sizes that overflow or are negative") {
  CHECK_ERROR(Device("cuda:99999999999"), "[device]", "'cuda:99999999999'");
}

TEST_CASE("reshape of a non-contiguous tensor copies; a view that keeps the layout is fine") {
  // (view's refusal is an error case of the op table's view rows)
  Tensor x = arange(0, 6, 1, kFloat32).reshape({2, 3});
  CHECK(x.t().reshape({6}).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(error_of([&] { x.t().view({3, 2}); }).empty());
}

TEST_CASE("backward misuse") {
  SUBCASE("a non-scalar without a gradient") {
    Tensor x = ones({2, 3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.backward(), "[backward]", "scalar", "(2, 3)");
    CHECK(x.grad().defined() == false);
  }
  SUBCASE("a second backward without retain_graph") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    Tensor y = (x * x).sum();
    y.backward();
    CHECK_ERROR(y.backward(), "[backward]", "second time", "retain_graph");
    // The first backward's gradient is intact.
    CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  }
  SUBCASE("a tensor that doesn't require grad") {
    CHECK_ERROR(ones({1}).backward(), "[backward]", "does not require grad");
    Tensor x = ones({1}, TensorOptions().requires_grad());
    Tensor y;
    {
      NoGradGuard no_grad;
      y = x * 2.0;
    }
    CHECK_ERROR(y.backward(), "[backward]", "does not require grad");
  }
  SUBCASE("retain_grad on a tensor that doesn't require grad") {
    Tensor x = ones({3});
    CHECK_ERROR(x.retain_grad(), "[retain_grad]");
  }
  SUBCASE("requires_grad_(false) on a non-leaf") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.requires_grad_(false), "[requires_grad_]", "leaf");
  }
  SUBCASE("set_grad of the wrong shape") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    CHECK_ERROR(x.set_grad(ones({4})), "[set_grad]", "(4,)", "(3,)");
  }
}

TEST_CASE("in-place modification under grad mode") {
  Tensor w = ones({3}, TensorOptions().requires_grad());
  CHECK_ERROR(w.add_(1.0), "[add_]", "leaf", "requires grad", "in-place operation");
  CHECK_ERROR(w.mul_(ones({3})), "[mul_]", "leaf");
  CHECK_ERROR(w.fill_(0.0), "[fill_]", "leaf");
  CHECK_ERROR(w.zero_(), "[zero_]", "leaf");
  CHECK_ERROR(w.copy_(zeros({3})), "[copy_]", "leaf");
  CHECK_ERROR(w.normal_(), "[normal_]", "leaf");
  CHECK(w.to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(w.version() == 0);
  // A non-leaf is recorded instead (tests/test_tensor.cpp).
  // Under NoGradGuard it is allowed (an optimizer step).
  {
    NoGradGuard no_grad;
    w.add_(1.0);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("a tensor saved for backward modified in place is caught at backward time") {
  Tensor x = ones({3}, TensorOptions().requires_grad());
  Tensor c = full({3}, 2.0);
  Tensor y = (x * c).sum();  // mul saves c for x's gradient
  c.add_(1.0);
  CHECK_ERROR(y.backward(), "[mul]", "modified by an inplace operation", "is at version 1", "expected version 0");
  CHECK_FALSE(x.grad().defined());

  // The same through a view of the saved tensor (views share the version counter).
  Tensor a = ones({2, 3}, TensorOptions().requires_grad());
  Tensor e = exp(a);  // exp saves its output
  Tensor loss = e.sum();
  {
    NoGradGuard no_grad;
    e.select(0, 1).mul_(0.0);
  }
  CHECK_ERROR(loss.backward(), "[exp]", "modified by an inplace operation");
}

TEST_CASE("bad from_vector and reduction arguments") {
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "[from_vector]", "3 values", "(2, 2)", "4 elements");
  CHECK_ERROR(from_vector<int64_t>({1, 2, 3, 4, 5}, {2, 2}), "[from_vector]", "5 values", "(2, 2)");
  CHECK_ERROR(reduction_from_string("avg"), "[reduction]", "'avg'");
}

TEST_CASE("item() of a multi-element tensor") {
  CHECK_ERROR(ones({2, 3}).item(), "[item]", "6 elements", "(2, 3)");
  CHECK_ERROR(zeros({0}).item(), "[item]", "0 elements", "(0,)");
  CHECK(ones({1, 1}).item() == 1.0);
}

TEST_CASE("devices") {
  CHECK_ERROR(Device("tpu"), "[device]", "'tpu'");
  CHECK_ERROR(Device("cuda:x"), "[device]", "'cuda:x'");
  CHECK_ERROR(Device("cpu:0x"), "[device]", "'cpu:0x'");
  CHECK_ERROR(Device(""), "[device]", "''");
  CHECK(Device("cpu") == kCPU);
  // Without a CUDA backend, asking for one is an error that names the device, not a crash.
  std::string cuda = error_of([] { (void)ones({2}, Device("cuda")); });
  if (!cuda.empty()) {
    CHECK(cuda.rfind("[device] ", 0) == 0);
    CHECK(cuda.find("cuda:0") != std::string::npos);
    CHECK_ERROR(ones({2}).to(Device("cuda:1")), "[device]", "cuda:1");
  }
}

TEST_CASE("set_num_threads(0)") {
  int before = get_num_threads();
  CHECK_ERROR(set_num_threads(0), "[set_num_threads]", "got 0");
  CHECK_ERROR(set_num_threads(-3), "[set_num_threads]", "got -3");
  CHECK(get_num_threads() == before);
}

TEST_CASE("undefined tensors") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK(u.str() == "tensor(undefined)");
  CHECK_ERROR(u.shape(), "[tensor]", "undefined");
  CHECK_ERROR(u.numel(), "[tensor]", "undefined");
  CHECK_ERROR(u.item(), "[tensor]", "undefined");
  CHECK_ERROR(u.requires_grad_(), "[tensor]", "undefined");
  CHECK_ERROR(u.backward(), "[tensor]", "undefined");
  CHECK_ERROR(u.grad(), "[tensor]", "undefined");
  CHECK_ERROR(u.detach(), "[tensor]", "undefined");
  CHECK_ERROR(u.to_vector<float>(), "undefined");
  CHECK_ERROR(u.t(), "undefined");
  Tensor a = ones({2});
  CHECK_ERROR(u.zero_(), "undefined");
  CHECK_ERROR(a.same_storage(u), "undefined");
}

// ================================================================ overflow, memory, special values

namespace {

constexpr int64_t k32 = int64_t{1} << 32;
constexpr int64_t k62 = int64_t{1} << 62;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A tensor of `shape` that costs one element: a stride-0 view of a scalar.
Tensor huge(const Shape& shape, DType dtype = kFloat32) {
  return ones(Shape(shape.size(), 1), TensorOptions(dtype)).expand(shape);
}

}  // namespace

TEST_CASE("sizes whose product overflows int64 are refused by the op that was called") {
  SUBCASE("factories") {
    CHECK_ERROR_STARTS("[empty]", empty({k32, k32}), "(4294967296, 4294967296)", "overflows int64");
    CHECK_ERROR_STARTS("[empty]", Tensor::empty({k32, k32, 2}), "overflows int64");
    CHECK_ERROR_STARTS("[empty]", zeros({k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[empty]", ones({k62, 4}), "overflows int64");
    CHECK_ERROR_STARTS("[empty]", full({k62, k62}, 1.0), "overflows int64");
    CHECK_ERROR_STARTS("[rand]", rand({k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[randn]", randn({k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[randint]", randint(0, 5, {k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[bernoulli]", bernoulli({k32, k32}, 0.5), "overflows int64");
    CHECK_ERROR_STARTS("[eye]", eye(k32, k32), "overflows int64");
    CHECK_ERROR_STARTS("[from_vector]", from_vector<float>({}, {k32, k32, 0}), "overflows int64");
    // No elements, but strides that would not fit.
    CHECK_ERROR_STARTS("[empty]", empty({0, int64_t{1} << 40, int64_t{1} << 40}), "overflows int64");
    // Bytes past 2^63 although the count fits.
    CHECK_ERROR_STARTS("[empty]", empty({int64_t{1} << 62}, kFloat64), "2^63 bytes");
    // A count that is not an int64 at all: once cast (undefined behaviour).
    CHECK_ERROR_STARTS("[arange]", arange(0.0, 1e300, 1e-300), "int64");
    CHECK_ERROR_STARTS("[arange]", arange(0.0, 1e30), "int64");
    // An empty identity with the largest width is fine (its diagonal stride m + 1 once wrapped).
    CHECK(eye(0, std::numeric_limits<int64_t>::max()).numel() == 0);
  }
  SUBCASE("views") {
    // A wrapped product once let (2^32, 2^32) pass for 0 elements.
    CHECK_ERROR_STARTS("[reshape]", empty({0}).reshape({k32, k32}), "(4294967296, 4294967296)");
    CHECK_ERROR_STARTS("[view]", empty({0}).view({k32, k32}), "(4294967296, 4294967296)");
    CHECK_ERROR_STARTS("[reshape]", empty({0}).reshape({k32, k32, -1}), "(4294967296, 4294967296, -1)");
    CHECK_ERROR_STARTS("[expand]", ones({1, 1}).expand({k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[expand]", ones({1}).expand({k32, k32, 4}), "overflows int64");
  }
  SUBCASE("broadcasting and products") {
    Tensor col = huge({k32, 1}), row = huge({k32});
    CHECK_ERROR_STARTS("[add]", add(col, row), "overflows int64");
    reset_peak_memory();
    const int64_t before = memory_stats().allocated_bytes;
    CHECK_ERROR_STARTS("[sub]", sub(col, row), "overflows int64");
    CHECK_ERROR_STARTS("[add]", add(col, row, 2.0), "overflows int64");
    // Refused before any copy of an operand: sub once negated its expanded second operand
    // in full (16 GiB here) before the shapes were checked.
    CHECK(memory_stats().peak_bytes - before < (int64_t{1} << 20));
    CHECK_ERROR_STARTS("[mul]", col * row, "overflows int64");
    CHECK_ERROR_STARTS("[div]", col / row, "overflows int64");
    CHECK_ERROR_STARTS("[maximum]", maximum(col, row), "overflows int64");
    CHECK_ERROR_STARTS("[lt]", lt(col, row), "overflows int64");
    CHECK_ERROR_STARTS("[where]", where(lt(ones({1}), 2.0), col, row), "overflows int64");
    CHECK_ERROR_STARTS("[matmul]", matmul(huge({k32, 1}), huge({1, k32})), "overflows int64");
    CHECK_ERROR_STARTS("[matmul]", matmul(huge({k32, 1, 1, 1}), huge({k32, 1, 1})), "overflows int64");
    CHECK_ERROR_STARTS("[mm]", mm(huge({k32, 1}), huge({1, k32})), "overflows int64");
    CHECK_ERROR_STARTS("[bmm]", bmm(huge({1, k32, 1}), huge({1, 1, k32})), "overflows int64");
    CHECK_ERROR_STARTS("[linear]", linear(huge({k32, 1}), huge({k32, 1})), "overflows int64");
    CHECK_ERROR_STARTS("[einsum]", einsum("i,j->ij", {row, row}), "overflows int64");
    CHECK_ERROR_STARTS("[einsum]", einsum("ik,kj->ij", {huge({k32, 1}), huge({1, k32})}), "overflows int64");
    CHECK_ERROR_STARTS("[outer]", outer(row, row), "overflows int64");
    Tensor q = huge({1, 1, k32, 1});
    CHECK_ERROR_STARTS("[scaled_dot_product_attention]", scaled_dot_product_attention(q, q, q), "overflows int64");
  }
  SUBCASE("concatenation and repetition") {
    Tensor big = huge({k62});
    CHECK_ERROR_STARTS("[cat]", cat({big, big, big}), "overflow");
    CHECK_ERROR_STARTS("[stack]", stack({big, big, big, big}), "overflows int64");
    CHECK_ERROR_STARTS("[repeat]", ones({1, 1}).repeat({k32, k32}), "overflows int64");
    CHECK_ERROR_STARTS("[repeat]", ones({2}).repeat({k62}), "overflows int64");
    CHECK_ERROR_STARTS("[repeat_interleave]", huge({k32}).repeat_interleave(k32), "overflows int64");
    CHECK_ERROR_STARTS("[repeat_interleave]", huge({2, k32}).repeat_interleave(k32, 0), "overflows int64");
    CHECK_ERROR_STARTS("[repeat_interleave]",
                       repeat_interleave(tensor({std::numeric_limits<int64_t>::max(), int64_t{1}})), "int64");
  }
  SUBCASE("indexing") {
    Tensor idx = zeros({1}, kInt64).expand({int64_t{1} << 20});
    CHECK_ERROR_STARTS("[embedding]", embedding(huge({2, int64_t{1} << 44}), idx), "overflows int64");
    CHECK_ERROR_STARTS("[index_select]", index_select(huge({1, k62}, kInt64), 0, zeros({2}, kInt64)),
                       "overflows int64");
    CHECK_ERROR_STARTS("[index_select]", index_select(huge({1, k62}), 0, zeros({2}, kInt64)), "overflow");
    CHECK_ERROR_STARTS("[multinomial]", multinomial(huge({2, 3}), int64_t{1} << 62, true), "too large");
  }
  SUBCASE("sums of sizes and steps near INT64_MAX") {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    Tensor x = arange(10.0);
    CHECK_ERROR_STARTS("[split]", split(x, std::vector<int64_t>{kMax, 1}), "(9223372036854775807, 1)");
    // A step or chunk count near INT64_MAX once wrapped (n + step - 1).
    CHECK(x.slice(0, 2, 10, kMax).to_vector<float>() == std::vector<float>{2});
    CHECK(chunk(x, kMax).size() == 10);
    CHECK(split(x, kMax).size() == 1);
  }
}

TEST_CASE("memory that cannot be had is an OutOfMemoryError naming op, shape and bytes") {
  // 4 TiB: more than this machine's RAM and swap, refused before asking (under
  // overcommit a request may succeed and the process die on first touch).
  const int64_t n = int64_t{1} << 40;
  CHECK_ERROR_STARTS("[empty]", empty({n}), "cannot allocate", "(1099511627776,)", "float32",
                     "4398046511104 bytes", "4.0 TiB");
  CHECK_THROWS_AS(empty({n}), OutOfMemoryError);
  CHECK_ERROR_STARTS("[empty]", zeros({n}, kFloat64), "8796093022208 bytes");
  CHECK_ERROR_STARTS("[rand]", rand({n}), "cannot allocate");
  CHECK_ERROR_STARTS("[arange]", arange(static_cast<double>(n)), "cannot allocate");
  CHECK_ERROR_STARTS("[multinomial]", multinomial(ones({2}), n, true), "cannot allocate");
  // Each size fits, the tensor does not: the op that asked is named.
  CHECK_ERROR_STARTS("[matmul]", matmul(huge({1 << 20, 1}), huge({1, 1 << 20})), "cannot allocate", "(1048576, 1048576)");
  CHECK_ERROR_STARTS("[add]", add(huge({1 << 20, 1}), huge({1 << 20})), "cannot allocate");
  CHECK_ERROR_STARTS("[cat]", cat({huge({n}), huge({n})}), "cannot allocate");
  CHECK_ERROR_STARTS("[embedding]", embedding(huge({2, 1 << 20}), zeros({1 << 20}, kInt64)), "cannot allocate");
  // A total once built in a std::vector (std::bad_alloc).
  CHECK_ERROR_STARTS("[repeat_interleave]", repeat_interleave(tensor({n, int64_t{1}})), "cannot allocate");
  CHECK_ERROR_STARTS("[repeat_interleave]", ones({2}).repeat_interleave(tensor({n, int64_t{1}})), "cannot allocate");
  // Nothing was kept: a small tensor still works.
  CHECK(ones({3}).sum().item() == 3.0);

  SUBCASE("an allocator that throws std::bad_alloc") {
    struct Refusing final : Allocator {
      void* allocate(size_t) override { throw std::bad_alloc(); }
      void deallocate(void*, size_t) override {}
    } refusing;
    register_allocator(DeviceType::CUDA, &refusing);
    std::string msg = error_of([] { (void)empty({2, 3}, TensorOptions(kFloat64).device(Device(DeviceType::CUDA, 0))); });
    register_allocator(DeviceType::CUDA, nullptr);
    CHECK(msg.rfind("[empty] cannot allocate a tensor of shape (2, 3) and dtype float64: 48 bytes", 0) == 0);
    CHECK(msg.find("cuda:0") != std::string::npos);
  }
}

namespace {

// |got - ref| within tolerance, NaN where ref is NaN, the same infinity where ref is one.
void check_special(const std::string& what, const Tensor& got_t, const std::vector<double>& ref, double rtol,
                   double atol) {
  const std::vector<double> got = got_t.to(kFloat64).to_vector<double>();
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", expected " << ref[i]);
    if (std::isnan(ref[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(ref[i])) {
      CHECK(got[i] == ref[i]);
    } else {
      CHECK(std::abs(got[i] - ref[i]) <= atol + rtol * std::abs(ref[i]));
    }
  }
}

const std::vector<double> kSpecial = {kNaN,  kInf,   -kInf,  0.0,    -0.0,    1e-30,  -1e-30,   1e-45, 1e30,
                                      -1e30, 88.7,   88.8,   -87.3,  -87.4,   -104.0, 3.4e38,   -3.4e38, 0.5,
                                      -2.0,  10.0,   -10.0,  20.0,   -20.0,   1e300,  -1e300,  -kNaN};

// Through erfc: 1 + erf(x/√2) cancels to 0 for x < -6 in double.
double gelu_ref(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TEST_CASE("NaN, infinities, huge and tiny values through the pointwise maths match std::") {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<double(double)> ref;
  };
  const std::vector<Case> cases = {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double v) { return std::erf(v); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double v) { return std::expm1(v); }},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v < 0 ? 0.0 : v; }},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }},
  };
  for (DType dt : {kFloat32, kFloat64}) {
    // The reference sees the value the tensor holds (1e300 is inf in float32).
    Tensor x = from_vector<double>(kSpecial, {static_cast<int64_t>(kSpecial.size())}).to(dt);
    const std::vector<double> held = x.to(kFloat64).to_vector<double>();
    const double rtol = dt == kFloat32 ? 2e-5 : 1e-12, atol = dt == kFloat32 ? 2e-37 : 1e-300;
    for (const Case& c : cases) {
      std::vector<double> ref;
      for (double v : held) {
        double r = c.ref(v);
        // A float32 result rounds past FLT_MAX to infinity, and below the normals to 0.
        if (dt == kFloat32 && std::isfinite(r) && std::abs(r) > 3.4028234663852886e38) r = std::copysign(kInf, r);
        ref.push_back(r);
      }
      // sin of a huge float32 argument: the reduction of the library is the reference.
      check_special(std::string(c.name) + " " + dtype_name(dt), c.op(x), ref, rtol, atol);
    }
  }
}

TEST_CASE("NaN and infinities through the row ops") {
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dt));
    const TensorOptions o(dt);
    // A row with NaN is NaN everywhere; +inf makes inf - inf; finite extremes are exact.
    Tensor x = tensor({{kNaN, 0.0, 1.0}, {kInf, 0.0, 1.0}, {-kInf, 0.0, 1.0}, {1e30, -1e30, 0.0}}, o);
    check_special("softmax", softmax(x, -1),
                  {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, 0.0, 1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0)), 1, 0, 0},
                  1e-6, 1e-30);
    check_special("log_softmax", log_softmax(x, -1),
                  {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, -kInf, -std::log1p(std::exp(1.0)), -std::log1p(std::exp(-1.0)),
                   0, -2e30, -1e30},
                  1e-6, 1e-30);
    check_special("layer_norm", layer_norm(tensor({{kNaN, 0.0, 1.0}, {kInf, 0.0, 1.0}}, o), {3}),
                  {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}, 0, 0);
    Tensor logits = tensor({{kNaN, 0.0}, {-kInf, 0.0}, {0.0, -kInf}, {1e30, 0.0}}, o);
    Tensor targets = tensor({int64_t{0}, int64_t{0}, int64_t{0}, int64_t{1}});
    check_special("cross_entropy", cross_entropy(logits, targets, -100, 0.0, Reduction::None),
                  {kNaN, kInf, 0.0, 1e30}, 1e-6, 1e-30);
    CHECK_ERROR_STARTS("[multinomial]", multinomial(tensor({kNaN, 1.0}, o), 1), "nan");
    CHECK_ERROR_STARTS("[multinomial]", multinomial(tensor({kInf, 1.0}, o), 1), "inf");
    CHECK_ERROR_STARTS("[embedding]", embedding(ones({2, 2}, o), tensor({kNaN}, o)), "int64");
  }
  // Finite weights whose sum overflows: sampled as the same weights scaled down (both
  // categories drawn), not always the last.
  Tensor draws = multinomial(tensor({1e308, 1e308}, kFloat64), 64, true);
  CHECK(draws.eq(0.0).any().item() != 0);
  CHECK(draws.eq(1.0).any().item() != 0);
}

TEST_CASE("floating values that int64 cannot hold never reach a cast") {
  const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  // A conversion gives what x86 gives (so does PyTorch there), without undefined behaviour.
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = tensor({kNaN, kInf, -kInf, 1e30, -1e30, 2.5, -2.5}, TensorOptions(dt));
    CHECK(x.to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{kMin, kMin, kMin, kMin, kMin, 2, -2});
    CHECK(x.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true, true});
  }
  // Where the op can name the value, it refuses it.
  CHECK_ERROR_STARTS("[full]", full({2}, kNaN, kInt64), "nan", "int64");
  CHECK_ERROR_STARTS("[full]", full({2}, 1e30, kInt64), "int64");
  Tensor i = tensor({int64_t{1}, int64_t{2}});
  CHECK_ERROR_STARTS("[fill_]", i.clone().fill_(kInf), "inf", "int64");
  CHECK_ERROR_STARTS("[masked_fill]", masked_fill(i, i > 1.0, kNaN), "int64");
  CHECK_ERROR_STARTS("[set]", i.clone().set({0}, kNaN), "int64");
  CHECK_ERROR_STARTS("[item]", tensor({kNaN}).item<int64_t>(), "nan", "float32");
  CHECK_ERROR_STARTS("[item]", tensor({1e30}, kFloat64).item<int64_t>(), "float64");
  CHECK(tensor({2.9}).item<int64_t>() == 2);
  // item<int64_t> of an int64 tensor is exact (it once went through a double: 2^63, undefined).
  CHECK(tensor({kMax}).item<int64_t>() == kMax);
  CHECK(tensor({kMax - 1}).item<int64_t>() == kMax - 1);
  // A scalar an int64 tensor cannot hold makes the result float, as a Python float does.
  Tensor y = add(i, kInf);
  CHECK(y.dtype() == kFloat32);
  CHECK(std::isinf(y.to_vector<float>()[0]));
  CHECK(mul(i, 1e30).dtype() == kFloat32);
  CHECK(sub(i, -kInf).dtype() == kFloat32);
  CHECK(eq(i, kNaN).to_vector<bool>() == std::vector<bool>{false, false});
  CHECK(lt(i, 1e30).to_vector<bool>() == std::vector<bool>{true, true});
  // Integral bounds beyond int64 saturate instead of being cast.
  CHECK(clamp(i, -1e30, 1e30).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(clamp(i, 1e30, std::nullopt).to_vector<int64_t>() == std::vector<int64_t>{kMax, kMax});
  CHECK(clamp(i, std::nullopt, -1e30).to_vector<int64_t>() == std::vector<int64_t>{kMin, kMin});
  CHECK(clamp(i, kNaN, std::nullopt).dtype() == kFloat32);
  CHECK_ERROR_STARTS("[dropout]", dropout(ones({4}), kNaN), "");
  CHECK_ERROR_STARTS("[bernoulli]", bernoulli({4}, kNaN), "");
}

namespace {

// An Adam, AdamW or SGD over one (2, 3) float32 parameter that has taken one step, and its state.
struct Trained {
  Tensor p = ones({2, 3}, TensorOptions().requires_grad());
  std::unique_ptr<optim::Optimizer> opt;
  optim::OptimizerState state;
  explicit Trained(const std::string& kind) {
    if (kind == "Adam") opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{});
    else if (kind == "AdamW") opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamOptions{});
    else opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    p.sum().backward();
    opt->step();
    state = opt->state_dict();
  }
  // The error of loading the state with `key` replaced by `t` ("" if none).
  std::string load_with(const std::string& key, const Tensor& t) {
    optim::OptimizerState s = state;
    s[key] = t;
    return error_of([&] { opt->load_state_dict(s); });
  }
};

}  // namespace

TEST_CASE("optimizer state from a file is checked, naming the field") {
  for (const char* kind : {"Adam", "AdamW"}) {
    CAPTURE(kind);
    Trained t(kind);
    for (double bad : {kNaN, kInf, -kInf, -5.0, 1e214, 2.5, 0x1p53 + 2}) {
      CAPTURE(bad);
      std::string msg = t.load_with("state.0.step", full({}, bad, kFloat64));
      CHECK(msg.rfind("[load_state_dict] state 'state.0.step' must be a whole number", 0) == 0);
    }
    CHECK(t.load_with("state.0.step", full({}, 0x1p53, kFloat64)).empty());  // large but valid
    t.opt->step();  // pow(beta, 2^53 + 1) in double: fine
    CHECK(t.p.isfinite().all().item() != 0);
    Tensor m = t.state.at("state.0.exp_avg");
    for (const char* key : {"state.0.exp_avg", "state.0.exp_avg_sq"}) {
      CAPTURE(key);
      Tensor nan_one = m.clone();
      nan_one.set({1, 2}, kNaN);
      std::string msg = t.load_with(key, nan_one);
      CHECK(msg.rfind(std::string("[load_state_dict] state '") + key + "' holds NaN", 0) == 0);
      Tensor inf_one = m.clone();
      inf_one.set({0, 0}, kInf);
      CHECK(t.load_with(key, inf_one).find("infinite") != std::string::npos);
      CHECK(t.load_with(key, m.to(kFloat64)).find("dtype float64 but parameter 0 has dtype float32") !=
            std::string::npos);
      CHECK(t.load_with(key, zeros({3, 2})).find("shape (3, 2) but parameter 0 has shape (2, 3)") !=
            std::string::npos);
    }
    CHECK(t.load_with("state.0.exp_avg_sq", full({2, 3}, -1.0)).find("negative") != std::string::npos);
    CHECK(t.load_with("param_groups.0.lr", full({}, kInf, kFloat64)).find("'param_groups.0.lr' must be finite") !=
          std::string::npos);
    CHECK(t.load_with("param_groups.0.weight_decay", full({}, kNaN, kFloat64)).find("weight_decay") !=
          std::string::npos);
    CHECK(t.load_with("state.0.exp_avg", m).empty());  // the state as saved still loads
  }
  Trained sgd("SGD");
  Tensor buf = sgd.state.at("state.0.momentum_buffer").clone();
  buf.set({0, 1}, kNaN);
  CHECK(sgd.load_with("state.0.momentum_buffer", buf).find("'state.0.momentum_buffer' holds NaN") !=
        std::string::npos);
  CHECK(sgd.load_with("state.0.momentum_buffer", ones({2, 3}, kInt64)).find("dtype int64") != std::string::npos);
  CHECK(sgd.load_with("param_groups.0.momentum", full({}, kInf, kFloat64)).find("must be finite") !=
        std::string::npos);
}
