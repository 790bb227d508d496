// core/cuda.h in both builds: a CPU-only build answers "not built" without any CUDA
// code; a CUDA build asks the plug-in (which starts the runtime on the first question).
#include "core/cuda.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln::cuda {
namespace {
std::atomic<int64_t> g_limit{-1};  // set_cache_limit's cap; -1: none
std::atomic<AttentionKernel> g_attention{AttentionKernel::Auto};
// set_preferred_blas_library's choice; -1 until the first call, and till then the
// environment's (blas_from_environment) is in force.
std::atomic<int> g_blas{-1};
std::atomic<bool> g_tuning{false};

// KILN_CUDA_BLAS=cublas or cublaslt, read at every question while no choice was set (a
// getenv and a compare beside a GEMM launch), so that a process's default can be picked
// from outside (TORCH_BLAS_PREFER_CUBLASLT's idea): gpu_check.sh runs initcheck with cuBLAS.
BlasLibrary blas_from_environment() {
  const char* env = std::getenv("KILN_CUDA_BLAS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "cublaslt") == 0) return BlasLibrary::Cublaslt;
  if (std::strcmp(env, "cublas") == 0) return BlasLibrary::Cublas;
  KILN_FAIL("preferred_blas_library", "KILN_CUDA_BLAS must be cublas or cublaslt, got '", env, "'");
}
}  // namespace

void set_cache_limit(std::optional<int64_t> bytes) {
  KILN_CHECK(!bytes || *bytes >= 0, "set_cache_limit", "the cap must be at least 0 bytes, got ", bytes.value_or(0));
  g_limit.store(bytes.value_or(-1));
#ifdef KILN_WITH_CUDA
  set_cache_limit_bytes(bytes ? static_cast<size_t>(*bytes) : SIZE_MAX);
#endif
}

std::optional<int64_t> cache_limit() {
  const int64_t v = g_limit.load();
  return v < 0 ? std::nullopt : std::optional<int64_t>(v);
}

void set_attention_kernel(AttentionKernel kernel) {
  KILN_CHECK(kernel == AttentionKernel::Auto || kernel == AttentionKernel::Tiled ||
                 kernel == AttentionKernel::Materialized,
             "set_attention_kernel", "unknown kernel choice ", static_cast<int>(kernel));
  g_attention.store(kernel);
}

AttentionKernel attention_kernel() { return g_attention.load(); }

void set_preferred_blas_library(BlasLibrary library) {
  KILN_CHECK(library == BlasLibrary::Cublas || library == BlasLibrary::Cublaslt, "set_preferred_blas_library",
             "unknown library choice ", static_cast<int>(library));
  g_blas.store(static_cast<int>(library));
}

BlasLibrary preferred_blas_library() {
  const int chosen = g_blas.load();
  return chosen < 0 ? blas_from_environment() : static_cast<BlasLibrary>(chosen);
}

void set_blas_tuning(bool enabled) { g_tuning.store(enabled); }
bool blas_tuning() { return g_tuning.load(); }

#ifdef KILN_WITH_CUDA

bool is_built() { return true; }
bool is_available() { return runtime_error().empty(); }
int device_count() { return usable_device_count(); }
std::string unavailable_reason() {
  const std::string& e = runtime_error();
  return e.empty() ? std::string() : "CUDA is built but no GPU is usable: " + e;
}
void synchronize() { synchronize_devices(); }
void empty_cache() { release_cached_blocks(); }

#else

bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "CUDA is not available in this build of Kiln"; }
void synchronize() {}
void empty_cache() {}

#endif

}  // namespace kiln::cuda
