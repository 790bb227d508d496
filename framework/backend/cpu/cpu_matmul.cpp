// Batched matmul through single-threaded OpenBLAS, partitioned by TBB:
// a (…, M, K) @ b (…, K, N) -> out (…, M, N). Transposed operands go to BLAS as
// transpose flags; only a layout BLAS cannot express (stride-0 rows, arbitrary
// strides) is copied. A single float32 product of some size goes to oneDNN's fp32 GEMM
// instead where Kiln has oneDNN (kOnednnMinFlops), cut the same way; one of at most 16
// rows against a weight stored (N, K) to small_gemm.h's kernel, which does not pack.
// Autocast's mixed product (bfloat16 a and b, float32 out) goes to oneDNN's bf16 GEMM
// where the CPU has bf16 units, else to OpenBLAS on widened copies.
#include <algorithm>
#include <type_traits>

#include "backend/bfloat16_staged.h"
#include "backend/cpu/blas.h"
#include "backend/matrix_layout.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/small_gemm.h"

namespace kiln::cpu {
namespace {

// Element offset of batch `i` (row-major over the batch dims) in t.
int64_t batch_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    int64_t sz = t.size(d);
    off += (i % sz) * t.stride(d);
    i /= sz;
  }
  return off;
}

// Roughly the flops below which splitting a gemm across threads costs more than it saves.
constexpr double kMinFlopsPerTask = 4e5;

// A single float32 product from this many flops runs on oneDNN's fp32 GEMM where Kiln has
// oneDNN, OpenBLAS's otherwise (and below it, where a oneDNN call's few microseconds of
// overhead would show: the tiny step's products are 0.01-0.2 MFLOP). Measured on an
// AVX-512 Xeon (bench_gemm_bf16 --cases small,seed, one thread, in the same blocks):
// oneDNN 1.05-1.35x OpenBLAS on the small training step's linear layers (1024 rows,
// widths 128-1000), 0.76-1.13x on the base step's (6400 rows, widths 512-5000; slower
// only on two weight gradients with 768- and 1024-row blocks of a transposed operand,
// which onednn_gemm.cpp now cuts along K instead: split_along_k),
// and a linear's bias is added inside oneDNN's GEMM instead of copied into the rows
// first (matmul_bias). Whole steps, process CPU time at one thread: small -12%, seed -6%.
// The bits differ from OpenBLAS's (another summation order), and are again the same at
// any thread count: oneDNN gets blocks fixed by the shape, one single-threaded call each.
constexpr double kOnednnMinFlops = 2e6;

// On a CPU without AVX-512 (an AVX2 Zen 3, bench_gemm_bf16 --cases small,base, 2 threads)
// oneDNN's fp32 GEMM ran the products with a stored as it is at 1.02-1.29x OpenBLAS's
// (forward x Wᵀ and input gradients g W) but the weight gradients gᵀ x, a transposed, at
// 0.71-0.99x: those stay on OpenBLAS there.
bool fp32_on_onednn(int64_t M, int64_t N, int64_t K, bool a_transposed) {
  return onednn::available() && 2.0 * static_cast<double>(M) * N * K >= kOnednnMinFlops &&
         (!a_transposed || onednn::has_avx512());
}

template <class T>
void matmul_typed(const Tensor& a_in, const Tensor& b_in, const Tensor& out, bool accumulate) {
  Tensor a = a_in, b = b_in;
  MatLayout la, lb;
  if (!blas_layout(a, la)) {
    a = a.contiguous();
    blas_layout(a, la);
  }
  if (!blas_layout(b, lb)) {
    b = b.contiguous();
    blas_layout(b, lb);
  }
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  if (M == 0 || N == 0 || batches == 0) return;
  T* c = out.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  blas_init();
  const double flops = 2.0 * static_cast<double>(M) * N * std::max<int64_t>(K, 1);
  const T beta = accumulate ? T(1) : T(0);

  // How the work is cut depends on the shape only, never on the thread count: a
  // sub-GEMM of another shape may take another OpenBLAS kernel or K-blocking (its
  // small-matrix path, edge kernels) and so round differently, and the result must be
  // the same bits for any set_num_threads. One thread runs the same cuts in turn.
  if constexpr (std::is_same_v<T, float>) {
    if (batches == 1 && !la.trans && lb.trans && small_gemm_applies(M, N, K))
      return gemm_small_nt(M, N, K, pa, la.ld, pb, lb.ld, nullptr, c, N, accumulate);
    if (batches == 1 && fp32_on_onednn(M, N, K, la.trans))
      return onednn::gemm_f32(la.trans, lb.trans, M, N, K, pa, la.ld, pb, lb.ld, c, N, accumulate);
  }
  if (batches > 1 || flops < 2 * kMinFlopsPerTask) {
    int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMinFlopsPerTask / flops));
    parallel_for(batches, grain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        gemm(la.trans, lb.trans, M, N, K, T(1), pa + batch_offset(a, i), la.ld,
             pb + batch_offset(b, i), lb.ld, beta, c + i * M * N, N);
    });
    return;
  }
  // One big product: the larger of M and N cut into blocks of whole kernel tiles (16),
  // at least 2 and about kBlockExtent long, at most kMaxBlocks.
  // Measured (benchmarks/bench_matmul, benchmarks/history/; 2-core Zen 3, OpenBLAS
  // 0.3.21 Zen kernels, float32 square n = 256..2048, median of 10 runs): one block per
  // thread runs at 1.00-1.02x one cblas_sgemm with OpenBLAS's own 2 threads; splitting
  // N instead, 2 or 4 blocks per thread, or a 2x2 grid came out the same or up to ~10%
  // slower (within the noise of a shared machine): every block packs the whole of the
  // other operand again, so blocks stay long. Handing a big gemm to OpenBLAS's threads
  // instead gains nothing (at best equal; slower at n = 256) and would need OpenBLAS's
  // process-wide thread count changed per call, which a TBB-partitioned matmul on
  // another thread would then inherit: both crowds at once.
  constexpr int64_t kBlockExtent = 1024, kMaxBlocks = 16, kTile = 16;
  const bool split_m = M >= N;
  const int64_t extent = split_m ? M : N;
  const int64_t parts = std::min<int64_t>(std::clamp<int64_t>(extent / kBlockExtent, 2, kMaxBlocks),
                                          static_cast<int64_t>(flops / kMinFlopsPerTask));
  const int64_t block = ((extent + parts - 1) / parts + kTile - 1) / kTile * kTile;
  const FixedChunks blocks{(extent + block - 1) / block, block};
  parallel_for_fixed(extent, blocks, [&](int64_t, int64_t s, int64_t e) {
    if (split_m) {
      const T* a_rows = pa + (la.trans ? s : s * la.ld);
      gemm(la.trans, lb.trans, e - s, N, K, T(1), a_rows, la.ld, pb, lb.ld, beta, c + s * N, N);
    } else {
      const T* b_cols = pb + (lb.trans ? s * lb.ld : s);
      gemm(la.trans, lb.trans, M, e - s, K, T(1), pa, la.ld, b_cols, lb.ld, beta, c + s, N);
    }
  });
}

// t when oneDNN can take it as is (a BLAS layout, batches at one stride), else a
// contiguous bfloat16 copy.
Tensor onednn_ready(CpuBackend& be, const Tensor& t, MatLayout& layout, int64_t& batch_stride) {
  if (blas_layout(t, layout) && uniform_batch_stride(t, batch_stride)) return t;
  Tensor c = Tensor::empty(t.shape(), TensorOptions(kBFloat16));
  be.copy(t, c);
  blas_layout(c, layout);
  uniform_batch_stride(c, batch_stride);
  return c;
}

const uint16_t* bits(const Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data<bfloat16>()); }

// out (…, M, N) float32 (+)= a (…, M, K) @ b (…, K, N), a and b bfloat16; K > 0. oneDNN
// cuts the work into blocks fixed by the shape, as matmul_typed does for OpenBLAS.
void matmul_bf16_onednn(CpuBackend& be, const Tensor& a_in, const Tensor& b_in, const Tensor& out,
                        bool accumulate) {
  MatLayout la, lb;
  int64_t sa = 0, sb = 0;
  const Tensor a = onednn_ready(be, a_in, la, sa), b = onednn_ready(be, b_in, lb, sb);
  const int64_t nd = out.dim();
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  const int64_t batches = out.numel() / std::max<int64_t>(M * N, 1);
  if (M == 0 || N == 0 || batches == 0) return;
  float* c = out.data<float>();
  if (batches == 1) {
    onednn::gemm_bf16(la.trans, lb.trans, M, N, K, bits(a), la.ld, bits(b), lb.ld, c, N, accumulate);
  } else {
    onednn::gemm_bf16_batched(batches, la.trans, lb.trans, M, N, K, bits(a), la.ld, sa, bits(b), lb.ld, sb, c, N,
                              M * N, accumulate);
  }
}

}  // namespace

// A product with its bias on oneDNN (the mixed one, and float32 from kOnednnMinFlops) adds
// the bias in the GEMM; anything else as the base class (the bias copied into out, the
// product accumulated onto it).
void CpuBackend::matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const int64_t M = out.size(0), N = out.size(1), K = a.size(1);
  if (a.dtype() == kFloat32 && b.dtype() == kFloat32 && bias.dtype() == kFloat32 && K > 0) {
    // The path first, from the layouts (one BLAS cannot express is copied to a contiguous,
    // untransposed one); the copies only for a path that takes the product.
    MatLayout la, lb;
    const bool a_ok = blas_layout(a, la), b_ok = blas_layout(b, lb);
    const bool a_trans = a_ok && la.trans, b_trans = b_ok && lb.trans;
    const bool small = !a_trans && b_trans && small_gemm_applies(M, N, K);
    if (small || fp32_on_onednn(M, N, K, a_trans)) {
      const Tensor ar = a_ok ? a : a.contiguous(), br = b_ok ? b : b.contiguous();
      if (!a_ok) blas_layout(ar, la);
      if (!b_ok) blas_layout(br, lb);
      const Tensor bc = bias.is_contiguous() ? bias : float32_copy(*this, bias);
      if (small)
        return gemm_small_nt(M, N, K, ar.data<float>(), la.ld, br.data<float>(), lb.ld, bc.data<float>(),
                             out.data<float>(), N, /*accumulate=*/false);
      return onednn::gemm_f32_bias(la.trans, lb.trans, M, N, K, ar.data<float>(), la.ld, br.data<float>(), lb.ld,
                                   bc.data<float>(), out.data<float>(), N);
    }
  }
  if (a.dtype() != kBFloat16 || bias.dtype() != kFloat32 || !onednn::has_native_bf16() || K == 0)
    return Backend::matmul_bias(a, b, bias, out);
  MatLayout la, lb;
  int64_t sa = 0, sb = 0;
  const Tensor ar = onednn_ready(*this, a, la, sa), br = onednn_ready(*this, b, lb, sb);
  const Tensor bc = bias.is_contiguous() ? bias : float32_copy(*this, bias);
  onednn::gemm_bf16_bias(la.trans, lb.trans, M, N, K, bits(ar), la.ld, bits(br), lb.ld, bc.data<float>(),
                         out.data<float>(), N);
}

std::string autocast_bf16_path() {
  if (onednn::has_native_bf16()) return "oneDNN native";
  return std::string("fp32 compute on bf16-rounded inputs (") +
         (onednn::available() ? "this CPU has no native bf16 GEMM" : "no oneDNN") + ")";
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  if (a.size(a.dim() - 1) == 0) {  // K = 0: an empty sum
    if (!accumulate) fill(out, 0.0);
    return;
  }
  if (out.dtype() == kFloat64) return matmul_typed<double>(a, b, out, accumulate);
  if (a.dtype() == kBFloat16) {
    KILN_CHECK(b.dtype() == kBFloat16 && out.dtype() == kFloat32, "matmul",
               "a bfloat16 product takes two bfloat16 operands into a float32 output, got ", dtype_name(b.dtype()),
               " and ", dtype_name(out.dtype()));
    if (onednn::has_native_bf16()) return matmul_bf16_onednn(*this, a, b, out, accumulate);
    // No bf16 units (or no oneDNN): oneDNN would emulate bf16 at a fraction of fp32's
    // speed, so OpenBLAS multiplies the same values widened to float32 (exact), summed
    // in its own order.
    return matmul_typed<float>(float32_copy(*this, a), float32_copy(*this, b), out, accumulate);
  }
  matmul_typed<float>(a, b, out, accumulate);
}

}  // namespace kiln::cpu
