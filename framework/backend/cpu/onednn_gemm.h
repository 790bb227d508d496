#pragma once
// GEMMs through oneDNN's matmul primitive (optional: meson option `onednn`, built in when
// libdnnl is found, KILN_WITH_ONEDNN). bf16 operands with fp32 accumulation run on the
// CPU's AMX (or AVX512_BF16) units where it has them: on AMX several times faster than
// fp32 sgemm. Raw pointers, so that this layer knows nothing of Kiln's dtypes: a bf16
// value is given as its 16 bits (the high half of the float32 with the same bits).
//
// Every function here is safe to call from several threads at once. A product is cut
// into blocks fixed by its shape (as cpu_matmul.cpp cuts OpenBLAS's), the blocks run on
// Kiln's oneTBB pool, each a single-threaded oneDNN call (oneDNN's own OpenMP threads are
// kept at one per calling thread): the result has the same bits at any thread count.
#include <cstdint>
#include <string>

namespace kiln::cpu::onednn {

// True when oneDNN is built into this Kiln and its CPU engine works: the fp32 GEMMs.
bool available();

// True when oneDNN also has bf16 GEMMs for this CPU, native or emulated (builds of oneDNN
// 2.x have none below AVX512_CORE); without them the bf16 GEMMs throw.
bool has_bf16();

// True when oneDNN runs with AVX-512 (its ISA is AVX512_CORE or above).
bool has_avx512();

// True when oneDNN runs bf16 GEMMs on hardware made for them here (the ISA oneDNN
// detects is AVX512_CORE_BF16 or AVX512_CORE_AMX). Without them oneDNN emulates bf16 at a
// fraction of fp32's speed (0.24x of OpenBLAS's sgemm, measured with
// ONEDNN_MAX_CPU_ISA=AVX512_CORE): a caller should then compute in fp32 on the
// bf16-rounded values instead. Speed measured with oneDNN 2.6.3 on an AMX Xeon
// (bench_gemm_bf16, seed-step shapes, one thread): with AMX 2.3-5x fp32 OpenBLAS; with
// AMX masked off (AVX512_CORE_BF16 only) 0.66-0.72x, so on such a CPU bf16 saves memory
// but not time.
bool has_native_bf16();

// One line for kiln::config(): "oneDNN 2.6.3, ISA AVX512_CORE_AMX, bf16 GEMM: native"
// or "oneDNN: not built in".
std::string describe();

// Row-major C (M, N) = op(A) (M, K) · op(B) (K, N), or C += op(A) · op(B) when
// `accumulate`. op(A) is A (M, K) with row stride lda, or when trans_a A stored (K, M)
// with row stride lda; the same for B. fp32 accumulation and output. M, N or K may be 0
// (K = 0: C is zeroed, or left as it is when accumulating). Throws kiln::Error naming
// "gemm_bf16" when oneDNN is not available or a leading dimension is too small.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float* C, int64_t ldc,
               bool accumulate);

// C = op(A) · op(B) + bias, bias (N) float32 added to every row in the GEMM itself (a
// linear layer's: no pass that copies the bias into C first, none that reads it back).
void gemm_bf16_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                    int64_t lda, const uint16_t* B, int64_t ldb, const float* bias, float* C,
                    int64_t ldc);

// The same with float32 operands (oneDNN's fp32 matmul), and with a bias as gemm_bf16_bias.
// Kiln's fp32 matmul runs its single products on them from a size up (cpu_matmul.cpp
// says why); float64 is OpenBLAS's alone.
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
              int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);
void gemm_f32_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc);

// `batch` products of one shape at fixed element strides: product i reads
// A + i * stride_a, B + i * stride_b and writes C + i * stride_c (a stride may be 0 for
// an operand shared by every product; C's may not, unless batch is 1). The batches are
// cut into groups fixed by the shape, each group one batched oneDNN call.
void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N,
                       int64_t K, const uint16_t* A, int64_t lda, int64_t stride_a,
                       const uint16_t* B, int64_t ldb, int64_t stride_b, float* C, int64_t ldc,
                       int64_t stride_c, bool accumulate);
void gemm_f32_batched(int64_t batch, bool trans_a, bool trans_b, int64_t M, int64_t N,
                      int64_t K, const float* A, int64_t lda, int64_t stride_a, const float* B,
                      int64_t ldb, int64_t stride_b, float* C, int64_t ldc, int64_t stride_c,
                      bool accumulate);

// How many primitives the cache holds now, and its bound (for tests).
struct CacheStats {
  int64_t size = 0, capacity = 0, hits = 0, misses = 0;
};
CacheStats cache_stats();

}  // namespace kiln::cpu::onednn
