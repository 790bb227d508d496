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
// AVX-512 CPUs get SKYLAKEX even when they have AVX512_BF16. COOPERLAKE's sgemm/dgemm
// kernels and blocking are SKYLAKEX's (it adds only bf16 kernels, which Kiln does not
// call), and OpenBLAS 0.3.21 cannot be forced to it: its force_coretype() only compares
// names up to "SkylakeX", so OPENBLAS_CORETYPE=COOPERLAKE is "Core not found" (a
// warning shown only with OPENBLAS_VERBOSE) and the kernels come from OpenBLAS's own
// fallback chain instead (bf16 -> Cooperlake, avx512 -> SkylakeX, avx2 -> Haswell, ...);
// on this Zen 3 machine, for example, it yields Haswell. Fixed upstream after 0.3.21
// (OpenBLAS PR #3806). SKYLAKEX is in the list of every DYNAMIC_ARCH build with AVX-512.
std::string best_core() {
  if (cpu_vector_isa() == "avx512") return "SKYLAKEX";
  if (cpu_vector_isa() == "avx2") return is_amd() ? "ZEN" : "HASWELL";
  return "";
}

std::string corename() { return openblas_get_corename ? openblas_get_corename() : "unknown"; }

// Re-runs OpenBLAS's choice of kernel table: forced to `core`, or its own detection when
// `core` is empty. OPENBLAS_CORETYPE is read only here, so it is removed again afterwards
// (a child process would otherwise take Kiln's choice for the user's).
void reselect_core(const std::string& core) {
  if (!core.empty()) setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

void switch_core() {
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
  // Safe here: no Kiln BLAS call has run yet, and the switch only swaps OpenBLAS's table
  // of kernels and blocking parameters. (It is not safe against another library calling
  // BLAS on another thread at this very moment: quit() empties the table for a moment.)
  // The result is checked: a name OpenBLAS does not know gives its fallback instead.
  reselect_core(want);
  std::string got = corename();
  if (core_rank(got) < core_rank(want)) {
    // OpenBLAS did not take the name (it then prints "Core not found" and falls back by
    // its own CPU checks): keep that fallback only if it beats the core it detected.
    if (core_rank(got) < core_rank(g_info.detected)) reselect_core("");
    g_info.core = corename();
    g_info.reason = "OpenBLAS could not switch to " + want + " (it gave " + got + "); kept " +
                    g_info.core;
    return;
  }
  g_info.core = got;
  g_info.reason = "OpenBLAS detected " + g_info.detected + "; this CPU supports " +
                  cpu_vector_isa() + ", so Kiln selected " + g_info.core;
}

// The whole set-up, run once (std::call_once): every matmul calls blas_init(), possibly
// from several threads at once, so nothing global is written after this.
void set_up() {
  switch_core();
  // After the switch: OpenBLAS's config string names the core in use.
  g_info.library = openblas_get_config ? openblas_get_config() : "CBLAS (not OpenBLAS)";
  if (openblas_set_num_threads) openblas_set_num_threads(1);
  g_info.threads = openblas_get_num_threads ? openblas_get_num_threads() : 1;
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

void blas_init() { std::call_once(g_once, set_up); }

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
