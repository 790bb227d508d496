#include "backend/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cpuid.h>
#include <cstdlib>
#include <mutex>

extern "C" {
// OpenBLAS extensions. Weak, so that Kiln still links against another CBLAS.
char* openblas_get_config(void) __attribute__((weak));
char* openblas_get_corename(void) __attribute__((weak));
void openblas_set_num_threads(int) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
// A DYNAMIC_ARCH OpenBLAS picks its kernel table in gotoblas_dynamic_init(), reading
// OPENBLAS_CORETYPE; quit() forgets the choice so init() can make it again.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace kiln::cpu {
namespace {

std::once_flag g_once;
BlasInfo g_info;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool has_avx512_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return (a >> 5) & 1u;
}

bool is_amd() {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  return b == 0x68747541u;  // "Auth"enticAMD
}

// 3: AVX-512 kernels, 2: AVX2 kernels, 1: older.
int core_rank(const std::string& core) {
  std::string c = lower(core);
  if (c == "skylakex" || c == "cooperlake" || c == "sapphirerapids") return 3;
  if (c == "haswell" || c == "zen" || c == "excavator") return 2;
  return 1;
}

// The core whose kernels suit this CPU best, or "" if the CPU has no AVX2.
std::string best_core() {
  __builtin_cpu_init();
  if (cpu_vector_isa() == "avx512") return has_avx512_bf16() ? "COOPERLAKE" : "SKYLAKEX";
  if (cpu_vector_isa() == "avx2") return is_amd() ? "ZEN" : "HASWELL";
  return "";
}

std::string corename() { return openblas_get_corename ? openblas_get_corename() : "unknown"; }

void choose_core() {
  g_info.library = openblas_get_config ? openblas_get_config() : "CBLAS (not OpenBLAS)";
  g_info.detected = corename();
  g_info.core = g_info.detected;
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    g_info.reason = std::string("OPENBLAS_CORETYPE=") + forced + " set by the user";
    return;
  }
  std::string want = best_core();
  if (want.empty() || core_rank(want) <= core_rank(g_info.detected)) {
    g_info.reason = "kept the core OpenBLAS detected";
    return;
  }
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) {
    g_info.reason = "OpenBLAS is not a DYNAMIC_ARCH build; cannot switch to " + want;
    return;
  }
  // Safe here: no BLAS call has run yet, and the switch only swaps OpenBLAS's table of
  // kernels and blocking parameters.
  setenv("OPENBLAS_CORETYPE", want.c_str(), 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  g_info.core = corename();
  g_info.reason = "OpenBLAS detected " + g_info.detected + "; this CPU supports " +
                  cpu_vector_isa() + ", so Kiln selected " + g_info.core;
}

}  // namespace

std::string cpu_vector_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "sse";
}

void blas_init() {
  std::call_once(g_once, choose_core);
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  g_info.threads = openblas_get_num_threads ? openblas_get_num_threads() : 1;
}

BlasInfo blas_info() {
  blas_init();
  return g_info;
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace kiln::cpu
