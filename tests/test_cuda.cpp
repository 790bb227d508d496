// The CUDA backend against the CPU backend: every Backend kernel and every
// differentiable op runs forward and backward on both devices from the same inputs
// (same values, same strides) and must agree (float32 to ~1e-5, float64 to ~1e-12
// relative; integers and bools exactly); random fills give the same numbers; mixing
// devices is an error; the toy translators train to 100% exact translations on the
// GPU; a repeated training step makes no new cudaMalloc.
//
// Without a usable GPU (a CPU-only build, or no GPU/driver) only the "everywhere" suite
// runs (what asking for CUDA must do then), and the program prints
// "no CUDA GPU present: <reason>" and exits 77, which meson reports as SKIP.
//
// KILN_TEST_CUDA_ON_CPU=1 runs the GPU suite with the CPU standing in for the GPU: it
// checks the suite itself (its comparisons, the training runs) where no GPU exists.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "corpus.h"
#include "test_util.h"
#include "toy_task.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
using kiln::testing::error_of;
using kiln::testing::toy_model;
using kiln::testing::toy_task;
using kiln::testing::ToyTask;
namespace tr = kiln::transformer;

namespace {

// The device the GPU suite runs on.
const Device& gpu() {
  static const Device d = testing::cuda_test_device().value_or(Device(DeviceType::CUDA, 0));
  return d;
}
bool on_cpu_stand_in() { return gpu().is_cpu(); }

void check_same(const std::string& what, const Tensor& got, const Tensor& want, double rtol = 0) {
  testing::check_same_as_cpu(what, got, want, rtol);
}

// Whether a library whose file name contains `name` is mapped into this process.
bool library_mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(name) != std::string::npos) return true;
  return false;
}

// ------------------------------------------------------------------ the op table
using V = const std::vector<Tensor>&;
using Fn = std::function<Tensor(V, Device)>;

enum class Kind { Randn, Positive, Distinct };
enum class Layout { Contiguous, Transposed, Stepped, Permuted, Expanded };

struct In {
  Shape shape;
  Kind kind = Kind::Randn;
  Layout layout = Layout::Contiguous;
};

In R(const Shape& s) { return {s}; }
In P(const Shape& s) { return {s, Kind::Positive}; }
In T(In in) { in.layout = Layout::Transposed; return in; }
In S(In in) { in.layout = Layout::Stepped; return in; }
In Pm(In in) { in.layout = Layout::Permuted; return in; }
In E(In in) { in.layout = Layout::Expanded; return in; }  // stride 0 along dim 0
In T(const Shape& s) { return T(R(s)); }
In S(const Shape& s) { return S(R(s)); }
In Pm(const Shape& s) { return Pm(R(s)); }

// The contiguous float64 values a layout is cut from, on the CPU.
Tensor base_values(const In& in, uint64_t seed) {
  Shape s = in.shape;
  switch (in.layout) {
    case Layout::Contiguous: break;
    case Layout::Transposed: std::swap(s[s.size() - 1], s[s.size() - 2]); break;
    case Layout::Stepped: s[0] = 2 * s[0] + 1; break;
    case Layout::Permuted: s = Shape(in.shape.rbegin(), in.shape.rend()); break;
    case Layout::Expanded: s[0] = 1; break;
  }
  Generator g(seed);
  Tensor r = randn(s, TensorOptions(kFloat64), &g);
  switch (in.kind) {
    case Kind::Randn: return r;
    case Kind::Positive: return r.abs() + 0.5;
    case Kind::Distinct: {
      const int64_t n = shape_numel(s);
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7) % n - n / 2) * 0.3 + 0.05;
      return from_vector<double>(v, s);
    }
  }
  return r;
}

// The view of `base` (on any device) that has in's layout.
Tensor apply_layout(const Tensor& base, const In& in) {
  switch (in.layout) {
    case Layout::Contiguous: return base;
    case Layout::Transposed: return base.transpose(-1, -2);
    case Layout::Stepped: return base.slice(0, 1, base.size(0), 2);
    case Layout::Permuted: {
      std::vector<int64_t> dims(in.shape.size());
      std::iota(dims.rbegin(), dims.rend(), 0);
      return base.permute(dims);
    }
    case Layout::Expanded: return base.expand(in.shape);
  }
  return base;
}

struct Case {
  std::string name;
  Fn fn;
  std::vector<In> inputs;
};

// Runs fn on both devices in float64 and float32, compares the results, then sends the
// same random gradient back through both and compares every input's gradient.
void run_case(const Case& c, uint64_t seed) {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(std::string(dtype_name(dtype)));
    std::vector<Tensor> cpu_in, gpu_in;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      Tensor base = base_values(c.inputs[i], seed + i).to(dtype);
      cpu_in.push_back(apply_layout(base, c.inputs[i]).detach().requires_grad_());
      gpu_in.push_back(apply_layout(base.to(gpu()), c.inputs[i]).detach().requires_grad_());
      REQUIRE(gpu_in.back().strides() == cpu_in.back().strides());
    }
    Tensor want = c.fn(cpu_in, kCPU);
    Tensor got = c.fn(gpu_in, gpu());
    CHECK(got.device() == gpu());
    check_same(c.name + " forward", got, want);
    if (!want.requires_grad()) continue;
    Generator g(seed + 99);
    Tensor upstream = randn(want.shape(), TensorOptions(kFloat64), &g).to(want.dtype());
    want.backward(upstream);
    got.backward(upstream.to(gpu()));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      check_same(c.name + " gradient of input " + std::to_string(i), gpu_in[i].grad(), cpu_in[i].grad());
      if (gpu_in[i].grad().defined()) CHECK(gpu_in[i].grad().device() == gpu());
    }
  }
}

void run_table(const std::vector<Case>& cases) {
  uint64_t seed = 500;
  for (const Case& c : cases) {
    seed += 16;
    SUBCASE(c.name.c_str()) { run_case(c, seed); }
  }
}

// Autocast's attention on both devices with S keys: heads inside the rows of (N, L, H·E)
// projections, as MultiheadAttention's, a key padding mask and dropout; the backward
// reads the bfloat16 copy of the output that autocast keeps. Each kernel choice: the
// tiled kernels take float32 copies. Both devices round P', g and scale · dS to
// bfloat16; a value summed in another order may round to the neighbouring bfloat16, so
// one bfloat16 step of tolerance.
void check_mixed_attention(int64_t S) {
  manual_seed(17);
  const int64_t N = 2, H = 3, L = 37, E = 16;
  const Tensor xq = randn({N, L, H * E}), xk = randn({N, S, H * E}), xv = randn({N, S, H * E}),
               up = randn({N, H, L, E});
  Tensor pad = ones({N, 1, 1, S}).gt(0.5);
  pad.narrow(3, S - 4, 4).narrow(0, 1, 1).fill_(false);  // sequence 1 has 4 padding keys
  for (cuda::AttentionKernel kernel : {cuda::AttentionKernel::Materialized, cuda::AttentionKernel::Tiled}) {
    cuda::set_attention_kernel(kernel);
    CAPTURE(static_cast<int>(kernel));
    std::vector<Tensor> cpu_in, gpu_in;
    for (const Tensor& t : {xq, xk, xv}) {
      cpu_in.push_back(t.detach().requires_grad_());
      gpu_in.push_back(t.to(gpu()).detach().requires_grad_());
    }
    auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({N, len, H, E}).transpose(1, 2); };
    Tensor cout, gout;
    {
      AutocastGuard autocast(kBFloat16);
      Generator a(3), b(3);
      cout = scaled_dot_product_attention(heads(cpu_in[0], L), heads(cpu_in[1], S), heads(cpu_in[2], S), pad, 0.2,
                                          false, std::nullopt, &a);
      gout = scaled_dot_product_attention(heads(gpu_in[0], L), heads(gpu_in[1], S), heads(gpu_in[2], S),
                                          pad.to(gpu()), 0.2, false, std::nullopt, &b);
    }
    check_same("forward", gout, cout, 0x1p-7);
    sum(mul(gout, up.to(gpu()))).backward();
    sum(mul(cout, up)).backward();
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      check_same("grad", gpu_in[i].grad(), cpu_in[i].grad(), 0x1p-7);
      CHECK(gpu_in[i].grad().dtype() == kFloat32);
    }
  }
  cuda::set_attention_kernel(cuda::AttentionKernel::Auto);
}

// Constants built on the device a case runs on.
Tensor ids(const std::vector<int64_t>& v, const Shape& shape, Device d) { return from_vector<int64_t>(v, shape).to(d); }

}  // namespace

// ====================================================================== everywhere

TEST_SUITE("everywhere") {
  TEST_CASE("the CUDA query API agrees with the build and the machine") {
    CHECK(cuda::device_count() >= 0);
    CHECK(cuda::is_available() == (cuda::device_count() > 0));
    CHECK(cuda::is_available() == cuda::unavailable_reason().empty());
    if (!cuda::is_built()) CHECK_FALSE(cuda::is_available());
    // Never an error: nothing to wait for or to free without a GPU.
    cuda::synchronize();
    cuda::empty_cache();
    MemoryStats s = memory_stats(Device("cuda"));
    CHECK(s.allocated_bytes >= 0);
    CHECK(config().find("  - CUDA: ") != std::string::npos);
  }

  TEST_CASE("the CUDA cache cap, the attention kernel and the BLAS choice, in every build") {
    CHECK(error_of([] { cuda::set_cache_limit(-5); }) == "[set_cache_limit] the cap must be at least 0 bytes, got -5");
    CHECK_FALSE(cuda::cache_limit().has_value());  // none by default
    cuda::set_cache_limit(int64_t{1} << 30);
    CHECK(cuda::cache_limit() == (int64_t{1} << 30));
    cuda::set_cache_limit(std::nullopt);
    CHECK_FALSE(cuda::cache_limit().has_value());
    CHECK(cuda::attention_kernel() == cuda::AttentionKernel::Auto);
    cuda::set_attention_kernel(cuda::AttentionKernel::Tiled);
    CHECK(cuda::attention_kernel() == cuda::AttentionKernel::Tiled);
    CHECK(error_of([] { cuda::set_attention_kernel(static_cast<cuda::AttentionKernel>(7)); }) ==
          "[set_attention_kernel] unknown kernel choice 7");
    CHECK(cuda::attention_kernel() == cuda::AttentionKernel::Tiled);  // unchanged by the error
    cuda::set_attention_kernel(cuda::AttentionKernel::Auto);
    // Before any set_preferred_blas_library call (no case before this one makes one, and
    // gpu_check.sh runs each case alone), KILN_CUDA_BLAS picks; its value from the caller's
    // environment is put back at the end of the case.
    const char* outer = std::getenv("KILN_CUDA_BLAS");
    const std::string saved = outer ? outer : "";
    unsetenv("KILN_CUDA_BLAS");
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublaslt);  // the default
    setenv("KILN_CUDA_BLAS", "cublas", 1);
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublas);
    setenv("KILN_CUDA_BLAS", "cublaslt", 1);
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublaslt);
    setenv("KILN_CUDA_BLAS", "cuBLAS-XT", 1);
    CHECK(error_of([] { (void)cuda::preferred_blas_library(); }) ==
          "[preferred_blas_library] KILN_CUDA_BLAS must be cublas or cublaslt, got 'cuBLAS-XT'");
    cuda::set_preferred_blas_library(cuda::BlasLibrary::Cublas);
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublas);
    CHECK(error_of([] { cuda::set_preferred_blas_library(static_cast<cuda::BlasLibrary>(5)); }) ==
          "[set_preferred_blas_library] unknown library choice 5");
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublas);
    setenv("KILN_CUDA_BLAS", "cublaslt", 1);  // a choice made in the program outranks the environment
    CHECK(cuda::preferred_blas_library() == cuda::BlasLibrary::Cublas);
    if (outer) setenv("KILN_CUDA_BLAS", saved.c_str(), 1);
    else unsetenv("KILN_CUDA_BLAS");
    cuda::set_preferred_blas_library(cuda::BlasLibrary::Cublaslt);
    CHECK_FALSE(cuda::blas_tuning());  // off by default: bitwise repeatable runs
    cuda::set_blas_tuning(true);
    CHECK(cuda::blas_tuning());
    cuda::set_blas_tuning(false);
    CHECK_FALSE(cuda::blas_tuning());
  }

  TEST_CASE("a CPU-only build: asking for CUDA is an error that names the device") {
    if (cuda::is_built()) return;
    const std::string msg = "[device] CUDA is not available in this build of Kiln (asked for cuda:0)";
    CHECK(cuda::unavailable_reason() == "CUDA is not available in this build of Kiln");
    CHECK(cuda::device_count() == 0);
    CHECK(error_of([] { (void)zeros({2}, Device("cuda:0")); }) == msg);
    CHECK(error_of([] { (void)ones({2, 3}).to(Device("cuda")); }) == msg);
    CHECK(error_of([] { (void)randn({2}, TensorOptions(kFloat64).device(Device("cuda"))); }) == msg);
    CHECK(config().find("  - CUDA: not built") != std::string::npos);
    MemoryStats s = memory_stats(Device("cuda:0"));
    CHECK(s.allocations == 0);
    CHECK(s.system_allocations == 0);
    // A module asked to move stays where it was, whole.
    nn::Linear lin(3, 2);
    CHECK(error_of([&] { lin.to(Device("cuda")); }) == msg);
    for (const Tensor& p : lin.parameters()) CHECK(p.device() == kCPU);
  }

  TEST_CASE("a CUDA build without a usable GPU: asking for one is an error that says why") {
    if (!cuda::is_built() || cuda::is_available()) return;
    const std::string reason = cuda::unavailable_reason();
    const std::string prefix = "CUDA is built but no GPU is usable: ";
    REQUIRE(reason.rfind(prefix, 0) == 0);
    const std::string why = reason.substr(prefix.size());
    CHECK_FALSE(why.empty());
    CHECK(cuda::device_count() == 0);
    CHECK(error_of([] { (void)zeros({2}, Device("cuda:0")); }) ==
          "[device] CUDA is built but no GPU is usable (asked for cuda:0): " + why);
    CHECK(error_of([] { (void)ones({2}).to(Device("cuda:1")); }) ==
          "[device] CUDA is built but no GPU is usable (asked for cuda:1): " + why);
    CHECK(config().find("  - CUDA: built for CUDA ") != std::string::npos);
    CHECK(config().find("no GPU usable: " + why) != std::string::npos);
    nn::Linear lin(3, 2);
    CHECK(error_of([&] { lin.to(Device("cuda")); }).rfind("[device] CUDA is built but no GPU is usable", 0) == 0);
    for (const Tensor& p : lin.parameters()) CHECK(p.device() == kCPU);
    // CPU work is unaffected, and loads no cuBLAS (150 MB resident once loaded).
    CHECK(ones({2}).sum().item() == 2.0);
    CHECK(matmul(ones({8, 8}), ones({8, 8})).sum().item() == 512.0);
    CHECK_FALSE(library_mapped("libcublas"));
  }

  TEST_CASE("with a GPU: cuBLAS is loaded by the first GPU product") {
    if (!cuda::is_available()) return;
    CHECK(config().find(" loaded)") != std::string::npos);  // its version, from the library
    const Tensor a = ones({8, 8}, TensorOptions(kFloat32).device(gpu()));
    CHECK(matmul(a, a).sum().item() == 512.0);
    CHECK(library_mapped("libcublasLt"));
  }

  TEST_CASE("with a GPU: a device index past the last GPU is an error") {
    if (!cuda::is_available()) return;
    const int n = cuda::device_count();
    const Device past(DeviceType::CUDA, n);
    CHECK(error_of([&] { (void)zeros({2}, past); }) ==
          "[device] " + past.str() + " does not exist (this machine has " + std::to_string(n) + " CUDA device" +
              (n == 1 ? "" : "s") + ")");
  }
}

// ====================================================================== the GPU suite

// Products in every layout matmul handles (and linear's), for run_table.
std::vector<Case> matmul_cases() {
  return {
      {"1-D . 1-D", [](V x, Device) { return matmul(x[0], x[1]); }, {R({7}), R({7})}},
      {"2-D @ 2-D", [](V x, Device) { return matmul(x[0], x[1]); }, {R({5, 3}), R({3, 4})}},
      {"1-D @ 3-D", [](V x, Device) { return matmul(x[0], x[1]); }, {R({3}), R({2, 3, 2})}},
      {"3-D @ 1-D", [](V x, Device) { return matmul(x[0], x[1]); }, {R({2, 2, 3}), R({3})}},
      {"batched", [](V x, Device) { return matmul(x[0], x[1]); }, {R({3, 4, 5}), R({3, 5, 6})}},
      {"broadcast batch (2,1,3,4)@(5,4,2)", [](V x, Device) { return matmul(x[0], x[1]); },
       {R({2, 1, 3, 4}), R({5, 4, 2})}},
      {"stride-0 batch", [](V x, Device) { return matmul(x[0].expand({3, 2, 3}), x[1]); },
       {R({1, 2, 3}), R({3, 3, 2})}},
      {"K = 1", [](V x, Device) { return matmul(x[0], x[1]); }, {R({3, 1}), R({1, 4})}},
      {"a.t() @ b.t()", [](V x, Device) { return matmul(x[0].t(), x[1].t()); }, {R({3, 2}), R({4, 3})}},
      {"transposed and stepped leaves", [](V x, Device) { return matmul(x[0], x[1]); }, {T({2, 3}), S({3, 4})}},
      {"batched transposed", [](V x, Device) { return matmul(x[0], x[1]); }, {T({2, 4, 3}), T({2, 3, 5})}},
      {"batched permuted (not a gemm layout)", [](V x, Device) { return matmul(x[0], x[1]); },
       {Pm({2, 3, 4}), R({2, 4, 3})}},
      {"permuted batch dims (copied)", [](V x, Device) { return matmul(x[0].permute({1, 0, 2, 3}), x[1]); },
       {R({3, 2, 4, 5}), R({2, 3, 5, 2})}},
      {"3-D @ 2-D folded", [](V x, Device) { return matmul(x[0], x[1]); }, {R({2, 3, 4}), R({4, 6})}},
      {"linear", [](V x, Device) { return linear(x[0], x[1], x[2]); }, {R({2, 3, 16}), R({24, 16}), R({24})}},
      {"bigger square", [](V x, Device) { return matmul(x[0], x[1]); }, {R({70, 65}), R({65, 80})}},
      {"attention shapes", [](V x, Device) { return matmul(softmax(matmul(x[0], x[1].transpose(-1, -2)), -1), x[2]); },
       {R({2, 4, 7, 8}), R({2, 4, 9, 8}), R({2, 4, 9, 8})}},
  };
}

// Sets the preferred cuBLAS interface for a scope.
struct PreferredBlas {
  explicit PreferredBlas(cuda::BlasLibrary l) : previous(cuda::preferred_blas_library()) {
    cuda::set_preferred_blas_library(l);
  }
  ~PreferredBlas() { cuda::set_preferred_blas_library(previous); }
  cuda::BlasLibrary previous;
};

struct BlasTuning {
  BlasTuning() : previous(cuda::blas_tuning()) { cuda::set_blas_tuning(true); }
  ~BlasTuning() { cuda::set_blas_tuning(previous); }
  bool previous;
};

TEST_SUITE("gpu") {
  // ---------------------------------------------------------------- copies and fills
  TEST_CASE("copies between the CPU and the GPU, every dtype pair, any strides") {
    const std::vector<DType> dtypes = {kFloat32, kFloat64, kInt64, kBool, kBFloat16};
    Tensor src = from_vector<double>({-2.5, -1, 0, 0.5, 1, 2.75, 3, -0.25, 7, 0, -7.5, 1e10}, {3, 4});
    for (DType from : dtypes) {
      for (DType to : dtypes) {
        CAPTURE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
        Tensor s = src.to(from);
        // contiguous, transposed, stepped, expanded sources; the cast on either side
        for (const Tensor& view : {s, s.t(), s.slice(1, 0, 4, 2), s.select(0, 1).unsqueeze(0).expand({3, 4})}) {
          Tensor want = view.to(to);
          check_same("cast on the GPU", view.to(gpu()).to(to), want);
          check_same("cast on the way up", view.to(to).to(gpu()), want);
          check_same("back to the CPU", view.to(gpu()).to(to).to(kCPU), want);
        }
      }
    }
    // Into strided views: copy_ from the CPU into a GPU column, from a GPU view into a CPU one.
    Tensor dst = zeros({3, 4}, TensorOptions(kFloat64).device(gpu()));
    Tensor col = dst.select(1, 2);
    col.copy_(from_vector<int64_t>({5, 6, 7}, {3}));
    Tensor cpu_dst = zeros({3, 4}, kFloat64);
    cpu_dst.select(1, 2).copy_(from_vector<int64_t>({5, 6, 7}, {3}));
    check_same("copy_ into a strided GPU view", dst, cpu_dst);
    Tensor host = zeros({4, 3}, kFloat32);
    host.t().copy_(dst);  // GPU contiguous -> CPU transposed, with a cast
    check_same("copy_ from the GPU into a strided CPU view", host, cpu_dst.t().contiguous().to(kFloat32));
    // Within the GPU: strided to strided with a cast.
    Tensor g2 = zeros({4, 3}, TensorOptions(kFloat32).device(gpu()));
    g2.t().copy_(dst);
    check_same("copy_ within the GPU", g2, cpu_dst.t().contiguous().to(kFloat32));
    // Element access copies to the host; set writes one element.
    CHECK(dst.at({1, 2}) == 6.0);
    dst.set({0, 0}, 9.5);
    CHECK(dst.at({0, 0}) == 9.5);
    CHECK(dst.sum().item() == 27.5);
    CHECK(dst.to_vector<double>()[2] == 5.0);
    CHECK(dst.str().find(gpu().is_cpu() ? "tensor(" : "device='cuda:0'") != std::string::npos);
  }

  TEST_CASE("fill, arange, eye on the GPU, every dtype") {
    for (DType t : {kFloat32, kFloat64, kInt64, kBool, kBFloat16}) {
      CAPTURE(std::string(dtype_name(t)));
      TensorOptions o(t);
      check_same("zeros", zeros({2, 3}, o.device(gpu())), zeros({2, 3}, o));
      check_same("ones", ones({5}, o.device(gpu())), ones({5}, o));
      check_same("full", full({2, 2}, 3.75, o.device(gpu())), full({2, 2}, 3.75, o));
      check_same("eye", eye(3, 4, o.device(gpu())), eye(3, 4, o));
      Tensor a = zeros({4, 5}, o.device(gpu())), b = zeros({4, 5}, o);
      a.slice(1, 1, 5, 2).fill_(2.0);
      b.slice(1, 1, 5, 2).fill_(2.0);
      check_same("fill_ of a strided view", a, b);
    }
    for (DType t : {kFloat32, kFloat64, kInt64, kBFloat16}) {
      check_same("arange", arange(-3, 7.5, 0.7, TensorOptions(t).device(gpu())), arange(-3, 7.5, 0.7, t), 1e-300);
      check_same("arange int", arange(10, TensorOptions(t).device(gpu())), arange(10, t));
    }
    check_same("arange float32 fine steps", arange(0, 1, 0.1, TensorOptions(kFloat32).device(gpu())),
               arange(0, 1, 0.1, kFloat32), 1e-300);
  }

  TEST_CASE("bfloat16 ops on the GPU: float32 math rounded once, as on the CPU") {
    // Both devices stage bfloat16 through float32 (backend/bfloat16_staged.h) and round
    // with the same rule: exact where the float32 kernels agree bit for bit, within one
    // bfloat16 step where float32 results differ in their last bits (transcendentals,
    // sums in another order).
    const double exact = 1e-300, step = 0x1p-7;
    manual_seed(15);
    Tensor a = randn({8, 33}).to(kBFloat16), b = randn({8, 33}).to(kBFloat16), w = randn({33, 5}).to(kBFloat16);
    Tensor ga = a.to(gpu()), gb = b.to(gpu()), gw = w.to(gpu());
    check_same("add", add(ga, gb), add(a, b), exact);
    check_same("mul", mul(ga, gb), mul(a, b), exact);
    check_same("div", div(ga, gb), div(a, b), exact);
    check_same("add alpha", add(ga, gb, 0.3), add(a, b, 0.3), exact);
    check_same("mul scalar", mul(ga, 0.1), mul(a, 0.1), exact);
    check_same("where", where(gt(ga, gb), ga, gb), where(gt(a, b), a, b), exact);
    check_same("lt", lt(ga, gb), lt(a, b));
    check_same("relu", relu(ga), relu(a), exact);
    check_same("exp", exp(ga), exp(a), step);
    check_same("gelu", gelu(ga), gelu(a), step);
    check_same("sum", sum(ga, {1}), sum(a, {1}), step);
    check_same("mean", mean(ga), mean(a), step);
    check_same("amax", amax(ga, {0}), amax(a, {0}), exact);
    check_same("softmax", softmax(ga, -1), softmax(a, -1), step);
    check_same("layer_norm", layer_norm(ga, {33}), layer_norm(a, {33}), step);
    check_same("matmul", matmul(ga, gw), matmul(a, w), step);
    check_same("cat", cat({ga, gb}, 1), cat({a, b}, 1), exact);
    check_same("gather", gather(ga, 1, tensor({{3}, {0}}).to(gpu())), gather(a, 1, tensor({{3}, {0}})), exact);
    Tensor ta = ga.detach().requires_grad_(), ca = a.detach().requires_grad_();
    sum(mul(gelu(ta), gb)).backward();
    sum(mul(gelu(ca), b)).backward();
    check_same("backward", ta.grad(), ca.grad(), step);
    CHECK(ta.grad().dtype() == kBFloat16);
  }

  TEST_CASE("autocast: the mixed matmul (bf16 operands, fp32 output) and its gradients match the CPU's") {
    // The GPU's product is cublasGemmStridedBatchedEx (CUDA_R_16BF in, CUDA_R_32F out,
    // CUBLAS_COMPUTE_32F), the CPU's oneDNN's (or OpenBLAS on the widened values): the same
    // bfloat16 products summed in float32 in another order, so float32's tolerance. The
    // mixed attention rounds P', g and scale · dS to bfloat16 on both devices; a value
    // summed in another order may round to the neighbouring bfloat16: one bfloat16 step.
    manual_seed(16);
    const Tensor a = randn({3, 9, 33}), b = randn({33, 7}), bb = randn({1, 33, 5}), w = randn({7, 33}) * 0.2,
                 bias = randn({7}), q = randn({2, 2, 6, 8}), c = randn({3, 9, 7});
    const Tensor ga = a.to(gpu()), gb = b.to(gpu()), gbb = bb.to(gpu()), gq = q.to(gpu());
    Tensor lw = w.detach().requires_grad_(), glw = w.to(gpu()).detach().requires_grad_();
    Tensor lx = a.detach().requires_grad_(), glx = ga.detach().requires_grad_();
    {
      AutocastGuard autocast(kBFloat16);
      check_same("matmul", matmul(ga, gb), matmul(a, b));
      check_same("broadcast batch", matmul(ga, gbb.expand({3, 33, 5})), matmul(a, bb.expand({3, 33, 5})));
      check_same("transposed", matmul(gb.t(), ga.transpose(1, 2)), matmul(b.t(), a.transpose(1, 2)));
      Tensor gy = linear(glx, glw, bias.to(gpu())), y = linear(lx, lw, bias);
      check_same("linear", gy, y);
      sum(mul(gy, c.to(gpu()))).backward();
      sum(mul(y, c)).backward();
      check_same("attention", scaled_dot_product_attention(gq, gq, gq), scaled_dot_product_attention(q, q, q),
                 0x1p-7);
    }
    check_same("linear grad x", glx.grad(), lx.grad());
    check_same("linear grad w", glw.grad(), lw.grad());
    CHECK(glw.grad().dtype() == kFloat32);
  }

  TEST_CASE("autocast: the mixed attention (bf16 products, fp32 softmax), 29 keys, matches the CPU's") {
    check_mixed_attention(29);  // the row kernels' general loop
  }

  // 32 keys: the row kernels' packed loop (rows in registers). Its rows of 32 (16-byte
  // aligned) also send cuBLAS to its Hopper kernels, whose stores (through the tensor
  // memory accelerator) compute-sanitizer's initcheck does not see: every later read of
  // their output is reported as uninitialised, as it is for PyTorch's own bf16 matmul
  // (scripts/gpu_check.sh leaves this case out of initcheck, and only it).
  TEST_CASE("autocast: the mixed attention, 32 keys, matches the CPU's [cuBLAS TMA stores: not for initcheck]") {
    check_mixed_attention(32);
  }

  TEST_CASE("copies with casts, four elements at a time where the layout allows, give the CPU's values") {
    // cuda_copy.cu moves packs of four where both sides' rows are contiguous, a multiple
    // of four long and aligned (whole tensors, heads gathered by a permutation, a row
    // broadcast), and one element at a time otherwise (an odd inner length, a view one
    // element into its storage, a strided innermost dim).
    manual_seed(23);
    const Tensor base = randn({6, 5, 16});
    auto views = [](const Tensor& t) {
      return std::vector<Tensor>{t,
                                 t.transpose(0, 1),
                                 t.narrow(2, 4, 8),
                                 t.select(1, 2).unsqueeze(1).expand({6, 5, 16}),
                                 t.narrow(2, 1, 12),
                                 t.narrow(2, 0, 6),
                                 t.transpose(1, 2),
                                 t.reshape({-1}).narrow(0, 3, 421)};
    };
    for (DType from : {kFloat32, kBFloat16, kFloat64}) {
      for (DType to : {kFloat32, kBFloat16, kFloat64}) {
        CAPTURE(std::string(dtype_name(from)));
        CAPTURE(std::string(dtype_name(to)));
        const Tensor c = base.to(from), g = c.to(gpu());
        const std::vector<Tensor> cv = views(c), gv = views(g);
        for (size_t i = 0; i < cv.size(); ++i) {
          CAPTURE(i);
          check_same("cast", gv[i].to(to), cv[i].to(to), 1e-300);
          check_same("contiguous", gv[i].to(to).transpose(0, -1).contiguous(), cv[i].to(to).transpose(0, -1).contiguous(),
                     1e-300);
        }
      }
    }
  }

  TEST_CASE("fused relu_dropout: tails, unaligned views and autocast's bfloat16 copy give the CPU's bits") {
    // cuda_dropout.cu takes four elements a thread, as packs where aligned: lengths
    // that are not a multiple of four, and views one element into their storage (no
    // aligned pack), run its other branches.
    manual_seed(41);
    for (int64_t n : {1, 7, 4099}) {
      CAPTURE(n);
      const Tensor x = randn({n + 1}), up = randn({n});
      Tensor cx = x.narrow(0, 1, n).detach().requires_grad_();
      Tensor gx = x.to(gpu()).narrow(0, 1, n).detach().requires_grad_();
      Generator a(77), b(77);
      Tensor cy = relu_dropout(cx, 0.3, true, &a), gy = relu_dropout(gx, 0.3, true, &b);
      check_same("forward", gy, cy, 1e-300);
      sum(mul(gy, up.to(gpu()))).backward();
      sum(mul(cy, up)).backward();
      check_same("backward", gx.grad(), cx.grad(), 1e-300);
      Generator c(78), d(78);
      check_same("dropout alone", dropout(gx, 0.3, true, &d), dropout(cx, 0.3, true, &c), 1e-300);
    }
    // Under autocast (recording) the op writes y and its bfloat16 copy in one pass, the
    // next linear reads the copy, and the backward tests y > 0 on the copy's bits.
    const Tensor h = randn({37, 24}), w = randn({5, 24}) * 0.3, up = randn({37, 5});
    Tensor ch = h.detach().requires_grad_(), gh = h.to(gpu()).detach().requires_grad_();
    Tensor cout, gout;
    {
      AutocastGuard autocast(kBFloat16);
      Generator a(5), b(5);
      cout = linear(relu_dropout(ch, 0.2, true, &a), w);
      gout = linear(relu_dropout(gh, 0.2, true, &b), w.to(gpu()));
    }
    check_same("autocast forward", gout, cout);
    sum(mul(gout, up.to(gpu()))).backward();
    sum(mul(cout, up)).backward();
    check_same("autocast backward", gh.grad(), ch.grad());
    CHECK(gh.grad().dtype() == kFloat32);
  }

  TEST_CASE("add_layer_norm under autocast writes its bfloat16 copy in the same pass, forward and backward as the CPU") {
    // Rows of 40 (one warp each) and of 2100 (a block each): the copy the next linear
    // reads is written by the thread that writes y.
    manual_seed(43);
    for (int64_t n : {40, 2100}) {
      CAPTURE(n);
      const Tensor x = randn({9, n}), r = randn({9, n}), w = randn({n}), b = randn({n}), lw = randn({3, n}) * 0.1,
                   up = randn({9, 3});
      std::vector<Tensor> c = {x.detach().requires_grad_(), r.detach().requires_grad_(), w.detach().requires_grad_()};
      std::vector<Tensor> g;
      for (const Tensor& t : c) g.push_back(t.detach().to(gpu()).requires_grad_());
      Tensor cy, gy;
      {
        AutocastGuard autocast(kBFloat16);
        cy = linear(add_layer_norm(c[0], c[1], {n}, c[2], b), lw);
        gy = linear(add_layer_norm(g[0], g[1], {n}, g[2], b.to(gpu())), lw.to(gpu()));
      }
      check_same("forward", gy, cy);
      sum(mul(gy, up.to(gpu()))).backward();
      sum(mul(cy, up)).backward();
      for (size_t i = 0; i < c.size(); ++i) {
        CAPTURE(i);
        check_same("grad", g[i].grad(), c[i].grad());
      }
    }
  }

  TEST_CASE("random fills give the CPU's numbers for the same seed") {
    for (DType t : {kFloat32, kFloat64}) {
      CAPTURE(std::string(dtype_name(t)));
      TensorOptions o(t);
      Generator a(42), b(42);
      // uniform and bernoulli bit for bit (rtol 1e-300: exact in practice)
      check_same("rand", rand({1001}, o.device(gpu()), &a), rand({1001}, o, &b), 1e-300);
      check_same("bernoulli p=0.3", bernoulli({999}, 0.3, o.device(gpu()), &a), bernoulli({999}, 0.3, o, &b), 1e-300);
      // normal through the device's log and cos: equal to the last bits
      check_same("randn", randn({1003}, o.device(gpu()), &a), randn({1003}, o, &b));
      // In place, from the default generator.
      Tensor ga = empty({7, 9}, o.device(gpu())), ca = empty({7, 9}, o);
      manual_seed(8);
      ga.t().uniform_(-2, 3);
      manual_seed(8);
      ca.t().uniform_(-2, 3);
      check_same("uniform_ of a transposed view", ga, ca, 1e-300);
      manual_seed(9);
      ga.normal_(1.5, 0.5);
      manual_seed(9);
      ca.normal_(1.5, 0.5);
      check_same("normal_", ga, ca);
      CHECK(a.get_state().offset == b.get_state().offset);
    }
    Generator a(7), b(7);
    check_same("randint", randint(-5, 1000, {2001}, TensorOptions(kInt64).device(gpu()), &a),
               randint(-5, 1000, {2001}, kInt64, &b));
    check_same("bernoulli bool", bernoulli({33}, 0.5, TensorOptions(kBool).device(gpu()), &a),
               bernoulli({33}, 0.5, kBool, &b));
    check_same("bernoulli int64 p=1", bernoulli({9}, 1.0, TensorOptions(kInt64).device(gpu()), &a),
               bernoulli({9}, 1.0, kInt64, &b));
    Tensor p = rand({50}, TensorOptions(kFloat64), &b);
    Generator c(3), d(3);
    check_same("bernoulli of a probability tensor", bernoulli(p.to(gpu()), &c), bernoulli(p, &d));
    Tensor x = randn({6, 7}, TensorOptions(kFloat32), &b);
    Generator e(11), f(11);
    check_same("dropout masks", dropout(x.to(gpu()), 0.35, true, &e), dropout(x, 0.35, true, &f));
  }

  // ---------------------------------------------------------------- exact (integer and bool) kernels
  TEST_CASE("integer and bool kernels, exactly") {
    Tensor i = from_vector<int64_t>({-7, 3, 0, 12, -1, 5, 5, -3}, {2, 4});
    Tensor j = from_vector<int64_t>({2, 3, -4, 12, 1, 0, 6, -3}, {2, 4});
    Tensor bi = i.to(gpu()), bj = j.to(gpu());
    check_same("int neg", neg(bi), neg(i));
    check_same("int abs", abs(bi), abs(i));
    check_same("int sign", sign(bi), sign(i));
    check_same("int relu", relu(bi), relu(i));
    check_same("int clamp", clamp(bi, -2.5, 4.5), clamp(i, -2.5, 4.5));
    check_same("int clamp min", clamp(bi, 0, std::nullopt), clamp(i, 0, std::nullopt));
    check_same("int add scalar", add(bi, 4.0), add(i, 4.0));
    check_same("int mul scalar", mul(bi, -3.0), mul(i, -3.0));
    check_same("int rsub", rsub(bi, 10.0), rsub(i, 10.0));
    check_same("int add", add(bi, bj), add(i, j));
    check_same("int sub alpha", sub(bi, bj, 2.0), sub(i, j, 2.0));
    check_same("int mul broadcast", mul(bi, bj.select(0, 1)), mul(i, j.select(0, 1)));
    check_same("int maximum", maximum(bi, bj), maximum(i, j));
    check_same("int minimum", minimum(bi, bj.t().t()), minimum(i, j));
    check_same("int true division (float)", div(bi, add(bj, 20.0)), div(i, add(j, 20.0)));
    check_same("int sum all", sum(bi), sum(i));
    check_same("int sum dim 0", sum(bi, {0}), sum(i, {0}));
    check_same("int amax dim 1", amax(bi, {1}), amax(i, {1}));
    check_same("int argmax (ties: the first)", argmax(bi, 1), argmax(i, 1));
    check_same("int argmin", argmin(bi, 0), argmin(i, 0));
    check_same("int where", where(gt(bi, bj), bi, bj), where(gt(i, j), i, j));
    check_same("int masked_fill", masked_fill(bi, lt(bi, 0.0), 99), masked_fill(i, lt(i, 0.0), 99));
    struct Comparison {
      const char* name;
      Tensor (*f)(const Tensor&, const Tensor&);
    };
    const Comparison comparisons[] = {{"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}};
    for (const Comparison& c : comparisons) {
      check_same(std::string("int ") + c.name, c.f(bi, bj), c.f(i, j));
      Tensor x = i.to(kFloat32), y = j.to(kFloat32);
      check_same(std::string("float ") + c.name, c.f(x.to(gpu()), y.to(gpu()).t().t()), c.f(x, y));
      Tensor p = gt(i, 0.0), q = gt(j, 0.0);
      check_same(std::string("bool ") + c.name, c.f(p.to(gpu()), q.to(gpu())), c.f(p, q));
    }
    Tensor p = gt(i, 0.0), q = gt(j, 1.0);
    Tensor gp = p.to(gpu()), gq = q.to(gpu());
    check_same("logical_and", logical_and(gp, gq), logical_and(p, q));
    check_same("logical_or", logical_or(gp, gq), logical_or(p, q));
    check_same("logical_not", logical_not(gp), logical_not(p));
    check_same("bool sum", sum(gp, {1}), sum(p, {1}));
    check_same("bool where", where(gp, gq, gp), where(p, q, p));
    // NaN: comparisons false, max/argmax take the first NaN, as on the CPU.
    Tensor f = from_vector<double>({1, NAN, 3, 3, -INFINITY, NAN, 2, 0}, {2, 4});
    Tensor gf = f.to(gpu());
    check_same("argmax with NaN", argmax(gf, 1), argmax(f, 1));
    check_same("max with NaN", max(gf, 1).values, max(f, 1).values);
    check_same("min dim 0 indices", min(gf, 0).indices, min(f, 0).indices);
    check_same("amax with NaN", amax(gf), amax(f));
    check_same("eq with NaN", eq(gf, gf), eq(f, f));
    check_same("maximum with NaN", maximum(gf, zeros_like(gf)), maximum(f, zeros_like(f)));
    check_same("relu keeps NaN", relu(gf), relu(f));
  }

  TEST_CASE("reductions of every shape the kernels split into") {
    // (long rows: one block per row, or split over blocks past 65536; columns; mixed)
    for (const Shape& s : std::vector<Shape>{{1000}, {3, 1000}, {1000, 3}, {2, 300, 70}, {5, 1, 7, 33}, {1},
                                             {200001}, {3, 70000}}) {
      CAPTURE(shape_str(s));
      Generator g(9);
      Tensor x = randn(s, TensorOptions(kFloat64), &g);
      for (DType t : {kFloat64, kFloat32, kInt64}) {
        Tensor xc = t == kInt64 ? mul(x, 100.0).to(kInt64) : x.to(t);
        Tensor xg = xc.to(gpu());
        for (int64_t d = 0; d < xc.dim(); ++d) {
          CAPTURE(d);
          check_same("sum dim", sum(xg, {d}), sum(xc, {d}));
          check_same("amax dim", amax(xg, {d}, true), amax(xc, {d}, true));
          check_same("max dim", max(xg, d).values, max(xc, d).values);
          check_same("argmax dim", argmax(xg, d), argmax(xc, d));
          check_same("argmin dim", argmin(xg, d, true), argmin(xc, d, true));
        }
        check_same("sum all", sum(xg), sum(xc));
        check_same("amin all", amin(xg), amin(xc));
        if (xc.dim() >= 3) check_same("sum dims 0,2", sum(xg, {0, 2}), sum(xc, {0, 2}));
        if (xc.dim() >= 2) check_same("sum of a transposed view", sum(xg.transpose(0, -1), {0}),
                                      sum(xc.transpose(0, -1), {0}));
      }
    }
  }

  // ---------------------------------------------------------------- differentiable ops
  TEST_CASE("cuBLAS (preferred_blas_library Cublas): every matmul layout, linear's bias broadcast first") {
    PreferredBlas plain(cuda::BlasLibrary::Cublas);
    std::vector<Case> cases = matmul_cases();
    cases.push_back({"linear with its bias", [](V x, Device) { return linear(x[0], x[1], x[2]); },
                     {R({4, 16, 128}), T({96, 128}), R({96})}});
    run_table(cases);
  }

  TEST_CASE("cuBLASLt (preferred_blas_library Cublaslt): every matmul layout, linear with its bias in the epilogue") {
    // Unbatched float32 products and linear's bias through cublasLtMatmul; the rest (float64,
    // batches) stays on cuBLAS. Odd sizes give the heuristic other kernels than the
    // aligned ones (or none: then cuBLAS); a bias 4 bytes past alignment takes cuBLAS.
    PreferredBlas lt(cuda::BlasLibrary::Cublaslt);
    std::vector<Case> cases = matmul_cases();
    cases.push_back({"linear, odd sizes, a bias at an odd offset",
                     [](V x, Device) { return linear(x[0], x[1], x[2].narrow(0, 1, 23)); },
                     {R({37, 29}), R({23, 29}), R({24})}});
    cases.push_back({"linear, transposed weight, aligned sizes", [](V x, Device) { return linear(x[0], x[1], x[2]); },
                     {R({4, 16, 128}), T({96, 128}), R({96})}});
    cases.push_back({"linear without bias", [](V x, Device) { return linear(x[0], x[1]); },
                     {R({64, 33}), R({40, 33})}});
    run_table(cases);
    // Autocast's mixed product with its bias in the epilogue, and its gradients.
    manual_seed(17);
    const Tensor a = randn({3, 9, 32}), w = randn({24, 32}) * 0.2, bias = randn({24}), c = randn({3, 9, 24});
    Tensor lw = w.detach().requires_grad_(), glw = w.to(gpu()).detach().requires_grad_();
    Tensor lx = a.detach().requires_grad_(), glx = a.to(gpu()).detach().requires_grad_();
    {
      AutocastGuard autocast(kBFloat16);
      Tensor gy = linear(glx, glw, bias.to(gpu())), y = linear(lx, lw, bias);
      check_same("mixed linear", gy, y);
      sum(mul(gy, c.to(gpu()))).backward();
      sum(mul(y, c)).backward();
    }
    check_same("mixed linear grad x", glx.grad(), lx.grad());
    check_same("mixed linear grad w", glw.grad(), lw.grad());
  }

  TEST_CASE("cuBLASLt tuned (set_blas_tuning): every matmul layout, linear's bias, an accumulating product") {
    // Each problem's algorithm timed among the heuristic's candidates on a scratch output:
    // the results must still be the CPU's to rounding, and a product that accumulates into
    // its output (the odd-offset bias: broadcast first, then beta = 1) must see its output
    // untouched by the timing launches. Another algorithm (split-K among them) adds the K
    // products in another order; with K = 256 an element moved by 1.4e-5 to 1.6e-5 under
    // compute-sanitizer's timing (float32 roundings of partial sums near 16), past the
    // table's 1e-5, so every product of the aligned case, its weight gradient's too (K =
    // rows), sums at most 64 terms.
    PreferredBlas lt(cuda::BlasLibrary::Cublaslt);
    BlasTuning tuning;
    std::vector<Case> cases = matmul_cases();
    cases.push_back({"linear, odd sizes, a bias at an odd offset (accumulates)",
                     [](V x, Device) { return linear(x[0], x[1], x[2].narrow(0, 1, 23)); },
                     {R({37, 29}), R({23, 29}), R({24})}});
    cases.push_back({"linear, aligned sizes, bias in the epilogue", [](V x, Device) { return linear(x[0], x[1], x[2]); },
                     {R({2, 32, 64}), R({64, 64}), R({64})}});
    run_table(cases);
  }

  // ------------------------------------------------ indexing, scatter, scan, sort and
  // sampling. No CUDA kernels yet: Backend's host-staged
  // defaults run them on the CPU, so results, errors and random draws must be the CPU's.
  TEST_CASE("the staged ops' errors and in-place writes match the CPU") {
    // gather, scatter, index_add, cumsum, sort, topk, one_hot and multinomial: the op
    // table's CUDA check.
    Tensor x = randn({3, 4});
    Tensor bad = from_vector<int64_t>({1, 4}, {2, 1});
    std::string on_cpu = error_of([&] { (void)gather(x, 1, bad); });
    CHECK(on_cpu == "[gather] index 4 is out of bounds for dim 1 with size 4");
    CHECK(error_of([&] { (void)gather(x.to(gpu()), 1, bad.to(gpu())); }) == on_cpu);
    Tensor neg = from_vector<double>({1, -1}, {2});
    CHECK(error_of([&] { (void)multinomial(neg.to(gpu()), 1); }) == error_of([&] { (void)multinomial(neg, 1); }));
    // In place on a GPU tensor: the staged result is written back into it.
    Tensor y = zeros({2, 3}, gpu());
    y.index_add_(1, from_vector<int64_t>({2, 2}, {2}).to(gpu()), ones({2, 2}, gpu()));
    check_same("index_add_ in place", y, from_vector<float>({0, 0, 2, 0, 0, 2}, {2, 3}));
  }

  TEST_CASE("losses without an op record, forward and backward") {
    run_table({
        {"nll_loss", [](V x, Device d) { return nll_loss(log_softmax(x[0], 1), ids({2, 0, 1}, {3}, d)); },
         {R({3, 4})}},
        {"mse_loss", [](V x, Device) { return mse_loss(x[0], x[1]); }, {R({3, 4}), T({3, 4})}},
    });
  }

  // ---- pointwise math and losses
  TEST_CASE("pointwise math and losses, forward and backward") {
    using RD = Reduction;
    // Class or element weights on the case's device, in the inputs' dtype.
    auto wts = [](const std::vector<double>& v, const Shape& shape, const Tensor& like) {
      return from_vector<double>(v, shape).to(like.dtype()).to(like.device());
    };
    run_table({
        {"nll_loss weighted", [wts](V x, Device d) {
           return nll_loss(log_softmax(x[0], 1), ids({2, 0, 1}, {3}, d), wts({0.5, 2, 1, 0.3}, {4}, x[0]));
         }, {R({3, 4})}},
        {"l1, smooth_l1", [](V x, Device) {
           return l1_loss(x[0], x[1], RD::None) + smooth_l1_loss(x[0], x[1], RD::None, 0.5);
         }, {R({3, 4}), R({4})}},
        {"bce with logits, weight, pos_weight", [wts](V x, Device) {
           return binary_cross_entropy_with_logits(x[0] * 20.0, x[1], wts({1.2, 0.3, 0.8}, {3, 1}, x[0]), RD::Sum,
                                                       wts({0.5, 1, 2, 3}, {4}, x[0]));
         }, {R({3, 4}), T({3, 4})}},
        {"kl_div batchmean, log_target", [](V x, Device) {
           return kl_div(x[0], x[1], RD::BatchMean) + kl_div(x[0], x[2], RD::BatchMean, true);
         }, {R({3, 4}), P({3, 4}), R({4})}},
    });
  }

  // Every case runs on both of the GPU's attention kernels (set_attention_kernel).
  std::vector<Case> attention_cases() {
    auto allowed = [](Device d) {
      return from_vector<bool>({1, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 0, 1}, {3, 5}).to(d);
    };
    auto key_ok = [](Device d) { return from_vector<bool>({1, 1, 1, 0, 0, 1, 1, 1, 1, 0}, {2, 1, 1, 5}).to(d); };
    return {
        {"sdpa 4-D", [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
         {R({2, 2, 3, 4}), R({2, 2, 5, 4}), R({2, 2, 5, 3})}},
        {"sdpa 3-D, bool mask", [allowed](V x, Device d) { return scaled_dot_product_attention(x[0], x[1], x[2], allowed(d)); },
         {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2})}},
        {"sdpa 2-D, float mask",
         [](V x, Device d) {
           return scaled_dot_product_attention(x[0], x[1], x[2], from_vector<double>({0.3, -1, 0, 2, -0.5}, {5})
                                                                     .to(x[0].dtype()).to(d));
         },
         {R({3, 4}), R({5, 4}), R({5, 3})}},
        {"sdpa causal, scale 0.7",
         [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true, 0.7); },
         {R({1, 2, 4, 3}), R({1, 2, 4, 3}), R({1, 2, 4, 3})}},
        {"sdpa heads inside rows, key padding",
         [key_ok](V x, Device d) {
           return scaled_dot_product_attention(x[0].transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2),
                                               key_ok(d));
         },
         {R({2, 3, 2, 4}), R({2, 5, 2, 4}), R({2, 5, 2, 3})}},
        {"sdpa transposed value", [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2].transpose(-2, -1)); },
         {R({2, 3, 4}), R({2, 5, 4}), R({2, 3, 5})}},
        {"sdpa expanded key", [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
         {R({3, 4, 8}), E(R({3, 6, 8})), R({3, 6, 5})}},
        {"sdpa dropout 0.3",
         [key_ok](V x, Device d) {
           Generator g(7);
           return scaled_dot_product_attention(x[0], x[1], x[2], key_ok(d), 0.3, false, std::nullopt, &g);
         },
         {R({2, 2, 3, 4}), R({2, 2, 5, 4}), R({2, 2, 5, 3})}},
        {"sdpa float mask with a gradient", [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
         {R({2, 3, 4}), R({2, 5, 4}), R({2, 5, 2}), R({3, 5})}},
        {"sdpa a query that may attend to nothing (zeros)",
         [](V x, Device d) {
           return scaled_dot_product_attention(x[0], x[1], x[2], from_vector<bool>({1, 1, 0, 0}, {2, 2}).to(d));
         },
         {R({2, 2, 3}), R({2, 2, 3}), R({2, 2, 3})}},
        // Keys a multiple of four: the materialising path's packed row kernels, a row of
        // at most 128 keys held in registers; one query may attend to nothing.
        {"sdpa 8 keys, a query that may attend to nothing, dropout",
         [](V x, Device d) {
           Generator g(9);
           // query 1 may attend to no key
           Tensor m = ne(arange(0, 3, 1, TensorOptions(kFloat64)).reshape({3, 1}).expand({3, 8}), 1.0).to(d);
           return scaled_dot_product_attention(x[0], x[1], x[2], m, 0.25, false, std::nullopt, &g);
         },
         {R({2, 2, 3, 4}), R({2, 2, 8, 4}), R({2, 2, 8, 3})}},
        {"sdpa 300 keys, dropout, heads inside rows",
         [](V x, Device d) {
           Generator g(5);
           Tensor q = x[0].transpose(1, 2), k = x[1].transpose(1, 2), v = x[2].transpose(1, 2);
           return scaled_dot_product_attention(q, k, v, Tensor(), 0.1, true, std::nullopt, &g).transpose(1, 2) +
                  0.0 * ones({1}, TensorOptions(x[0].dtype()).device(d));
         },
         {R({2, 300, 4, 16}), R({2, 300, 4, 16}), R({2, 300, 4, 8})}},
        // Heads of 64: several query and key tiles of the tiled kernels, neither a multiple
        // of the tile, a key-padding mask and dropout.
        {"sdpa 70 queries, 100 keys, heads of 64, bool mask, dropout",
         [](V x, Device d) {
           Generator g(11);
           Tensor pad = gt(arange(0, 100, 1, TensorOptions(kFloat64)).reshape({1, 1, 1, 100}), 80.5).to(d);
           return scaled_dot_product_attention(x[0], x[1], x[2], pad, 0.2, false, std::nullopt, &g);
         },
         {R({2, 2, 70, 64}), R({2, 2, 100, 64}), R({2, 2, 100, 48})}},
        {"sdpa causal, 45 queries and keys, heads of 128",
         [](V x, Device) { return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true); },
         {R({1, 2, 45, 128}), R({1, 2, 45, 128}), R({1, 2, 45, 128})}},
        // Heads wider than 128 take the path that materialises the scores.
        {"sdpa heads of 136, float mask, dropout",
         [](V x, Device) {
           Generator g(13);
           return scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.1, false, std::nullopt, &g);
         },
         {R({1, 2, 5, 136}), R({1, 2, 7, 136}), R({1, 2, 7, 130}), R({5, 7})}},
    };
  }

  // Sets the GPU's attention kernels for a scope, and Auto again after.
  struct AttentionKernelScope {
    explicit AttentionKernelScope(cuda::AttentionKernel k) { cuda::set_attention_kernel(k); }
    ~AttentionKernelScope() { cuda::set_attention_kernel(cuda::AttentionKernel::Auto); }
  };

  TEST_CASE("scaled_dot_product_attention, forward and backward: tiled kernels") {
    AttentionKernelScope scope(cuda::AttentionKernel::Tiled);
    run_table(attention_cases());
  }

  TEST_CASE("scaled_dot_product_attention, forward and backward: materialised scores") {
    AttentionKernelScope scope(cuda::AttentionKernel::Materialized);
    run_table(attention_cases());
  }


  TEST_CASE("attention keeps no (L, S) scores on the GPU, forward or backward") {
    if (on_cpu_stand_in()) return;  // the CPU keeps a block of rows per task: not this check
    const int64_t L = 1024;
    const int64_t scores_bytes = L * L * 4;  // one (L, S) float32 matrix: 4 MiB
    auto growth = [&](cuda::AttentionKernel kernel) {
      AttentionKernelScope scope(kernel);
      Tensor q = randn({1, 1, L, 32}).to(gpu()).requires_grad_(), k = randn({1, 1, L, 32}).to(gpu()).requires_grad_(),
             v = randn({1, 1, L, 32}).to(gpu()).requires_grad_();
      reset_peak_memory(gpu());
      const int64_t before = memory_stats(gpu()).allocated_bytes;
      // No causal flag: its (L, S) bool mask would be made by the op, a quarter of the scores.
      Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), 0.1);
      out.sum().backward();
      CHECK(q.grad().defined());
      return memory_stats(gpu()).peak_bytes - before;
    };
    const int64_t tiled = growth(cuda::AttentionKernel::Tiled), materialized = growth(cuda::AttentionKernel::Materialized);
    CAPTURE(tiled);
    CAPTURE(materialized);
    CHECK(tiled < scores_bytes / 4);  // the inputs' gradients, out and lse: 0.7 MB
    CHECK(materialized >= scores_bytes);  // the check sees scores where they are kept
  }

  TEST_CASE("to(device) is differentiable: the gradient comes back to the CPU") {
    Tensor x = randn({3, 4}, TensorOptions(kFloat64)).requires_grad_();
    Tensor y = (x.to(gpu()) * 2.0).sum();
    y.backward();
    CHECK(x.grad().device() == kCPU);
    check_same("gradient through to()", x.grad(), full({3, 4}, 2.0, kFloat64));
  }

  // ---------------------------------------------------------------- errors
  TEST_CASE("bad indices are the CPU's errors; mixing devices is an error") {
    Tensor w = randn({5, 3});
    Tensor bad = from_vector<int64_t>({1, 2, 7, 0, -1}, {5});
    std::string on_cpu = error_of([&] { (void)embedding(w, bad); });
    CHECK(on_cpu == "[embedding] index 7 out of range for an embedding of 5 rows (at position 2)");
    CHECK(error_of([&] { (void)embedding(w.to(gpu()), bad.to(gpu())); }) == on_cpu);
    Tensor logits = randn({3, 4});
    Tensor t = from_vector<int64_t>({1, 4, 2}, {3});
    std::string ce = error_of([&] { (void)cross_entropy(logits, t); });
    CHECK(ce == "[cross_entropy] target 4 out of range for 4 classes (at position 1)");
    CHECK(error_of([&] { (void)cross_entropy(logits.to(gpu()), t.to(gpu())); }) == ce);
    // The device stays usable after an error.
    check_same("after an error", embedding(w.to(gpu()), sub(t.to(gpu()), 1.0)), embedding(w, sub(t, 1.0)));
    if (on_cpu_stand_in()) return;
    Tensor a = ones({2, 3}), b = ones({2, 3}, gpu());
    CHECK(error_of([&] { (void)add(a, b); }) == "[add] expected all tensors on the same device, got cpu and cuda:0");
    CHECK(error_of([&] { (void)mul(b, a); }) == "[mul] expected all tensors on the same device, got cuda:0 and cpu");
    CHECK(error_of([&] { (void)matmul(a, b.t()); }).rfind("[matmul] expected all tensors on the same device", 0) == 0);
    CHECK(error_of([&] { (void)where(gt(b, 0.0), a, a); }).rfind("[where] expected all tensors on the same device", 0) ==
          0);
    CHECK(error_of([&] { (void)embedding(w.to(gpu()), bad); }).rfind("[embedding] expected all tensors", 0) == 0);
    CHECK(error_of([&] { (void)layer_norm(b, {3}, ones({3})); }).rfind("[layer_norm] expected all tensors", 0) == 0);
    CHECK(error_of([&] { b.add_(a); }).rfind("[add_] expected all tensors on the same device", 0) == 0);
  }

  TEST_CASE("embedding's backward: the CPU's bits, the same on every run") {
    // 4000 rows into 50: each index repeats ~80 times, where float atomics would add in
    // a different order on every run.
    Generator gen(21);
    Tensor idx = randint(0, 50, {4000}, TensorOptions(kInt64), &gen);
    Tensor g = randn({4000, 33}, TensorOptions(kFloat32), &gen);
    auto grad_on = [&](Device d) {
      Tensor w = randn({50, 33}, TensorOptions(kFloat32), nullptr).to(d).detach().requires_grad_();
      embedding(w, idx.to(d), 3).backward(g.to(d));
      return w.grad().to(kCPU).to_vector<float>();
    };
    const std::vector<float> want = grad_on(kCPU), first = grad_on(gpu()), second = grad_on(gpu());
    CHECK(first == want);
    CHECK(second == first);
    CHECK(want[3 * 33] == 0.0f);  // padding_idx 3 gets no gradient
  }

  TEST_CASE("set_cache_limit caps what the CUDA cache keeps") {
    CHECK(error_of([] { cuda::set_cache_limit(-1); }) == "[set_cache_limit] the cap must be at least 0 bytes, got -1");
    if (on_cpu_stand_in()) return;  // the CPU's cache is another one
    const int64_t cap = int64_t{1} << 20, big = int64_t{1} << 20;  // 4 MiB float32 blocks
    cuda::empty_cache();
    cuda::set_cache_limit(cap);
    CHECK(cuda::cache_limit() == cap);
    {
      std::vector<Tensor> blocks;
      for (int i = 0; i < 8; ++i) blocks.push_back(empty({big}, TensorOptions().device(gpu())));
    }  // 32 MiB freed: none of it fits under the cap
    Tensor small = zeros({16}, TensorOptions().device(gpu()));  // this allocation gives them back
    CHECK(memory_stats(gpu()).cached_bytes <= cap);
    const int64_t before = memory_stats(gpu()).system_allocations;
    { Tensor again = empty({big}, TensorOptions().device(gpu())); }
    CHECK(memory_stats(gpu()).system_allocations == before + 1);  // not kept, so cudaMalloc again
    { Tensor a = empty({1000}, TensorOptions().device(gpu())); }
    { Tensor b = empty({1000}, TensorOptions().device(gpu())); }  // small blocks still come back
    CHECK(memory_stats(gpu()).system_allocations == before + 2);
    CHECK(memory_stats(gpu()).cached_bytes > 0);
    cuda::set_cache_limit(0);  // lowering the cap gives back what is kept beyond it now
    CHECK(memory_stats(gpu()).cached_bytes == 0);
    cuda::set_cache_limit(std::nullopt);
    CHECK_FALSE(cuda::cache_limit().has_value());
    { Tensor c = empty({big}, TensorOptions().device(gpu())); }
    CHECK(memory_stats(gpu()).cached_bytes > 0);  // no cap: kept again
    check_same("after the caps", small, zeros({16}));
  }

  // ---------------------------------------------------------------- optimizers
  TEST_CASE("Adam, AdamW and SGD steps match the CPU's") {
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(variant);
      for (DType t : {kFloat32, kFloat64}) {
        auto make = [&](Device d) {
          manual_seed(5);
          auto m = std::make_shared<nn::Linear>(6, 3);
          m->to(t);
          m->to(d);
          return m;
        };
        auto cpu_m = make(kCPU), gpu_m = make(gpu());
        optim::AdamOptions o;
        o.lr = 0.01;
        o.weight_decay = variant == 1 || variant == 2 ? 0.1 : 0.0;
        o.amsgrad = variant == 2;
        std::unique_ptr<optim::Optimizer> oc, og;
        if (variant == 3) {
          optim::SGDOptions s;
          s.lr = 0.1;
          s.momentum = 0.9;
          oc = std::make_unique<optim::SGD>(cpu_m->parameters(), s);
          og = std::make_unique<optim::SGD>(gpu_m->parameters(), s);
        } else if (variant == 1) {
          oc = std::make_unique<optim::AdamW>(cpu_m->parameters(), o);
          og = std::make_unique<optim::AdamW>(gpu_m->parameters(), o);
        } else {
          oc = std::make_unique<optim::Adam>(cpu_m->parameters(), o);
          og = std::make_unique<optim::Adam>(gpu_m->parameters(), o);
        }
        Generator g(17);
        Tensor x = randn({8, 6}, TensorOptions(t), &g);
        for (int step = 0; step < 5; ++step) {
          for (auto [m, opt, xin] : {std::tuple{cpu_m.get(), oc.get(), x}, std::tuple{gpu_m.get(), og.get(), x.to(gpu())}}) {
            opt->zero_grad();
            m->forward(xin).pow(2.0).mean().backward();
            opt->step();
          }
        }
        check_same("weight", gpu_m->weight, cpu_m->weight, t == kFloat64 ? 1e-11 : 1e-5);
        check_same("bias", gpu_m->bias, cpu_m->bias, t == kFloat64 ? 1e-11 : 1e-5);
      }
    }
  }

  // Adam's multi-tensor launches (Backend::adam_step_many): up to 48 parameters a launch,
  // a block range per parameter, a grid-stride loop within one past 4096 blocks. 60
  // parameters (two launches) of sizes from 0 to past a million elements, and one whose
  // first gradient comes a step late (its own step count: a launch of its own). Aligned
  // tensors go four elements a thread, their last n mod 4 elements one a thread; a gradient 4
  // bytes past alignment (a view) takes the parameter one element a thread. The
  // arithmetic is the CPU's, operation for operation, without fused multiply-adds on
  // either side: the same bits.
  TEST_CASE("Adam's multi-tensor launches give the CPU's bits") {
    std::vector<Shape> shapes;
    for (int i = 0; i < 60; ++i) shapes.push_back({(i * 37) % 101});  // 0 (i = 0) to 100
    shapes[5] = {1100003};                                              // > 4096 blocks x 256
    shapes[17] = {4096 * 256 + 1};
    shapes[50] = {64, 33};
    const size_t late = 9, unaligned = 23, unaligned_big = 17;
    for (int variant = 0; variant < 2; ++variant) {
      CAPTURE(variant);
      optim::AdamOptions o;
      o.lr = 0.01;
      if (variant == 1) {
        o.weight_decay = 0.05;
        o.amsgrad = true;
      }
      Generator gen(31);
      std::vector<Tensor> cpu_p, gpu_p;
      for (const Shape& s : shapes) {
        Tensor init = randn(s, TensorOptions(), &gen);
        cpu_p.push_back(init.clone().requires_grad_());
        gpu_p.push_back(init.to(gpu()).requires_grad_());
      }
      auto make = [&](std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
        if (variant == 1) return std::make_unique<optim::AdamW>(ps, o);
        return std::make_unique<optim::Adam>(ps, o);
      };
      auto oc = make(cpu_p), og = make(gpu_p);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          if (i == late && step == 0) continue;
          Tensor g = randn(shapes[i], TensorOptions(), &gen);
          cpu_p[i].set_grad(g);
          if (i == unaligned || i == unaligned_big) {  // the gradient one element into a larger tensor
            const int64_t n = g.numel();
            Tensor big = zeros({n + 1}, TensorOptions().device(gpu()));
            big.narrow(0, 1, n).copy_(g.reshape({n}).to(gpu()));
            gpu_p[i].set_grad(big.narrow(0, 1, n).reshape(shapes[i]));
          } else {
            gpu_p[i].set_grad(g.to(gpu()));
          }
        }
        oc->step();
        og->step();
      }
      for (size_t i = 0; i < shapes.size(); ++i) {
        CAPTURE(i);
        CHECK(equal(gpu_p[i].detach().to(kCPU), cpu_p[i].detach()));
      }
    }
  }

  TEST_CASE("clip_grad_norm_ on the GPU") {
    Tensor a = randn({4, 5}).requires_grad_(), b = randn({7}).requires_grad_();
    Tensor ga = a.detach().to(gpu()).requires_grad_(), gb = b.detach().to(gpu()).requires_grad_();
    (a.pow(2.0).sum() * 3.0 + b.sum() * 5.0).backward();
    (ga.pow(2.0).sum() * 3.0 + gb.sum() * 5.0).backward();
    double nc = optim::clip_grad_norm_({a, b}, 1.0), ng = optim::clip_grad_norm_({ga, gb}, 1.0);
    CHECK(ng == doctest::Approx(nc).epsilon(1e-6));
    check_same("clipped gradient", ga.grad(), a.grad());
    double ic = optim::clip_grad_norm_({a, b}, 0.1, INFINITY), ig = optim::clip_grad_norm_({ga, gb}, 0.1, INFINITY);
    CHECK(ig == doctest::Approx(ic).epsilon(1e-6));
  }

  // ---------------------------------------------------------------- training on the GPU
  TEST_CASE("the toy translator of 000 trains to both pairs exactly on the GPU") {
    const ToyTask task = toy_task({{"ich mochte ein bier", "i want a beer ."}, {"ich mochte ein cola", "i want a coke ."}});
    const data::Vocab& tv = task.tgt_vocab;
    const std::vector<data::TokenPair>& ex = task.pairs;
    tr::Seq2SeqOptions o = toy_model(task, 16, 2, 1, 32, 0.0);
    manual_seed(7);
    tr::Seq2SeqTransformer model(o);
    model.to(gpu());
    data::PairDataLoader loader(ex, {.batch_size = 2, .shuffle = true, .seed = 3});
    tr::TrainerOptions t;
    t.epochs = 100;
    t.lr_factor = 0.5;
    t.warmup_steps = 10;
    t.label_smoothing = 0.0;
    t.progress = false;
    tr::Trainer trainer(model, loader, nullptr, t);
    trainer.fit();
    for (const Tensor& p : model.parameters()) CHECK(p.device() == gpu());
    std::vector<std::vector<int64_t>> src_rows;
    for (const auto& e : ex) src_rows.push_back(e.source);
    tr::DecodeOptions d;
    d.bos_id = tv.bos_id();
    d.eos_id = tv.eos_id();
    d.max_len = 10;
    Tensor src = data::pad_sequences(src_rows).to(gpu());
    std::vector<std::vector<int64_t>> out = tr::greedy_decode(model, src, d);
    REQUIRE(out.size() == 2);
    CHECK(tv.decode(out[0]) == "i want a beer .");
    CHECK(tv.decode(out[1]) == "i want a coke .");
    d.use_cache = false;
    CHECK(tr::greedy_decode(model, src, d) == out);
  }

  TEST_CASE("examples/translate_toy's corpus: 100% exact translations after training on the GPU") {
    const auto& train_pairs = translate_toy::training_pairs();
    const ToyTask task = toy_task(train_pairs);
    const data::Vocab &sv = task.src_vocab, &tv = task.tgt_vocab;
    const std::vector<data::TokenPair>& ex = task.pairs;
    // The example's model and schedule (examples/translate_toy/main.cpp defaults).
    tr::Seq2SeqOptions o = toy_model(task, 64, 4, 2, 128, 0.1, 64);
    o.pad_id = sv.pad_id();
    manual_seed(1);
    tr::Seq2SeqTransformer model(o);
    model.to(gpu());
    data::PairDataLoader loader(ex, {.batch_size = 16, .shuffle = true, .seed = 1});
    tr::TrainerOptions t;
    t.epochs = 40;
    t.lr_factor = 0.3;
    t.warmup_steps = 50;
    t.label_smoothing = 0.1;
    t.clip_grad_norm = 1.0;
    t.progress = false;
    tr::Trainer trainer(model, loader, nullptr, t);
    trainer.fit();
    int exact = 0;
    std::string misses;
    tr::DecodeOptions d;
    d.bos_id = tv.bos_id();
    d.eos_id = tv.eos_id();
    d.max_len = 20;
    for (const auto& p : train_pairs) {
      std::vector<int64_t> s = sv.encode(p.first);
      Tensor src = from_vector<int64_t>(s, {1, static_cast<int64_t>(s.size())}).to(gpu());
      std::string got = tv.decode(tr::greedy_decode(model, src, d).front());
      if (got == p.second) ++exact;
      else misses += " [" + p.first + " -> " + got + "]";
    }
    CHECK_MESSAGE(exact == static_cast<int>(train_pairs.size()), exact << "/" << train_pairs.size() << " exact;" << misses);
  }

  TEST_CASE("layer norm outputs written again in backward (the GPU's default): the same bits, a lower peak") {
    const ToyTask task = toy_task({{"ich mochte ein bier", "i want a beer ."}, {"du trinkst wasser", "you drink water ."}});
    const tr::Seq2SeqOptions o = toy_model(task, 32, 4, 2, 64, 0.1);
    for (bool autocast : {false, true}) {
      CAPTURE(autocast);
      struct Step {
        double loss = 0;
        std::vector<Tensor> grads;
        int64_t peak = 0;  // above what was held before the forward pass
      };
      auto step = [&](bool on) {
        set_recompute_saved(on);
        manual_seed(3);
        tr::Seq2SeqTransformer model(o);
        model.to(gpu());
        model.train();
        Tensor src = randint(1, o.src_vocab_size, {2, 6}).to(gpu()), tgt = randint(1, o.tgt_vocab_size, {2, 5}).to(gpu());
        Tensor labels = randint(1, o.tgt_vocab_size, {2, 5}).to(gpu());
        reset_peak_memory(gpu());
        const int64_t before = memory_stats(gpu()).allocated_bytes;  // what the model holds
        Tensor loss;
        {
          AutocastGuard guard(kBFloat16, autocast);
          loss = cross_entropy(model.forward(src, tgt).reshape({-1, o.tgt_vocab_size}), labels.reshape({-1}));
        }
        Step s;
        s.peak = memory_stats(gpu()).peak_bytes - before;
        loss.backward();
        s.loss = loss.item();
        for (const Tensor& p : model.parameters()) s.grads.push_back(p.grad().to(kCPU));
        reset_recompute_saved();
        return s;
      };
      const Step kept = step(false), recomputed = step(true);
      CHECK(recomputed.loss == kept.loss);
      REQUIRE(recomputed.grads.size() == kept.grads.size());
      for (size_t i = 0; i < kept.grads.size(); ++i)
        CHECK(recomputed.grads[i].to_vector<double>() == kept.grads[i].to_vector<double>());
      CHECK(recomputed.peak < kept.peak);
    }
  }

  // Activation checkpointing (utils::checkpoint through Seq2SeqOptions::checkpoint_layers)
  // on the GPU: the second run of each layer replays the generator's state and autocast,
  // so the step's loss and every gradient are the plain step's bits, for a lower peak.
  // checkpoint_feed_forward: only each layer's hidden feed-forward layer, its output freed
  // too (recompute_outputs): at least that (rows, 64) activation less per layer.
  TEST_CASE("checkpointed Transformer layers on the GPU: the plain step's bits, a lower peak") {
    const ToyTask task = toy_task({{"ich mochte ein bier", "i want a beer ."}, {"du trinkst wasser", "you drink water ."}});
    for (bool feed_forward_only : {false, true})
    for (bool autocast : {false, true}) {
      CAPTURE(feed_forward_only);
      CAPTURE(autocast);
      auto step = [&](bool checkpointed) {
        tr::Seq2SeqOptions o = toy_model(task, 32, 4, 2, 64, 0.1);
        if (feed_forward_only) {
          o.checkpoint_feed_forward = checkpointed;
        } else {
          o.checkpoint_layers = checkpointed;
          o.checkpoint_feed_forward = false;  // not its default's checkpoint inside the plain step's layers
        }
        manual_seed(3);
        tr::Seq2SeqTransformer model(o);
        model.to(gpu());
        model.train();
        Tensor src = randint(1, o.src_vocab_size, {4, 7}).to(gpu()), tgt = randint(1, o.tgt_vocab_size, {4, 6}).to(gpu());
        Tensor labels = randint(1, o.tgt_vocab_size, {4, 6}).to(gpu());
        reset_peak_memory(gpu());
        const int64_t before = memory_stats(gpu()).allocated_bytes;
        Tensor loss;
        {
          AutocastGuard guard(kBFloat16, autocast);
          loss = cross_entropy(model.forward(src, tgt).reshape({-1, o.tgt_vocab_size}), labels.reshape({-1}));
        }
        const int64_t held = memory_stats(gpu()).allocated_bytes - before;
        loss.backward();
        std::vector<std::vector<double>> out = {{loss.item()}};
        for (const Tensor& p : model.parameters()) out.push_back(p.grad().to(kCPU).to_vector<double>());
        return std::pair{out, held};
      };
      const auto [plain, plain_held] = step(false);
      const auto [ckpt, ckpt_held] = step(true);
      CHECK(ckpt == plain);
      CHECK(ckpt_held < plain_held);
      // Two encoder layers over 4 x 7 tokens, two decoder layers over 4 x 6, 64 wide.
      if (feed_forward_only) CHECK(plain_held - ckpt_held >= (2 * 28 + 2 * 24) * 64 * (autocast ? 2 : 4));
    }
  }

  TEST_CASE("a repeated training step makes no new allocation from the system; checkpoints of a GPU model") {
    const ToyTask task = toy_task({{"ich mochte ein bier", "i want a beer ."}, {"du trinkst wasser", "you drink water ."}});
    const std::vector<data::TokenPair>& ex = task.pairs;
    // No dropout: the resumed run below must see what the first one sees.
    tr::Seq2SeqOptions o = toy_model(task, 32, 4, 2, 64, 0.0);
    manual_seed(3);
    tr::Seq2SeqTransformer model(o);
    model.to(gpu());
    data::PairDataLoader loader(ex, {.batch_size = 2, .shuffle = false});
    tr::TrainerOptions t;
    t.epochs = 1;
    t.warmup_steps = 10;
    t.progress = false;
    tr::Trainer trainer(model, loader, nullptr, t);
    data::PairBatch batch = loader.make_batch({0, 1});
    trainer.train_step(batch);  // the first step fills the cache (and makes Adam's state)
    trainer.train_step(batch);
    const MemoryStats before = memory_stats(gpu());
    trainer.train_step(batch);
    const MemoryStats after = memory_stats(gpu());
    CHECK(after.allocations > before.allocations);  // tensors were made...
    CHECK(after.system_allocations == before.system_allocations);  // ...all from the cache
    CHECK(after.allocated_bytes == before.allocated_bytes);
    if (!on_cpu_stand_in()) CHECK(after.cached_bytes > 0);

    // Saving a GPU model and its optimizer, and loading both back, on the GPU and on the CPU.
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("kiln_test_cuda_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string ckpt = (dir / "step.safetensors").string();
    trainer.save(ckpt);
    tr::Seq2SeqTransformer again(o);
    again.to(gpu());
    tr::Trainer resumed(again, loader, nullptr, t);
    resumed.load(ckpt);
    CHECK(resumed.global_step() == 3);
    for (const auto& [name, p] : model.state_dict()) check_same("reloaded " + name, again.state_dict().at(name), p.to(kCPU));
    // Every kernel of a step adds in a fixed order (no float atomics): the resumed run is
    // the uninterrupted one, bit for bit.
    CHECK(resumed.train_step(batch) == trainer.train_step(batch));
    io::save_state_dict((dir / "model.safetensors").string(), model);
    tr::Seq2SeqTransformer on_cpu(o);
    io::load_state_dict((dir / "model.safetensors").string(), on_cpu);
    for (const auto& [name, p] : model.state_dict()) check_same("CPU copy " + name, on_cpu.state_dict().at(name).to(gpu()), p);
    fs::remove_all(dir);
  }
}

// ====================================================================== main

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const bool gpu_suite = kiln::cuda::is_available() || on_cpu_stand_in();
  if (!gpu_suite) context.addFilter("test-suite", "everywhere");
  const int rc = context.run();
  if (context.shouldExit() || rc != 0) return rc;
  if (!gpu_suite) {
    std::printf("no CUDA GPU present: %s\n", kiln::cuda::unavailable_reason().c_str());
    return 77;  // meson: SKIP
  }
  return 0;
}
