#pragma once
// OpenBLAS, set up once: the fastest kernel core this CPU supports (Debian's OpenBLAS
// 0.3.21 falls back to "Prescott" on CPUs it does not know) and one BLAS thread, since
// TBB partitions matmuls across the cores.
#include <cstdint>
#include <string>

namespace kiln::cpu {

// Idempotent; called before the first gemm and by set_num_threads.
void blas_init();

// Row-major C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, single-threaded.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

struct BlasInfo {
  std::string library;   // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH …"
  std::string detected;  // the core OpenBLAS picked by itself
  std::string core;      // the core in use
  std::string reason;    // why Kiln changed it (or did not)
  int threads = 1;       // OpenBLAS's own threads
};
BlasInfo blas_info();

// The CPU's vector extensions as Kiln sees them: "avx512", "avx2" or "sse".
std::string cpu_vector_isa();

}  // namespace kiln::cpu
