// Batched matmul through cuBLAS: a (…, M, K) @ b (…, K, N) -> out (…, M, N).
//
// cuBLAS is column-major; a row-major product C = A·B is the column-major product
// Cᵀ = Bᵀ·Aᵀ, and a row-major matrix handed over as-is *is* its transpose to cuBLAS.
// So the call is gemm(m = N, n = M, k = K, first = b, second = a, ldc = N), with each
// operand's transpose flag saying whether it was itself stored transposed. One
// cublas<t>gemmStridedBatched covers all batches when every operand's batch offsets
// are i·stride (a stride of 0 broadcasts); an operand whose matrices cuBLAS cannot
// address (arbitrary strides, stride-0 rows) or whose batch dims do not collapse to
// one stride is first copied to a contiguous buffer. Autocast's mixed product (bfloat16
// a and b, float32 out) is cublasGemmStridedBatchedEx with CUDA_R_16BF operands, a
// CUDA_R_32F result and CUBLAS_COMPUTE_32F: float32 accumulation, as the CPU's.
// With set_preferred_blas_library(Cublaslt) an unbatched product, and a linear's with its
// bias, goes to cuBLASLt first (cuda_gemm_lt.cpp).
#include <algorithm>
#include <climits>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_gemm_lt.h"
#include "backend/env_flag.h"
#include "backend/matrix_layout.h"

namespace kiln::cuda {
namespace {

// t when cuBLAS can take it as is, else a contiguous copy on the same device.
Tensor gemm_ready(CudaBackend& be, const Tensor& t, MatLayout& layout, int64_t& batch_stride) {
  if (blas_layout(t, layout) && uniform_batch_stride(t, batch_stride)) return t;
  Tensor c = Tensor::empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  be.copy(t, c);
  blas_layout(c, layout);
  uniform_batch_stride(c, batch_stride);
  return c;
}

// cublas{S,D}gemmStridedBatched by the element type.
cublasStatus_t gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const float* alpha, const float* a, int lda, long long sa, const float* b,
                                    int ldb, long long sb, const float* beta, float* c, int ldc, long long sc,
                                    int count) {
  return cublas_api().cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                                                count);
}
cublasStatus_t gemm_strided_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const double* alpha, const double* a, int lda, long long sa, const double* b,
                                    int ldb, long long sb, const double* beta, double* c, int ldc, long long sc,
                                    int count) {
  return cublas_api().cublasDgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc,
                                                count);
}

// KILN_CUDA_PREFILL_PRODUCTS=1, a diagnostic for compute-sanitizer's initcheck: every
// product's output is filled with zeros before the GEMM writes it. initcheck does not see
// the stores of cuBLAS's kernels that go through the tensor memory accelerator, so it
// reports later reads of their outputs; with the outputs written first, a report that
// remains is a read of memory that nothing wrote.
bool prefill_products() {
  static const bool on = env_flag("KILN_CUDA_PREFILL_PRODUCTS");
  return on;
}

int as_int(int64_t v, const Tensor& out) {
  KILN_CHECK(v <= INT_MAX, "matmul", "a dimension of ", v, " is beyond cuBLAS's 32-bit sizes (output shape ",
             shape_str(out.shape()), ")");
  return static_cast<int>(v);
}

}  // namespace

bool CudaBackend::supports(Kernel kernel, DType in, DType out) const {
  return supports_autocast_forms(kernel, in, out);
}

void CudaBackend::matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& out, bool accumulate) {
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a_in.size(nd - 1);
  if (out.numel() == 0) return;
  if (K == 0) {  // an empty sum
    if (!accumulate) fill(out, 0.0);
    return;
  }
  if (!accumulate && prefill_products()) fill(out, 0.0);
  if (lt_matmul(a_in, b_in, nullptr, out, accumulate)) return;  // under set_preferred_blas_library(Cublaslt)
  DeviceGuard guard(out);
  MatLayout la, lb;
  int64_t sa = 0, sb = 0;
  Tensor a = gemm_ready(*this, a_in, la, sa);
  Tensor b = gemm_ready(*this, b_in, lb, sb);
  const int64_t batches = out.numel() / (M * N);
  const int m = as_int(N, out), n = as_int(M, out), k = as_int(K, out);
  const int lda = as_int(lb.ld, out), ldb = as_int(la.ld, out), ldc = m;
  const cublasOperation_t op_first = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const long long stride_first = sb, stride_second = sa, stride_c = M * N;
  cublasHandle_t h = blas_handle(out.device().index);
  // Slices of at most 65535 batches: the grid's z limit, which some cuBLAS kernels map
  // the batch to.
  constexpr int64_t kMaxBatch = 65535;
  for (int64_t b0 = 0; b0 < batches; b0 += kMaxBatch) {
    const int count = static_cast<int>(std::min(kMaxBatch, batches - b0));
    if (a.dtype() == kBFloat16) {
      KILN_CHECK(b.dtype() == kBFloat16 && out.dtype() == kFloat32, "matmul",
                 "a bfloat16 product takes two bfloat16 operands into a float32 output, got ",
                 dtype_name(b.dtype()), " and ", dtype_name(out.dtype()));
      const float one = 1, beta = accumulate ? 1 : 0;
      const auto* pb = reinterpret_cast<const uint16_t*>(b.data<bfloat16>()) + b0 * sb;
      const auto* pa = reinterpret_cast<const uint16_t*>(a.data<bfloat16>()) + b0 * sa;
      KILN_CUBLAS_CHECK(cublas_api().cublasGemmStridedBatchedEx(
                            h, op_first, op_second, m, n, k, &one, pb, CUDA_R_16BF, lda, stride_first, pa, CUDA_R_16BF,
                            ldb, stride_second, &beta, out.data<float>() + b0 * stride_c, CUDA_R_32F, ldc, stride_c,
                            count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "matmul");
      continue;
    }
    visit_floating("matmul", out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T one = 1, beta = accumulate ? 1 : 0;
      KILN_CUBLAS_CHECK(gemm_strided_batched(h, op_first, op_second, m, n, k, &one, b.data<T>() + b0 * sb, lda,
                                             stride_first, a.data<T>() + b0 * sa, ldb, stride_second, &beta,
                                             out.data<T>() + b0 * stride_c, ldc, stride_c, count),
                        "matmul");
    });
  }
}

void CudaBackend::matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  if (prefill_products()) fill(out, 0.0);
  if (lt_matmul(a, b, &bias, out, false)) return;  // under set_preferred_blas_library(Cublaslt)
  Backend::matmul_bias(a, b, bias, out);  // the bias broadcast into out, the product accumulated onto it
}

}  // namespace kiln::cuda
