// Dropout, and attention over N·H independent problems, with the CPU backend's
// arithmetic and random stream (cpu_attention.cpp, cpu_random.cpp):
//   q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev) -> out (N, H, L, Ev), lse (N, H, L)
// set_attention_kernel (core/cuda.h) picks between the tiled kernels of
// cuda_flash_attention.cu (heads up to 128 wide) and this file's path, which materialises
// the (N, H, L, S) scores in a temporary from the caching allocator: cuBLAS
// strided-batched GEMMs around one row kernel (one block per query row), also the path
// of whatever the tiled kernels do not fit. Dropout element (n, h, l, s) is number ((n·H + h)·L + l)·S + s of the Philox word stream at (seed, block): word e % 4
// of block (block + e / 4), as for bernoulli(1 - p).
#include <algorithm>
#include <climits>
#include <limits>
#include <type_traits>

#include "backend/cuda/cuda_attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "core/cuda.h"

namespace kiln::cuda {
namespace {

// out (n) = x (n) · keep / (1 - p): one thread per Philox block, four elements each.
template <class T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint64_t seed, uint64_t block, uint64_t threshold,
                               T scale) {
  KILN_GRID_STRIDE_LOOP(j, (n + 3) / 4) {
    const std::array<uint32_t, 4> w = philox4x32(seed, block + static_cast<uint64_t>(j));
    for (int k = 0; k < 4 && 4 * j + k < n; ++k) {
      const int64_t i = 4 * j + k;
      out[i] = static_cast<uint64_t>(w[k]) < threshold ? x[i] * scale : T(0);
    }
  }
}

// scores (N·H·L, S) of one query row: + mask, softmax in place, its logsumexp, then
// dropout: P' = P · keep / (1 - p). A row whose every score is -inf (a query that may
// attend to nothing) becomes zeros with lse -inf, as torch's _safe_softmax, not NaN.
template <class T>
__global__ void attention_rows_kernel(T* scores, T* lse, int64_t rows, int64_t H, int64_t L, int64_t S, MaskView mask,
                                      bool drop, uint64_t seed, uint64_t block, uint64_t threshold, T keep_scale) {
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r / L, l = r % L, n = b / H, h = b % H;
    T* row = scores + r * S;
    T mx = -inf;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      row[s] = masked_score(row[s], mask, n, h, l, s);
      mx = row[s] > mx ? row[s] : mx;
    }
    mx = block_max(mx, -inf);
    if (mx == -inf) {
      for (int64_t s = threadIdx.x; s < S; s += blockDim.x) row[s] = T(0);
      if (threadIdx.x == 0) lse[r] = -inf;
      continue;
    }
    double sum = 0;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      const T e = exp(row[s] - mx);
      row[s] = e;
      sum += static_cast<double>(e);
    }
    sum = block_sum(sum);
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      T pv = row[s] * inv;
      if (drop) pv = kept(seed, block, r * S + s, threshold) ? pv * keep_scale : T(0);
      row[s] = pv;
    }
    if (threadIdx.x == 0) lse[r] = mx + static_cast<T>(log(sum));
  }
}

// One query row of the backward. In: probs = scale · q kᵀ, dprobs = g vᵀ (both (N·H·L, S)).
// Out, in place: probs = P' = P · keep / (1 - p), dprobs = dS = P ∘ (dP' · keep / (1 - p) - D),
// P = exp(scores + mask - lse), D = <g_row, out_row>. A fully masked row (lse -inf) has
// P = 0, so its gradients are 0; a NaN or +inf lse gives NaN.
template <class T>
__global__ void attention_backward_rows_kernel(T* probs, T* dprobs, const T* lse, const T* g, View4 gv, const T* out,
                                               View4 ov, int64_t rows, int64_t H, int64_t L, int64_t S, int64_t Ev,
                                               MaskView mask, bool drop, uint64_t seed, uint64_t block,
                                               uint64_t threshold, T keep_scale) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r / L, l = r % L, n = b / H, h = b % H;
    double dot = 0;
    for (int64_t e = threadIdx.x; e < Ev; e += blockDim.x) {
      dot += static_cast<double>(g[offset_of(gv, n, h, l, e)]) * out[offset_of(ov, n, h, l, e)];
    }
    const T d = static_cast<T>(block_sum(dot));
    const T row_lse = lse[r];
    T* p_row = probs + r * S;
    T* dp_row = dprobs + r * S;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      const T x = masked_score(p_row[s], mask, n, h, l, s);
      const T pv = prob_from_lse(x, row_lse);
      const T keep = !drop || kept(seed, block, r * S + s, threshold) ? keep_scale : T(0);
      dp_row[s] = pv * (dp_row[s] * keep - d);
      p_row[s] = pv * keep;
    }
  }
}

// Whether set_attention_kernel's choice takes the tiled kernels for scores of this many
// bytes (they may still not fit, and then the scores are materialised).
bool tiled_attention_wanted(int64_t score_bytes) {
  switch (attention_kernel()) {
    case AttentionKernel::Tiled: return true;
    case AttentionKernel::Materialized: return false;
    case AttentionKernel::Auto: break;
  }
  // Measured on an H200 (benchmarks/RESULTS.md): the materialising path is about 3x
  // faster at 1024-4096 tokens, the tiled one holds 7-25x less; past 1 GiB of scores
  // (2 GiB of temporaries in the backward) memory wins.
  return score_bytes > (int64_t{1} << 30);
}

int as_int(int64_t v) {
  KILN_CHECK(v <= INT_MAX, "attention", "a size of ", v, " is beyond cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// The (rows, cols) matrices of a 4-D operand (N, H, rows, cols), last stride 1.
struct Heads {
  int64_t s0, s1, ld;
};
Heads heads_of(const Tensor& t) {
  // cuBLAS wants ld >= cols even where a size-1 dim's stride says otherwise.
  return {t.stride(0), t.stride(1), std::max<int64_t>({t.stride(2), t.size(3), 1})};
}

// C (M, Nc) = alpha · op(A) op(B) for each of the N·H problems, row-major; op(X) = Xᵀ
// when X is stored transposed (ta, tb). As in cuda_matmul.cu, cuBLAS gets Cᵀ = op(B)ᵀ
// op(A)ᵀ. One strided-batched call when every operand's problem b = n·H + h sits at
// b·stride, else one call per n (or per h, whichever is fewer).
template <class T>
void gemm_heads(cublasHandle_t handle, bool ta, bool tb, int64_t M, int64_t Nc, int64_t K, T alpha, const T* A,
                Heads a, const T* B, Heads b, T* C, Heads c, int64_t N, int64_t H) {
  const int m = as_int(Nc), n = as_int(M), k = as_int(K);
  const int lda = as_int(b.ld), ldb = as_int(a.ld), ldc = as_int(c.ld);
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T zero = 0;
  auto call = [&](int64_t offA, int64_t offB, int64_t offC, long long sA, long long sB, long long sC, int64_t count) {
    for (int64_t i0 = 0; i0 < count; i0 += 65535) {  // the grid's z limit, as in cuda_matmul.cu
      const int cnt = static_cast<int>(std::min<int64_t>(65535, count - i0));
      const T* pa = A + offA + i0 * sA;
      const T* pb = B + offB + i0 * sB;
      T* pc = C + offC + i0 * sC;
      if constexpr (std::is_same_v<T, double>) {
        KILN_CUBLAS_CHECK(cublasDgemmStridedBatched(handle, op_first, op_second, m, n, k, &alpha, pb, lda, sB, pa, ldb,
                                                    sA, &zero, pc, ldc, sC, cnt),
                          "attention");
      } else {
        KILN_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_first, op_second, m, n, k, &alpha, pb, lda, sB, pa, ldb,
                                                    sA, &zero, pc, ldc, sC, cnt),
                          "attention");
      }
    }
  };
  auto uniform = [&](const Heads& x, int64_t& stride) {
    if (H == 1) return stride = x.s0, true;
    if (N == 1 || x.s0 == H * x.s1) return stride = x.s1, true;
    return false;
  };
  int64_t ua = 0, ub = 0, uc = 0;
  if (uniform(a, ua) && uniform(b, ub) && uniform(c, uc)) return call(0, 0, 0, ua, ub, uc, N * H);
  if (N <= H) {
    for (int64_t i = 0; i < N; ++i) call(i * a.s0, i * b.s0, i * c.s0, a.s1, b.s1, c.s1, H);
  } else {
    for (int64_t j = 0; j < H; ++j) call(j * a.s1, j * b.s1, j * c.s1, a.s0, b.s0, c.s0, N);
  }
}

template <class T>
void attention_typed(CudaBackend& be, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double scale, double p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  if (N * H * L == 0) return;
  if (tiled_attention_wanted(N * H * L * S * static_cast<int64_t>(sizeof(T))) &&
      flash_attention<T>(q, k, v, mask, scale, p, seed, block, out, lse))
    return;
  cudaStream_t stream = stream_of(out);
  cublasHandle_t handle = blas_handle(out.device().index);
  Tensor scores = Tensor::empty({N, H, L, S}, TensorOptions(q.dtype()).device(q.device()));
  // scores (L, S) = scale · q (L, E) @ k (S, E)ᵀ
  if (S > 0) {
    if (E == 0) {
      be.fill(scores, 0.0);
    } else {
      gemm_heads<T>(handle, false, true, L, S, E, static_cast<T>(scale), q.data<T>(), heads_of(q), k.data<T>(),
                    heads_of(k), scores.data<T>(), heads_of(scores), N, H);
    }
  }
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  attention_rows_kernel<T><<<grid_for_rows(N * H * L), kThreads, 0, stream>>>(
      scores.data<T>(), lse.data<T>(), N * H * L, H, L, S, mask_view(mask), p > 0, seed, block, threshold,
      static_cast<T>(1.0 / (1.0 - p)));
  KILN_CUDA_LAUNCH_CHECK("attention");
  // out (L, Ev) = P' (L, S) @ v (S, Ev)
  if (Ev == 0) return;
  if (S == 0) return be.fill(out, 0.0);
  gemm_heads<T>(handle, false, false, L, Ev, S, T(1), scores.data<T>(), heads_of(scores), v.data<T>(), heads_of(v),
                out.data<T>(), heads_of(out), N, H);
}

template <class T>
void attention_backward_typed(CudaBackend& be, const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, double scale, double p,
                              uint64_t seed, uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                              const Tensor& grad_v) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  if (N * H == 0) return;
  if (L == 0 || S == 0) {  // every product below is an empty sum
    be.fill(grad_q, 0.0);
    be.fill(grad_k, 0.0);
    be.fill(grad_v, 0.0);
    return;
  }
  if (tiled_attention_wanted(N * H * L * S * static_cast<int64_t>(sizeof(T))) &&
      flash_attention_backward<T>(g, q, k, v, mask, out, lse, scale, p, seed, block, grad_q, grad_k, grad_v))
    return;
  cudaStream_t stream = stream_of(grad_q);
  cublasHandle_t handle = blas_handle(grad_q.device().index);
  const TensorOptions scratch = TensorOptions(q.dtype()).device(q.device());
  Tensor probs = Tensor::empty({N, H, L, S}, scratch), dprobs = Tensor::empty({N, H, L, S}, scratch);
  const Heads ph = heads_of(probs);
  const T tscale = static_cast<T>(scale);
  // probs (L, S) = scale · q kᵀ (P once the row kernel adds the mask and takes exp(· - lse))
  if (E == 0) be.fill(probs, 0.0);
  else gemm_heads<T>(handle, false, true, L, S, E, tscale, q.data<T>(), heads_of(q), k.data<T>(), heads_of(k),
                     probs.data<T>(), ph, N, H);
  // dprobs (L, S) = dP' = g (L, Ev) @ v (S, Ev)ᵀ
  if (Ev == 0) be.fill(dprobs, 0.0);
  else gemm_heads<T>(handle, false, true, L, S, Ev, T(1), g.data<T>(), heads_of(g), v.data<T>(), heads_of(v),
                     dprobs.data<T>(), ph, N, H);
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  attention_backward_rows_kernel<T><<<grid_for_rows(N * H * L), kThreads, 0, stream>>>(
      probs.data<T>(), dprobs.data<T>(), lse.data<T>(), g.data<T>(), view_of(g), out.data<T>(), view_of(out),
      N * H * L, H, L, S, Ev, mask_view(mask), p > 0, seed, block, threshold,
      p > 0 ? static_cast<T>(1.0 / (1.0 - p)) : T(1));
  KILN_CUDA_LAUNCH_CHECK("attention_backward");
  // grad_v (S, Ev) = P'ᵀ (S, L) @ g (L, Ev)
  if (Ev > 0)
    gemm_heads<T>(handle, true, false, S, Ev, L, T(1), probs.data<T>(), ph, g.data<T>(), heads_of(g),
                  grad_v.data<T>(), heads_of(grad_v), N, H);
  if (E > 0) {
    // grad_q (L, E) = scale · dS (L, S) @ k (S, E)
    gemm_heads<T>(handle, false, false, L, E, S, tscale, dprobs.data<T>(), ph, k.data<T>(), heads_of(k),
                  grad_q.data<T>(), heads_of(grad_q), N, H);
    // grad_k (S, E) = scale · dSᵀ (S, L) @ q (L, E)
    gemm_heads<T>(handle, true, false, S, E, L, tscale, dprobs.data<T>(), ph, q.data<T>(), heads_of(q),
                  grad_k.data<T>(), heads_of(grad_k), N, H);
  }
}

}  // namespace

void CudaBackend::dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(out);
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  visit_floating("dropout", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, stream_of(out)>>>(
        x.data<T>(), out.data<T>(), n, seed, block, threshold, static_cast<T>(1.0 / (1.0 - p)));
  });
  KILN_CUDA_LAUNCH_CHECK("dropout");
}

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                            double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  DeviceGuard guard(out);
  if (q.dtype() == kFloat64) return attention_typed<double>(*this, q, k, v, mask, scale, dropout_p, seed, block, out, lse);
  attention_typed<float>(*this, q, k, v, mask, scale, dropout_p, seed, block, out, lse);
}

void CudaBackend::attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                     double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                     const Tensor& grad_k, const Tensor& grad_v) {
  DeviceGuard guard(grad_q);
  if (q.dtype() == kFloat64) {
    return attention_backward_typed<double>(*this, g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q,
                                            grad_k, grad_v);
  }
  attention_backward_typed<float>(*this, g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q, grad_k,
                                  grad_v);
}

}  // namespace kiln::cuda
