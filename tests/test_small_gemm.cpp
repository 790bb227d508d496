// The few-row float32 product (backend/cpu/small_gemm.h): against a float64 reference
// within fp32 rounding for every edge of its blocking (rows 1-16 in both forms, columns
// not a multiple of 3 or of 6, K not a multiple of 8 or of its 512-long stretches, padded
// rows), with a bias and accumulating; the same bits at 1, 2 and 4 threads and for a row
// alone or among others of its form;
// Kiln's matmul and linear on it; and its refusals. On a CPU without AVX2+FMA it takes
// nothing, and the cases say so.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/small_gemm.h"
#include "test_util.h"

using namespace kiln;

namespace {

bool skip_without_kernel() {
  if (cpu::small_gemm_applies(1, 1, 1)) return false;
  MESSAGE("skipped: this CPU has no AVX2+FMA; small products stay on OpenBLAS");
  return true;
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(seed >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  }
  return v;
}

// One product's operands: a (M, K) rows lda apart, b (N, K) rows ldb apart, c (M, N) rows
// ldc apart, every padding element a marker that must stay.
struct Product {
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> a, b, c, bias;

  Product(int64_t m, int64_t n, int64_t k, int64_t pad, uint64_t seed)
      : M(m), N(n), K(k), lda(k + pad), ldb(k + pad), ldc(n + pad) {
    a = random_floats(static_cast<size_t>(M * lda), seed);
    b = random_floats(static_cast<size_t>(N * ldb), seed + 1);
    c = random_floats(static_cast<size_t>(M * ldc), seed + 2);
    bias = random_floats(static_cast<size_t>(N), seed + 3);
  }
  std::vector<float> run(bool with_bias, bool accumulate) const {
    std::vector<float> out = c;
    cpu::gemm_small_nt(M, N, K, a.data(), lda, b.data(), ldb, with_bias ? bias.data() : nullptr, out.data(), ldc,
                       accumulate);
    return out;
  }
};

// Every output within fp32 rounding of the exact sum (|error| <= K·eps·Σ|terms|, the bound
// any fp32 dot product meets), the padding untouched.
void check(const Product& p, const std::vector<float>& got, bool with_bias, bool accumulate, const std::string& what) {
  INFO(what);
  const double eps = std::ldexp(1.0, -24);
  int bad = 0;
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t at = static_cast<size_t>(i * p.ldc + j);
      if (j >= p.N) {
        bad += got[at] != p.c[at];
        continue;
      }
      double exact = with_bias ? p.bias[static_cast<size_t>(j)] : accumulate ? p.c[at] : 0.0;
      double magnitude = std::fabs(exact);
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = static_cast<double>(p.a[static_cast<size_t>(i * p.lda + k)]) *
                         p.b[static_cast<size_t>(j * p.ldb + k)];
        exact += t;
        magnitude += std::fabs(t);
      }
      bad += std::fabs(got[at] - exact) > static_cast<double>(p.K + 2) * eps * magnitude;
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("small_gemm: within fp32 rounding of the exact product at every edge of the blocking") {
  if (skip_without_kernel()) return;
  uint64_t seed = 1;
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 13, 14, 16})
    for (int64_t N : {1, 2, 3, 4, 5, 6, 12, 47, 130})
      for (int64_t K : {1, 7, 8, 9, 256, 300, 513}) {
        const int64_t pad = (M + N + K) % 3;  // 0, 1 or 2 floats of row padding
        const Product p(M, N, K, pad, seed);
        seed += 4;
        const std::string shape = "(M, N, K) = (" + std::to_string(M) + ", " + std::to_string(N) + ", " +
                                  std::to_string(K) + "), pad " + std::to_string(pad);
        check(p, p.run(false, false), false, false, "plain " + shape);
        check(p, p.run(true, false), true, false, "bias " + shape);
        check(p, p.run(false, true), false, true, "accumulate " + shape);
      }
}

namespace {

// The first `rows` rows of p as a product of their own.
Product first_rows(const Product& p, int64_t rows) {
  Product q = p;
  q.M = rows;
  q.a.resize(static_cast<size_t>(rows * p.lda));
  q.c.resize(static_cast<size_t>(rows * p.ldc));
  return q;
}

// Row r of a product's result.
std::vector<float> row_of(const Product& p, const std::vector<float>& out, int64_t r) {
  return std::vector<float>(out.begin() + r * p.ldc, out.begin() + (r + 1) * p.ldc);
}

}  // namespace

TEST_CASE("small_gemm: the same bits at 1, 2 and 4 threads, and a row's bits the same at every M of its form") {
  if (skip_without_kernel()) return;
  testing::ThreadsGuard guard;
  const Product p(16, 1537, 770, 3, 77);  // many column chunks, a partial block and stretch
  set_num_threads(1);
  const Product p8 = first_rows(p, 8);  // the dot form on every CPU
  const std::vector<float> want = p.run(true, false), want8 = p8.run(true, false);
  for (int threads : {2, 4}) {
    set_num_threads(threads);
    INFO(threads << " threads");
    CHECK(testing::same_bits(p.run(true, false), want));
    CHECK(testing::same_bits(p8.run(true, false), want8));
  }
  // The dot form (below the bound): row 5 alone (M = 1) against its row among the most
  // rows of that form.
  const int64_t bound = cpu::small_gemm_outer_min_rows();
  REQUIRE(bound > 6);
  REQUIRE(bound <= 16);
  const Product below = first_rows(p, bound - 1);
  const std::vector<float> got_below = below.run(true, false);
  Product one = p;
  one.M = 1;
  one.a.assign(p.a.begin() + 5 * p.lda, p.a.begin() + 6 * p.lda);
  one.c.assign(p.c.begin() + 5 * p.ldc, p.c.begin() + 6 * p.ldc);
  CHECK(testing::same_bits(one.run(true, false), row_of(below, got_below, 5)));
  // The outer form (from the bound to 16 rows): rows 0, 5 and the last among the fewest
  // rows of that form against theirs among 16.
  const Product from = first_rows(p, bound);
  const std::vector<float> got_from = from.run(true, false);
  for (int64_t r : {int64_t{0}, int64_t{5}, bound - 1}) {
    INFO("row " << r << " of " << bound);
    CHECK(testing::same_bits(row_of(from, got_from, r), row_of(p, want, r)));
  }
}

TEST_CASE("small_gemm: matmul and linear take it for up to 16 rows against a stored weight") {
  if (skip_without_kernel()) return;
  const Product p(16, 200, 96, 0, 300);
  const Tensor x = from_vector<float>(p.a, {16, 96}), w = from_vector<float>(p.b, {200, 96});
  const Tensor bias = from_vector<float>(p.bias, {200});
  // linear: x Wᵀ + bias, the kernel's bits.
  CHECK(testing::same_bits(linear(x, w, bias).to_vector<float>(), p.run(true, false)));
  // matmul with the transposed weight, 3-d (one batch of rows), without a bias.
  const Tensor y = matmul(x.view({1, 16, 96}), w.t());
  std::vector<float> want(16 * 200, 0.0f);
  cpu::gemm_small_nt(16, 200, 96, p.a.data(), 96, p.b.data(), 96, nullptr, want.data(), 200, false);
  CHECK(testing::same_bits(y.to_vector<float>(), want));
  // 17 rows: OpenBLAS; still the product.
  const Tensor x17 = from_vector<float>(random_floats(17 * 96, 9), {17, 96});
  CHECK(allclose(linear(x17, w, bias).to(kFloat64), linear(x17.to(kFloat64), w.to(kFloat64), bias.to(kFloat64)),
                 1e-5, 1e-4));
}

TEST_CASE("small_gemm: shapes it does not take and a bias with accumulate are kiln::Errors") {
  CHECK_FALSE(cpu::small_gemm_applies(17, 8, 8));
  CHECK_FALSE(cpu::small_gemm_applies(0, 8, 8));
  CHECK_FALSE(cpu::small_gemm_applies(4, 8, 0));
  float f = 0;
  CHECK_ERROR_STARTS("[gemm_small_nt]", cpu::gemm_small_nt(17, 1, 1, &f, 1, &f, 1, nullptr, &f, 1, false),
                     "(M, N, K) = (17, 1, 1)");
  if (skip_without_kernel()) return;
  CHECK_ERROR_STARTS("[gemm_small_nt]", cpu::gemm_small_nt(1, 1, 1, &f, 1, &f, 1, &f, &f, 1, true),
                     "a bias and accumulate together");
}
