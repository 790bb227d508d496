#pragma once
// What a program can ask about CUDA, in every build of Kiln (no CUDA header here): a
// CPU-only build answers "not built", a CUDA build on a machine without a usable GPU
// answers with the runtime's reason. Nothing here starts the CUDA runtime before it is
// first called.
#include <cstdint>
#include <optional>
#include <string>

namespace kiln::cuda {

// Whether this build of Kiln has the CUDA backend.
bool is_built();
// Whether a CUDA tensor can be made: built, and the runtime found at least one GPU.
bool is_available();
// The number of usable GPUs (0 when not available).
int device_count();
// Why is_available() is false ("" when it is true), e.g. "CUDA is not available in this
// build of Kiln" or "no CUDA-capable device is detected".
std::string unavailable_reason();
// Waits until every kernel and copy queued on the GPUs has finished (for timing). A
// no-op without CUDA.
void synchronize();
// Returns the CUDA caching allocator's unused blocks to the driver (cudaFree); a no-op
// without CUDA. See memory_stats(Device("cuda")) for what it holds.
void empty_cache();
// Caps the bytes the CUDA caching allocator keeps for reuse on each GPU (no cap by
// default; std::nullopt removes it). A tensor freed while the cache is full gives its
// block back to the driver at the next allocation on that GPU (which waits for the
// GPU then); lowering the cap gives back the blocks beyond it at once, largest first.
// A negative cap is an error. Without CUDA it is only remembered.
void set_cache_limit(std::optional<int64_t> bytes);
// The cap set last (std::nullopt: none).
std::optional<int64_t> cache_limit();

// Which kernels attention (scaled_dot_product_attention, MultiheadAttention) runs on a
// GPU, for every thread (torch.backends.cuda.enable_flash_sdp / enable_math_sdp's idea):
//   Auto: the tiled kernels where the (N, H, L, S) scores would take more than 1 GiB,
//         else cuBLAS around the materialised scores (about 3x faster on an H200, at
//         7-25x the memory: benchmarks/history/);
//   Tiled: the tiled kernels wherever they fit (heads up to 128 wide);
//   Materialized: always the scores in a temporary, as before.
// Every choice gives the same results to rounding; CPU attention is not affected.
enum class AttentionKernel { Auto, Tiled, Materialized };
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

// Which cuBLAS interface a GPU's unbatched products (a linear layer's, the 2-D matmul)
// take, for every thread (torch.backends.cuda.preferred_blas_library's idea):
//   Cublaslt (the default): cublasLtMatmul with the algorithm of its heuristic, a
//          linear's bias added in the GEMM's epilogue (one write and one read of the
//          output fewer; PyTorch's addmm does the same), for float32 and autocast's
//          bfloat16 products where cuBLASLt has a kernel for the sizes and alignments
//          (anything else takes the Cublas path); the seed Transformer's fp32 step on an
//          H200 ran 0.5 ms faster than with Cublas (benchmarks/history/);
//   Cublas: cublas<t>gemmStridedBatched; a bias is broadcast into the output first and
//          the product accumulated onto it.
// Both give the same results to rounding (float32 arithmetic, no TF32, either way);
// batched products and float64 take cuBLAS. CPU products are not affected. Until the
// first set_preferred_blas_library call, the environment variable KILN_CUDA_BLAS
// ("cublas" or "cublaslt"; anything else is an error at the next product) picks the
// process's choice, as TORCH_BLAS_PREFER_CUBLASLT does PyTorch's.
enum class BlasLibrary { Cublas, Cublaslt };
void set_preferred_blas_library(BlasLibrary library);
BlasLibrary preferred_blas_library();
// GEMM tuning for every thread (torch.cuda.tunable.enable's idea; off by default): under
// Cublaslt, the first call of each problem (sizes, layouts, dtypes, bias, alignments)
// times up to 96 candidates on a scratch output, a few launches each, and keeps the
// fastest for the process: the heuristic's first 16 algorithms, and each of those with
// its other tile shapes and with K split in 2 or 4. KILN_CUDA_BLAS_TUNING_LOG=1 prints
// each problem's first and fastest candidate on stderr. Results stay float32 arithmetic, but
// which algorithm wins depends on timing, so two processes may sum in different orders
// and differ in the last bits: leave it off where a run must be bitwise repeatable.
// Switching it changes only plans made afterwards.
void set_blas_tuning(bool enabled);
bool blas_tuning();

}  // namespace kiln::cuda
