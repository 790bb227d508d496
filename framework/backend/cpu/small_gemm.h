#pragma once
// float32 products with few rows against a weight stored as a linear layer keeps it:
// out (M, N) = a (M, K) · bᵀ, b (N, K) row-major. One sentence's latency and token-by-token
// decoding multiply a handful of rows by every weight; OpenBLAS packs the whole weight
// into its panel layout first, a copy that costs more than the product at M = 16 (42% of
// all-MiniLM's 16-token forward went to sgemm_incopy). Here each weight row is read where
// it lies, once per call, and dotted with every row of a.
//
// Every output is one sum over K in a fixed order: below small_gemm_outer_min_rows() rows
// a dot product in 8 lanes and one fixed reduction, from there one FMA chain over K (the
// faster form for each, small_gemm.cpp). Whatever N, the blocking or the thread count: the
// same bits at any set_num_threads, and a row's result does not depend on the other rows'
// values, nor on M within each form (a row alone gives the bits it gives among any M below
// the bound, a row among M rows from the bound those it gives among 16).
#include <cstdint>

namespace kiln::cpu {

// Products with at most this many rows go here (measured: benchmarks/history/).
constexpr int64_t kSmallGemmMaxRows = 16;

// The fewest rows gemm_small_nt takes in its outer form (9 where the CPU has AVX-512, 13
// with AVX2 alone; above kSmallGemmMaxRows where it has no kernel).
int64_t small_gemm_outer_min_rows();

// Whether gemm_small_nt takes a float32 product of this shape: M rows, and an
// AVX2+FMA CPU (elsewhere OpenBLAS's kernels are faster than a portable loop).
bool small_gemm_applies(int64_t M, int64_t N, int64_t K);

// c (M, N) = a (M, K) · bᵀ, with b stored (N, K): row i of a at a + i·lda, row j of b at
// b + j·ldb, row i of c at c + i·ldc. With bias (N), c = a·bᵀ + bias; with accumulate,
// c += a·bᵀ (not both). K may be 0. Runs on Kiln's thread pool.
void gemm_small_nt(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
                   const float* bias, float* c, int64_t ldc, bool accumulate);

}  // namespace kiln::cpu
