#pragma once
// cuBLAS and cuBLASLt, loaded when the first GPU product needs them rather than when
// libkiln loads. Merely loading libcublasLt runs its static initialisers: 150 MB of
// resident memory and 0.1 s at start-up (CUDA 13, measured with an empty program linked
// to it), which every CPU-only run of a CUDA build of Kiln would pay for nothing.
//
// The backend calls cuBLAS through the table: cublas_api().cublasLtMatmul(...). The
// header's own macros still apply (cublasCreate names cublasCreate_v2, a member here).
// A function added to the lists below is looked up by its exported name; one called
// directly instead fails to link, since libkiln does not link cuBLAS.
#include <cublasLt.h>
#include <cublas_v2.h>

namespace kiln::cuda {

// Exported names, as the headers map the API's names onto them.
#define KILN_CUBLAS_FUNCTIONS(X)  \
  X(cublasCreate_v2)              \
  X(cublasSetStream_v2)           \
  X(cublasSetWorkspace_v2)        \
  X(cublasSetMathMode)            \
  X(cublasSetPointerMode_v2)      \
  X(cublasGetProperty)            \
  X(cublasGetStatusString)        \
  X(cublasGetStatusName)          \
  X(cublasSgemmStridedBatched)    \
  X(cublasDgemmStridedBatched)    \
  X(cublasSgemmBatched)           \
  X(cublasDgemmBatched)

// Overloaded in C++ (the header adds inline forms taking the older cudaDataType compute
// type), so named by their exported signature, the one with cublasComputeType_t.
using GemmStridedBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long, const void*,
                                                  cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                  long long, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmBatchedExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                           const void*, const void* const[], cudaDataType, int, const void* const[],
                                           cudaDataType, int, const void*, void* const[], cudaDataType, int, int,
                                           cublasComputeType_t, cublasGemmAlgo_t);
#define KILN_CUBLAS_TYPED_FUNCTIONS(X) \
  X(cublasGemmStridedBatchedEx, GemmStridedBatchedExFn) X(cublasGemmBatchedEx, GemmBatchedExFn)

#define KILN_CUBLASLT_FUNCTIONS(X)         \
  X(cublasLtCreate)                        \
  X(cublasLtMatmul)                        \
  X(cublasLtMatmulDescCreate)              \
  X(cublasLtMatmulDescDestroy)             \
  X(cublasLtMatmulDescSetAttribute)        \
  X(cublasLtMatrixLayoutCreate)            \
  X(cublasLtMatrixLayoutDestroy)           \
  X(cublasLtMatmulPreferenceCreate)        \
  X(cublasLtMatmulPreferenceDestroy)       \
  X(cublasLtMatmulPreferenceSetAttribute)  \
  X(cublasLtMatmulAlgoGetHeuristic)        \
  X(cublasLtMatmulAlgoCheck)               \
  X(cublasLtMatmulAlgoCapGetAttribute)     \
  X(cublasLtMatmulAlgoConfigGetAttribute)  \
  X(cublasLtMatmulAlgoConfigSetAttribute)

struct CublasApi {
#define KILN_CUBLAS_MEMBER(f) decltype(&::f) f = nullptr;
  KILN_CUBLAS_FUNCTIONS(KILN_CUBLAS_MEMBER)
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLAS_MEMBER)
#undef KILN_CUBLAS_MEMBER
#define KILN_CUBLAS_TYPED_MEMBER(f, type) type f = nullptr;
  KILN_CUBLAS_TYPED_FUNCTIONS(KILN_CUBLAS_TYPED_MEMBER)
#undef KILN_CUBLAS_TYPED_MEMBER
};

// The table, both libraries loaded (libcublas.so.N and libcublasLt.so.N, N the major
// version of the headers Kiln was built with, found as the loader finds any library) on
// the first call; thread-safe. Throws kiln::Error "[cuda] cuBLAS: ..." naming the library
// or function that is missing (and tries again on the next call).
const CublasApi& cublas_api();

}  // namespace kiln::cuda
