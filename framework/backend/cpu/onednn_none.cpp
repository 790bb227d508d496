// onednn_gemm.h in a Kiln built without oneDNN (meson found no libdnnl, or -Donednn=disabled):
// nothing is available and the GEMMs say so.
#include "backend/cpu/onednn_gemm.h"

#include "core/error.h"

namespace kiln::cpu::onednn {
namespace {

[[noreturn]] void not_built(const char* op) {
  KILN_FAIL(op, "oneDNN is not built into this Kiln (install libdnnl-dev and configure with -Donednn=enabled)");
}

}  // namespace

bool available() { return false; }

bool has_bf16() { return false; }

bool has_avx512() { return false; }

bool has_native_bf16() { return false; }

std::string describe() { return "oneDNN: not built in"; }

void gemm_bf16(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*,
               int64_t, float*, int64_t, bool) {
  not_built("gemm_bf16");
}

void gemm_bf16_bias(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t,
                    const float*, float*, int64_t) {
  not_built("gemm_bf16_bias");
}

void gemm_f32(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
              float*, int64_t, bool) {
  not_built("gemm_f32");
}

void gemm_f32_bias(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                   const float*, float*, int64_t) {
  not_built("gemm_f32_bias");
}

void gemm_bf16_batched(int64_t, bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                       int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, int64_t, bool) {
  not_built("gemm_bf16_batched");
}

void gemm_f32_batched(int64_t, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                      int64_t, const float*, int64_t, int64_t, float*, int64_t, int64_t, bool) {
  not_built("gemm_f32_batched");
}

CacheStats cache_stats() { return {}; }

}  // namespace kiln::cpu::onednn
