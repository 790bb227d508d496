#pragma once
// Unbatched products through cuBLASLt (set_preferred_blas_library(Cublaslt), core/cuda.h).
// Backend-internal.
#include "../../core/tensor.h"

namespace kiln::cuda {

// out (M, N) = a (M, K) @ b (K, N), plus bias (N) added to every row in the GEMM's
// epilogue when `bias` is given, plus out itself when `accumulate` (beta = 1): one
// cublasLtMatmul with its heuristic's algorithm, float32 arithmetic (CUBLAS_COMPUTE_32F,
// no TF32). a and b float32, or bfloat16 both (autocast's mixed product); out and bias
// float32, contiguous; a and b in any BLAS layout (matrix_layout.h); no batch dims beyond
// size 1; M, N, K > 0. Returns false, having done nothing, where the preferred library is
// cuBLAS (core/cuda.h), where any of that does not hold, or where cuBLASLt has no
// algorithm for the sizes and alignments: the caller takes cuBLAS then.
bool lt_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out, bool accumulate);

}  // namespace kiln::cuda
