// GEMMs through oneDNN (backend/cpu/onednn_gemm.h): bf16 and fp32 products against a
// float64 reference, every layout, accumulation, empty and odd sizes, errors, many
// threads at once, and the same bits at 1, 2 and 4 Kiln threads. Compiled in every
// build: without oneDNN, the cases that need it say so and return, and the calls must
// throw a kiln::Error saying that oneDNN is not built in.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/blas.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/small_gemm.h"
#include "report/config.h"
#include "test_util.h"

using namespace kiln;
namespace onednn = kiln::cpu::onednn;

namespace {

bool skip_without_onednn() {
  if (onednn::available()) return false;
  MESSAGE("skipped: " << onednn::describe());
  return true;
}

// The bf16 GEMMs need oneDNN's bf16 matmul, which its 2.x builds lack below AVX512_CORE:
// there they must throw, saying so, while the fp32 GEMMs work.
bool skip_without_bf16() {
  if (skip_without_onednn()) return true;
  if (onednn::has_bf16()) return false;
  uint16_t h = 0;
  float f = 0;
  CHECK_ERROR_STARTS("[gemm_bf16]", onednn::gemm_bf16(false, false, 1, 1, 1, &h, 1, &h, 1, &f, 1, false),
                     "oneDNN has no bfloat16 matmul for this CPU");
  MESSAGE("skipped: " << onednn::describe());
  return true;
}

float bf16_value(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random bf16 values in about [-2, 2], every significand bit used.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const float f = static_cast<float>(static_cast<double>(seed >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>(u >> 16);
  }
  return v;
}

std::vector<float> as_float(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_value(h[i]);
  return f;
}

// One product's operands as stored: A is (M, K), or (K, M) when transposed, with row
// stride lda (padded past the row where `pad`); the same for B; C (M, N) with ldc.
struct Gemm {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<uint16_t> a16, b16;
  std::vector<float> a, b, c0;  // c0: C before the call (accumulate)

  Gemm(bool ta_, bool tb_, int64_t m, int64_t n, int64_t k, int64_t pad, uint64_t seed)
      : ta(ta_), tb(tb_), M(m), N(n), K(k) {
    lda = (ta ? M : K) + pad;
    ldb = (tb ? K : N) + pad;
    ldc = N + pad;
    a16 = random_bf16(static_cast<size_t>((ta ? K : M) * lda), seed);
    b16 = random_bf16(static_cast<size_t>((tb ? N : K) * ldb), seed + 1);
    a = as_float(a16);
    b = as_float(b16);
    c0 = as_float(random_bf16(static_cast<size_t>(M * ldc), seed + 2));
  }
  double at_a(int64_t i, int64_t k) const { return a[static_cast<size_t>(ta ? k * lda + i : i * lda + k)]; }
  double at_b(int64_t k, int64_t j) const { return b[static_cast<size_t>(tb ? j * ldb + k : k * ldb + j)]; }
};

// Checks C against the exact product, computed in float64 (products of two bf16 values
// have at most 16 significant bits, so float64 holds every one and their sum exactly
// enough). Why the bound is tight and still safe: in fp32 the products of bf16 inputs
// are exact as well, so an fp32 GEMM differs from the exact result only by the rounding
// of its K additions (K + 1 with the old C), whatever their order or blocking:
// |C - exact| <= gamma_n * sum |terms|, gamma_n = n u / (1 - n u), u = 2^-24 (Higham,
// "Accuracy and Stability of Numerical Algorithms", 3.1). The same holds for fp32 inputs,
// whose products round too. A wrong element, transpose or stride is off by a whole term.
// Elements of C outside the product (row padding) must keep their old value.
void check_product(const Gemm& g, const std::vector<float>& c, bool accumulate, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(g.K + (accumulate ? 1 : 0));
  const double gamma = n * u / (1 - n * u);
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < g.M; ++i) {
    for (int64_t j = 0; j < g.ldc; ++j) {
      const size_t at = static_cast<size_t>(i * g.ldc + j);
      double exact = accumulate || j >= g.N ? g.c0[at] : 0.0;
      double magnitude = std::fabs(exact);
      if (j < g.N) {
        for (int64_t k = 0; k < g.K; ++k) {
          const double t = g.at_a(i, k) * g.at_b(k, j);
          exact += t;
          magnitude += std::fabs(t);
        }
      }
      const double err = std::fabs(static_cast<double>(c[at]) - exact);
      if (!(err <= gamma * magnitude)) {
        if (bad++ == 0)
          first = "C[" + std::to_string(i) + "][" + std::to_string(j) + "] = " + std::to_string(c[at]) +
                  ", exact " + std::to_string(exact) + ", bound " + std::to_string(gamma * magnitude);
      }
    }
  }
  INFO(what << ": " << bad << " elements off, first " << first);
  CHECK(bad == 0);
}

std::string describe_case(const char* fn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                          bool acc) {
  return std::string(fn) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") + " M=" + std::to_string(m) +
         " N=" + std::to_string(n) + " K=" + std::to_string(k) + " pad=" + std::to_string(pad) +
         (acc ? " accumulate" : "");
}

std::vector<float> run_bf16(const Gemm& g, bool acc) {
  std::vector<float> c = g.c0;
  onednn::gemm_bf16(g.ta, g.tb, g.M, g.N, g.K, g.a16.data(), g.lda, g.b16.data(), g.ldb, c.data(), g.ldc,
                    acc);
  return c;
}

std::vector<float> run_f32(const Gemm& g, bool acc) {
  std::vector<float> c = g.c0;
  onednn::gemm_f32(g.ta, g.tb, g.M, g.N, g.K, g.a.data(), g.lda, g.b.data(), g.ldb, c.data(), g.ldc, acc);
  return c;
}

}  // namespace

TEST_CASE("onednn: available(), describe() and kiln::config() agree; without oneDNN the GEMMs say so") {
  const std::string d = onednn::describe();
  CHECK(config().find("  - GEMMs: " + d + "\n") != std::string::npos);
  if (!onednn::available()) {
    CHECK_FALSE(onednn::has_native_bf16());
    // Not built in, or built in but its CPU engine could not be made: each says so.
    const bool built = d != "oneDNN: not built in";
    if (built) CHECK(d.find("not usable") != std::string::npos);
    const char* why =
        built ? "oneDNN's CPU engine could not be created" : "oneDNN is not built into this Kiln";
    uint16_t h = 0;
    float f = 0;
    CHECK_ERROR_STARTS("[gemm_bf16]", onednn::gemm_bf16(false, false, 1, 1, 1, &h, 1, &h, 1, &f, 1, false),
                       why);
    CHECK_ERROR_STARTS("[gemm_f32]", onednn::gemm_f32(false, false, 1, 1, 1, &f, 1, &f, 1, &f, 1, false),
                       why);
    return;
  }
  CHECK(d.rfind("oneDNN ", 0) == 0);
  CHECK(d.find(", ISA ") != std::string::npos);
  // The line tells what has_native_bf16() decides.
  CHECK((d.find("bf16 GEMM: native") != std::string::npos) == onednn::has_native_bf16());
}

TEST_CASE("onednn: gemm_bf16 equals the exact product within fp32 rounding: every layout, accumulate, odd sizes") {
  if (skip_without_bf16()) return;
  const int64_t sizes[][3] = {{1, 1, 1},    {7, 7, 7},   {33, 7, 257}, {257, 33, 7},  {7, 257, 33},
                              {1, 257, 33}, {257, 1, 7}, {33, 33, 1},  {257, 257, 33}};
  uint64_t seed = 1;
  for (const auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t pad : {0, 3})
          for (bool acc : {false, true}) {
            Gemm g(ta, tb, s[0], s[1], s[2], pad, seed++);
            check_product(g, run_bf16(g, acc), acc,
                          describe_case("gemm_bf16", ta, tb, s[0], s[1], s[2], pad, acc));
          }
}

// A bias case: g.c0 becomes what C must hold before the product is added (the bias in
// every row, the padding kept), and the returned buffer is the C handed to the call (the
// padding as in g.c0, the product's elements 1e30, which the call must not read).
std::vector<float> bias_case(Gemm& g, const std::vector<float>& bias) {
  std::vector<float> c = g.c0;
  for (int64_t i = 0; i < g.M; ++i)
    for (int64_t j = 0; j < g.N; ++j) {
      g.c0[static_cast<size_t>(i * g.ldc + j)] = bias[static_cast<size_t>(j)];
      c[static_cast<size_t>(i * g.ldc + j)] = 1e30f;
    }
  return c;
}

TEST_CASE("onednn: gemm_bf16_bias adds the bias in the GEMM: every layout, blocks of rows or of columns, K = 0") {
  if (skip_without_onednn()) {
    uint16_t h = 0;
    float f = 0;
    CHECK_ERROR_STARTS("[gemm_bf16_bias]",
                       onednn::gemm_bf16_bias(false, false, 1, 1, 1, &h, 1, &h, 1, &f, &f, 1), "oneDNN");
    return;
  }
  if (skip_without_bf16()) return;
  // (5, 4000, 128) is cut into blocks of columns (each with its stretch of the bias),
  // (600, 64, 512) into blocks of rows.
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 257}, {5, 4000, 128}, {600, 64, 512}, {3, 4, 0}};
  uint64_t seed = 50;
  for (const auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Gemm g(ta, tb, s[0], s[1], s[2], /*pad=*/3, seed++);
        const std::vector<float> bias = as_float(random_bf16(static_cast<size_t>(g.N), seed++));
        std::vector<float> c = bias_case(g, bias);
        onednn::gemm_bf16_bias(g.ta, g.tb, g.M, g.N, g.K, g.a16.data(), g.lda, g.b16.data(), g.ldb, bias.data(),
                               c.data(), g.ldc);
        check_product(g, c, /*accumulate=*/true, describe_case("gemm_bf16_bias", ta, tb, s[0], s[1], s[2], 3, false));
      }
}

TEST_CASE("onednn: gemm_f32 equals the exact product within fp32 rounding, as OpenBLAS's sgemm does") {
  if (skip_without_onednn()) return;
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 7}, {257, 257, 33}};
  uint64_t seed = 100;
  for (const auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int64_t pad : {0, 5})
          for (bool acc : {false, true}) {
            Gemm g(ta, tb, s[0], s[1], s[2], pad, seed++);
            check_product(g, run_f32(g, acc), acc,
                          describe_case("gemm_f32", ta, tb, s[0], s[1], s[2], pad, acc));
            // The bound is the one any fp32 GEMM meets: OpenBLAS's, Kiln's fp32 path, too.
            std::vector<float> c = g.c0;
            cpu::blas_init();
            cpu::gemm(g.ta, g.tb, g.M, g.N, g.K, 1.0f, g.a.data(), g.lda, g.b.data(), g.ldb,
                      acc ? 1.0f : 0.0f, c.data(), g.ldc);
            check_product(g, c, acc, describe_case("cblas_sgemm", ta, tb, s[0], s[1], s[2], pad, acc));
          }
}

TEST_CASE("onednn: float32 weight gradients (A transposed, K the long side) are cut along K: exact within fp32 rounding, the same bits at 1, 2 and 4 threads") {
  if (skip_without_onednn()) return;
  testing::ThreadsGuard guard;
  // K >= 6400 and >= M, N: two parts of 3200 (three for 9700), the second summed onto C.
  const int64_t sizes[][3] = {{24, 40, 6400}, {33, 17, 9700}};
  uint64_t seed = 700;
  for (const auto& s : sizes)
    for (int tb = 0; tb < 2; ++tb)
      for (int64_t pad : {0, 3})
        for (bool acc : {false, true}) {
          Gemm g(true, tb, s[0], s[1], s[2], pad, seed++);
          std::vector<std::vector<float>> runs;
          for (int threads : {1, 2, 4}) {
            set_num_threads(threads);
            runs.push_back(run_f32(g, acc));
          }
          const std::string what = describe_case("gemm_f32", 1, tb, s[0], s[1], s[2], pad, acc);
          check_product(g, runs[0], acc, what);
          INFO(what);
          CHECK(testing::same_bits(runs[1], runs[0]));
          CHECK(testing::same_bits(runs[2], runs[0]));
        }
  set_num_threads(1);
  Gemm g(true, false, 40, 24, 6400, 2, seed++);
  const std::vector<float> bias = as_float(random_bf16(static_cast<size_t>(g.N), seed++));
  std::vector<float> c = bias_case(g, bias);
  onednn::gemm_f32_bias(true, false, g.M, g.N, g.K, g.a.data(), g.lda, g.b.data(), g.ldb, bias.data(), c.data(), g.ldc);
  check_product(g, c, /*accumulate=*/true, describe_case("gemm_f32_bias", 1, 0, g.M, g.N, g.K, 2, false));
}

TEST_CASE("onednn: gemm_f32_bias adds the bias in the GEMM: every layout, blocks of rows or of columns, K = 0") {
  if (skip_without_onednn()) {
    float f = 0;
    CHECK_ERROR_STARTS("[gemm_f32_bias]", onednn::gemm_f32_bias(false, false, 1, 1, 1, &f, 1, &f, 1, &f, &f, 1),
                       "oneDNN");
    return;
  }
  float f = 0;
  CHECK_ERROR_STARTS("[gemm_f32_bias]", onednn::gemm_f32_bias(false, false, 1, 1, 1, &f, 1, &f, 1, nullptr, &f, 1),
                     "the bias is a null pointer");
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 257}, {5, 4000, 128}, {600, 64, 512}, {3, 4, 0}};
  uint64_t seed = 150;
  for (const auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        Gemm g(ta, tb, s[0], s[1], s[2], /*pad=*/3, seed++);
        const std::vector<float> bias = as_float(random_bf16(static_cast<size_t>(g.N), seed++));
        std::vector<float> c = bias_case(g, bias);
        onednn::gemm_f32_bias(g.ta, g.tb, g.M, g.N, g.K, g.a.data(), g.lda, g.b.data(), g.ldb, bias.data(), c.data(),
                              g.ldc);
        check_product(g, c, /*accumulate=*/true, describe_case("gemm_f32_bias", ta, tb, s[0], s[1], s[2], 3, false));
      }
}

TEST_CASE("onednn: Kiln's float32 products run on oneDNN from 2 MFLOP (linear's bias in the GEMM), smaller ones, few rows and float64 elsewhere") {
  if (skip_without_onednn()) return;
  // Shapes no other test uses, so that their primitives are new: a call shows in the
  // shared cache's counts.
  auto calls = [] {
    const onednn::CacheStats st = onednn::cache_stats();
    return st.hits + st.misses;
  };
  // Values exact in float64 products: the reference is the float64 result.
  auto values = [](Shape s, uint64_t seed) {
    return from_vector<float>(as_float(random_bf16(static_cast<size_t>(shape_numel(s)), seed)), s);
  };
  auto close = [](const Tensor& got, const Tensor& want) {
    return allclose(got.to(kFloat64), want, /*rtol=*/1e-5, /*atol=*/2e-3);  // sums of ~100 terms near 10
  };
  const Tensor a = values({211, 97}, 1), b = values({97, 113}, 2);  // 4.6 MFLOP
  int64_t before = calls();
  const Tensor ab = matmul(a, b);
  CHECK(calls() > before);
  CHECK(close(ab, matmul(a.to(kFloat64), b.to(kFloat64))));
  // linear: x Wᵀ + b, x as rows of a transposed tensor too (a BLAS transpose flag), which
  // stays on OpenBLAS on a CPU without AVX-512 (cpu_matmul.cpp's measurements).
  const Tensor x = values({307, 67}, 3), xt = values({67, 301}, 4).t(), w = values({89, 67}, 5), bias = values({89}, 6);
  for (const Tensor& in : {x, xt}) {
    before = calls();
    const Tensor y = linear(in, w, bias);
    CHECK((calls() > before) == (in.is_contiguous() || onednn::has_avx512()));
    CHECK(close(y, linear(in.to(kFloat64), w.to(kFloat64), bias.to(kFloat64))));
  }
  // 16 rows or fewer against a weight: small_gemm.h's kernel where the CPU has AVX2.
  before = calls();
  const Tensor few_rows = linear(values({16, 1000}, 12), values({300, 1000}, 13), values({300}, 14));  // 9.6 MFLOP
  CHECK((calls() == before) == cpu::small_gemm_applies(16, 300, 1000));
  // Below 2 MFLOP (the tiny step's products), and float64: OpenBLAS.
  before = calls();
  const Tensor small = matmul(values({41, 37}, 7), values({37, 43}, 8));
  const Tensor small_linear = linear(values({41, 37}, 9), values({43, 37}, 10), values({43}, 11));
  const Tensor wide = matmul(a.to(kFloat64), b.to(kFloat64));
  CHECK(calls() == before);
  CHECK(small.shape() == Shape{41, 43});
  CHECK(small_linear.shape() == Shape{41, 43});
  CHECK(few_rows.shape() == Shape{16, 300});
  CHECK(wide.shape() == Shape{211, 113});
}

TEST_CASE("onednn: M, N or K = 0") {
  if (skip_without_onednn()) return;
  std::vector<uint16_t> h(64, 0x3f80);  // 1.0
  std::vector<float> f(64, 1.0f);
  // M or N = 0: nothing written.
  std::vector<float> c(16, 5.0f);
  const bool bf16 = onednn::has_bf16();
  if (bf16) onednn::gemm_bf16(false, false, 0, 4, 4, h.data(), 4, h.data(), 4, c.data(), 4, false);
  if (bf16) onednn::gemm_bf16(false, false, 4, 0, 4, h.data(), 4, h.data(), 1, c.data(), 1, false);
  onednn::gemm_f32(true, true, 0, 0, 4, f.data(), 1, f.data(), 4, c.data(), 1, false);
  CHECK(std::all_of(c.begin(), c.end(), [](float x) { return x == 5.0f; }));
  // K = 0: an empty sum, C = 0; accumulating leaves C as it was. Row padding stays.
  if (bf16) onednn::gemm_bf16(false, false, 3, 4, 0, h.data(), 1, h.data(), 4, c.data(), 5, true);
  else onednn::gemm_f32(false, false, 3, 4, 0, f.data(), 1, f.data(), 4, c.data(), 5, true);
  CHECK(std::all_of(c.begin(), c.end(), [](float x) { return x == 5.0f; }));
  if (bf16) onednn::gemm_bf16(false, false, 3, 4, 0, h.data(), 1, h.data(), 4, c.data(), 5, false);
  else onednn::gemm_f32(false, false, 3, 4, 0, f.data(), 1, f.data(), 4, c.data(), 5, false);
  for (size_t i = 0; i < c.size(); ++i) {
    INFO("i = " << i);
    CHECK(c[i] == (i < 15 && i % 5 < 4 ? 0.0f : 5.0f));
  }
  std::fill(c.begin(), c.end(), 5.0f);
  onednn::gemm_f32_batched(2, false, false, 2, 3, 0, f.data(), 1, 0, f.data(), 3, 0, c.data(), 3, 6, false);
  for (size_t i = 0; i < c.size(); ++i) CHECK(c[i] == (i < 12 ? 0.0f : 5.0f));
  if (bf16)
    onednn::gemm_bf16_batched(0, false, false, 2, 3, 4, h.data(), 4, 8, h.data(), 3, 12, c.data(), 3, 6, false);
  else
    onednn::gemm_f32_batched(0, false, false, 2, 3, 4, f.data(), 4, 8, f.data(), 3, 12, c.data(), 3, 6, false);
  CHECK(c[12] == 5.0f);
}

TEST_CASE("onednn: batched products, with strided, padded and shared (stride 0) operands") {
  if (skip_without_onednn()) return;
  struct Batched {
    int64_t batch, M, N, K;
    bool ta, tb, share_a, share_b, acc;
  };
  const Batched cases[] = {
      {5, 7, 33, 17, false, true, false, false, false},   {64, 33, 7, 65, true, false, false, false, true},
      {9, 17, 17, 17, true, true, true, false, false},    {300, 5, 9, 3, false, false, false, true, true},
      {1, 33, 33, 33, false, false, false, false, false},
  };
  uint64_t seed = 500;
  for (const Batched& bc : cases)
    for (bool bf16 : {true, false}) {
      if (bf16 && !onednn::has_bf16()) continue;
      // Each product is a Gemm with its own data; the batch lies in one buffer per
      // operand, products `gap` elements apart beyond their own size.
      const int64_t gap = 3;
      std::vector<Gemm> gs;
      for (int64_t i = 0; i < bc.batch; ++i) gs.emplace_back(bc.ta, bc.tb, bc.M, bc.N, bc.K, 1, seed++);
      if (bc.share_a)
        for (Gemm& g : gs) g.a16 = gs[0].a16, g.a = gs[0].a;
      if (bc.share_b)
        for (Gemm& g : gs) g.b16 = gs[0].b16, g.b = gs[0].b;
      const Gemm& g0 = gs[0];
      const int64_t sa = bc.share_a ? 0 : static_cast<int64_t>(g0.a.size()) + gap;
      const int64_t sb = bc.share_b ? 0 : static_cast<int64_t>(g0.b.size()) + gap;
      const int64_t sc = static_cast<int64_t>(g0.c0.size()) + gap;
      std::vector<uint16_t> a16(static_cast<size_t>(sa * bc.batch + static_cast<int64_t>(g0.a.size()))),
          b16(static_cast<size_t>(sb * bc.batch + static_cast<int64_t>(g0.b.size())));
      std::vector<float> a(a16.size()), b(b16.size()), c(static_cast<size_t>(sc * bc.batch), -7.0f);
      for (int64_t i = 0; i < bc.batch; ++i) {
        const Gemm& g = gs[static_cast<size_t>(i)];
        std::copy(g.a16.begin(), g.a16.end(), a16.begin() + i * sa);
        std::copy(g.a.begin(), g.a.end(), a.begin() + i * sa);
        std::copy(g.b16.begin(), g.b16.end(), b16.begin() + i * sb);
        std::copy(g.b.begin(), g.b.end(), b.begin() + i * sb);
        std::copy(g.c0.begin(), g.c0.end(), c.begin() + i * sc);
      }
      if (bf16)
        onednn::gemm_bf16_batched(bc.batch, bc.ta, bc.tb, bc.M, bc.N, bc.K, a16.data(), g0.lda, sa,
                                  b16.data(), g0.ldb, sb, c.data(), g0.ldc, sc, bc.acc);
      else
        onednn::gemm_f32_batched(bc.batch, bc.ta, bc.tb, bc.M, bc.N, bc.K, a.data(), g0.lda, sa, b.data(),
                                 g0.ldb, sb, c.data(), g0.ldc, sc, bc.acc);
      for (int64_t i = 0; i < bc.batch; ++i) {
        const Gemm& g = gs[static_cast<size_t>(i)];
        std::vector<float> ci(c.begin() + i * sc, c.begin() + i * sc + static_cast<int64_t>(g.c0.size()));
        check_product(g, ci, bc.acc,
                      describe_case(bf16 ? "gemm_bf16_batched" : "gemm_f32_batched", bc.ta, bc.tb, bc.M, bc.N,
                                    bc.K, 1, bc.acc) +
                          " product " + std::to_string(i) + " of " + std::to_string(bc.batch));
        // The gap between products is not written.
        for (int64_t j = 0; j < gap; ++j)
          CHECK(c[static_cast<size_t>(i * sc + static_cast<int64_t>(g.c0.size()) + j)] == -7.0f);
      }
    }
}

TEST_CASE("onednn: bad sizes, leading dimensions and batch strides are kiln::Errors naming the call") {
  if (skip_without_onednn()) return;
  std::vector<uint16_t> h(64, 0);
  std::vector<float> f(64, 0.0f);
  CHECK_ERROR_STARTS("[gemm_bf16]",
                     onednn::gemm_bf16(false, false, -1, 2, 2, h.data(), 2, h.data(), 2, f.data(), 2, false),
                     "must not be negative", "M = -1");
  CHECK_ERROR_STARTS("[gemm_bf16]",
                     onednn::gemm_bf16(false, false, 2, 2, 3, h.data(), 2, h.data(), 2, f.data(), 2, false),
                     "lda = 2 is less than A's row length 3", "(M, K) = (2, 3)");
  CHECK_ERROR_STARTS("[gemm_bf16]",
                     onednn::gemm_bf16(true, false, 4, 2, 3, h.data(), 3, h.data(), 2, f.data(), 2, false),
                     "lda = 3 is less than A's row length 4", "(K, M) = (3, 4)");
  CHECK_ERROR_STARTS("[gemm_f32]",
                     onednn::gemm_f32(false, true, 2, 2, 3, f.data(), 3, f.data(), 2, f.data(), 2, false),
                     "ldb = 2 is less than B's row length 3", "(N, K) = (2, 3)");
  CHECK_ERROR_STARTS("[gemm_f32]",
                     onednn::gemm_f32(false, false, 2, 5, 3, f.data(), 3, f.data(), 5, f.data(), 4, false),
                     "ldc = 4 is less than C's row length N = 5");
  CHECK_ERROR_STARTS("[gemm_bf16_batched]",
                     onednn::gemm_bf16_batched(2, false, false, 2, 2, 2, h.data(), 2, 4, h.data(), 2, 4,
                                               f.data(), 2, 3, false),
                     "C's batch stride 3 makes products overlap");
  CHECK_ERROR_STARTS("[gemm_f32_batched]",
                     onednn::gemm_f32_batched(-2, false, false, 2, 2, 2, f.data(), 2, 4, f.data(), 2, 4,
                                              f.data(), 2, 4, false),
                     "batch must not be negative, got -2");
  CHECK_ERROR_STARTS("[gemm_f32_batched]",
                     onednn::gemm_f32_batched(2, false, false, 2, 2, 2, f.data(), 2, -4, f.data(), 2, 4,
                                              f.data(), 2, 4, false),
                     "batch strides must not be negative");
}

// Shapes large enough to be cut into blocks (a single product) or groups (batched), so
// that 2 and 4 threads run them concurrently.
TEST_CASE("onednn: the same bits at 1, 2 and 4 Kiln threads") {
  if (skip_without_onednn()) return;
  testing::ThreadsGuard guard;
  struct Shape3 {
    bool ta, tb;
    int64_t M, N, K;
  };
  const Shape3 shapes[] = {{false, true, 1100, 96, 130},
                           {false, false, 96, 1300, 77},
                           {true, false, 700, 300, 129},
                           {true, true, 64, 2100, 40}};
  std::vector<Gemm> gs;
  uint64_t seed = 900;
  for (const Shape3& s : shapes) gs.emplace_back(s.ta, s.tb, s.M, s.N, s.K, 0, seed++);
  Gemm batch_g(false, true, 40, 40, 64, 0, seed++);  // one product of the batch, 200 times over
  auto run_all = [&] {
    std::vector<std::vector<float>> out;
    const bool bf16 = onednn::has_bf16();
    for (const Gemm& g : gs) {
      if (bf16) out.push_back(run_bf16(g, true));
      out.push_back(run_f32(g, false));
    }
    std::vector<float> c(200 * 40 * 40, 1.0f);
    if (bf16)
      onednn::gemm_bf16_batched(200, false, true, 40, 40, 64, batch_g.a16.data(), 64, 0, batch_g.b16.data(), 64,
                                0, c.data(), 40, 1600, true);
    else
      onednn::gemm_f32_batched(200, false, true, 40, 40, 64, batch_g.a.data(), 64, 0, batch_g.b.data(), 64, 0,
                               c.data(), 40, 1600, true);
    out.push_back(c);
    return out;
  };
  set_num_threads(1);
  const auto want = run_all();
  for (int threads : {2, 4}) {
    set_num_threads(threads);
    const auto got = run_all();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("result " << i << " at " << threads << " threads against 1 thread");
      CHECK(testing::same_bits(got[i], want[i]));
    }
  }
}

TEST_CASE("onednn: 8 threads at once, many shapes: each result has the bits of a lone call") {
  if (skip_without_onednn()) return;
  std::vector<Gemm> gs;
  uint64_t seed = 2000;
  for (int64_t m : {1, 7, 33, 130})
    for (int64_t n : {7, 64, 257})
      for (int t = 0; t < 4; ++t) gs.emplace_back(t & 1, t & 2, m, n, 33 + t * 31, t == 3 ? 2 : 0, seed++);
  const bool has_bf16 = onednn::has_bf16();
  std::vector<std::vector<float>> want_bf16, want_f32;
  for (const Gemm& g : gs) {
    want_bf16.push_back(has_bf16 ? run_bf16(g, true) : std::vector<float>{});
    want_f32.push_back(run_f32(g, false));
  }
  std::vector<int> failures(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      // Each thread walks the shapes from its own starting point, several times, so that
      // primitives are made, found and run by several threads at once.
      for (size_t round = 0; round < 3; ++round)
        for (size_t i = 0; i < gs.size(); ++i) {
          const size_t j = (i + static_cast<size_t>(t) * 5) % gs.size();
          const bool bf16 = has_bf16 && (j + round) % 2 == 0;
          const std::vector<float> c = bf16 ? run_bf16(gs[j], true) : run_f32(gs[j], false);
          if (!testing::same_bits(c, bf16 ? want_bf16[j] : want_f32[j])) ++failures[static_cast<size_t>(t)];
        }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    INFO("thread " << t);
    CHECK(failures[static_cast<size_t>(t)] == 0);
  }
  const onednn::CacheStats st = onednn::cache_stats();
  CHECK(st.size <= st.capacity);
  CHECK(st.hits > 0);
}

TEST_CASE("onednn: the primitive cache stays within its bound and drops the least recently used") {
  if (skip_without_onednn()) return;
  const int64_t capacity = onednn::cache_stats().capacity;
  REQUIRE(capacity > 0);
  // Each thread also keeps its latest primitives at hand; a fresh thread has none, so
  // what it runs is looked up in the shared cache.
  auto in_new_thread = [](auto f) { std::thread(f).join(); };
  Gemm keep(false, false, 5, 6, 7, 0, 7000);
  const std::vector<float> keep_c = run_f32(keep, false);
  std::vector<float> f(64 * 64, 0.5f), c(64 * 64);
  // More distinct shapes than the cache holds: each a new primitive.
  for (int64_t i = 0; i < capacity + 20; ++i) {
    const int64_t m = 1 + i % 61, n = 1 + i / 61;
    onednn::gemm_f32(false, false, m, n, 3, f.data(), 3, f.data(), n, c.data(), n, false);
    CHECK(c[0] == 0.75f);
    if (i % 50 == 0)
      in_new_thread([&] { CHECK(testing::same_bits(run_f32(keep, false), keep_c)); });  // used again: stays
    CHECK(onednn::cache_stats().size <= capacity);
  }
  CHECK(onednn::cache_stats().size == capacity);
  const int64_t misses = onednn::cache_stats().misses;
  in_new_thread([&] { CHECK(testing::same_bits(run_f32(keep, false), keep_c)); });
  CHECK(onednn::cache_stats().misses == misses);  // recently used, so still cached
  // The first shape, dropped long ago: made again.
  in_new_thread(
      [&] { onednn::gemm_f32(false, false, 1, 1, 3, f.data(), 3, f.data(), 1, c.data(), 1, false); });
  CHECK(onednn::cache_stats().misses == misses + 1);
}
