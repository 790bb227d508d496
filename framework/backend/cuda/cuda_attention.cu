// Attention over N·H independent problems, with the CPU backend's
// arithmetic and random stream (cpu_attention.cpp, cpu_random.cpp):
//   q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev) -> out (N, H, L, Ev), lse (N, H, L)
// set_attention_kernel (core/cuda.h) picks between the tiled kernels of
// cuda_flash_attention.cu (heads up to 128 wide) and this file's path, which materialises
// the (N, H, L, S) scores in a temporary from the caching allocator: cuBLAS strided- or
// pointer-batched GEMMs around one row kernel (a warp per query row), also the path
// of whatever the tiled kernels do not fit. Dropout element (n, h, l, s) is number ((n·H + h)·L + l)·S + s of the Philox word stream at (seed, block): word e % 4
// of block (block + e / 4), as for bernoulli(1 - p).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "backend/bfloat16_staged.h"
#include "backend/cuda/cuda_attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "core/cuda.h"

namespace kiln::cuda {
namespace {

// The rows kernels give each query row one warp (cuda_block_reduce.cuh's WarpRows): rows
// are short (100 keys in the base model), and a block a row left most of its threads
// idle and paid two block-wide reductions (154 µs for 51200 rows of 100; 94 µs so). A
// lane takes four neighbouring keys at a time, so one Philox block serves its four
// dropout words where the row's numbering allows.
#define KILN_FOR_WARP_ROWS(r, rows) for (int64_t r = WarpRows::first(); r < (rows); r += WarpRows::step())
// The keys s of a row that lane (threadIdx.x % 32) takes: four neighbours, then 128 on.
#define KILN_FOR_LANE_KEYS(s, S)                                                                  \
  for (int64_t s##0 = 4 * static_cast<int64_t>(threadIdx.x & 31); s##0 < (S); s##0 += 128)  \
    for (int64_t s = s##0; s < s##0 + 4 && s < (S); ++s)

// scores (N·H·L, S) of one query row: + mask, softmax in place, its logsumexp, then
// dropout: P' = P · keep / (1 - p). A row whose every score is -inf (a query that may
// attend to nothing) becomes zeros with lse -inf, as torch's _safe_softmax, not NaN.
// Under autocast's mixed form low (N·H·L, S) also gets P' rounded to bfloat16 (the
// operand of P' v); null otherwise.
//
// kPacked (S a multiple of four, scores and low aligned to packs): each lane's four keys
// move as one access, and a row of at most 128 keys stays in registers from its load to
// its store (one read and one write of the row, not three of each; ncu showed the
// scalar passes bound by L2 traffic, 93 µs for 51200 rows of 100). The same arithmetic
// in the same order as the general loop, so the same bits.
template <class T, bool kPacked>
__global__ void attention_rows_kernel(T* scores, T* lse, bfloat16* low, int64_t rows, int64_t H, int64_t L,
                                      int64_t S, MaskView mask, bool drop, uint64_t seed, uint64_t block,
                                      uint64_t threshold, T keep_scale) {
  const T inf = std::numeric_limits<T>::infinity();
  const int lane = threadIdx.x & 31;
  KILN_FOR_WARP_ROWS(r, rows) {
    const int64_t b = r / L, l = r % L, n = b / H, h = b % H;
    T* row = scores + r * S;
    if constexpr (kPacked) {
      if (S <= 128) {
        const int64_t s0 = 4 * lane;
        const bool live = s0 < S;
        Pack4<T> x;
        T top = -inf;
        if (live) {
          x = *reinterpret_cast<const Pack4<T>*>(row + s0);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            x.v[k] = masked_score(x.v[k], mask, n, h, l, s0 + k);
            top = x.v[k] > top ? x.v[k] : top;
          }
        }
        top = warp_top(top);
        double total = 0;
        if (top != -inf && live) {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            x.v[k] = exp(x.v[k] - top);
            total += static_cast<double>(x.v[k]);
          }
        }
        total = warp_total(total);  // every lane calls: the warp's shuffles need all 32
        if (top == -inf) {
          if (live) {
            *reinterpret_cast<Pack4<T>*>(row + s0) = Pack4<T>{};
            if (low) *reinterpret_cast<Pack4<bfloat16>*>(low + r * S + s0) = Pack4<bfloat16>{};
          }
          if (lane == 0) lse[r] = -inf;
          continue;
        }
        const T inv = static_cast<T>(1.0 / total);
        if (live) {
          DropoutWords words;
          Pack4<bfloat16> lo;
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            T pv = x.v[k] * inv;
            if (drop) pv = words.kept(seed, block, r * S + s0 + k, threshold) ? pv * keep_scale : T(0);
            x.v[k] = pv;
            lo.v[k] = bfloat16(pv);
          }
          *reinterpret_cast<Pack4<T>*>(row + s0) = x;
          if (low) *reinterpret_cast<Pack4<bfloat16>*>(low + r * S + s0) = lo;
        }
        if (lane == 0) lse[r] = top + static_cast<T>(log(total));
        continue;
      }
    }
    T mx = -inf;
    KILN_FOR_LANE_KEYS(s, S) {
      row[s] = masked_score(row[s], mask, n, h, l, s);
      mx = row[s] > mx ? row[s] : mx;
    }
    mx = warp_top(mx);
    if (mx == -inf) {
      KILN_FOR_LANE_KEYS(s, S) {
        row[s] = T(0);
        if (low) low[r * S + s] = bfloat16(0.0f);
      }
      if (lane == 0) lse[r] = -inf;
      continue;
    }
    double sum = 0;
    KILN_FOR_LANE_KEYS(s, S) {
      const T e = exp(row[s] - mx);
      row[s] = e;
      sum += static_cast<double>(e);
    }
    sum = warp_total(sum);
    const T inv = static_cast<T>(1.0 / sum);
    DropoutWords words;
    KILN_FOR_LANE_KEYS(s, S) {
      T pv = row[s] * inv;
      if (drop) pv = words.kept(seed, block, r * S + s, threshold) ? pv * keep_scale : T(0);
      row[s] = pv;
      if (low) low[r * S + s] = bfloat16(pv);
    }
    if (lane == 0) lse[r] = mx + static_cast<T>(log(sum));
  }
}

// One query row of the backward. In: probs = scale · q kᵀ, dprobs = g vᵀ (both (N·H·L, S)).
// Out, in place: probs = P' = P · keep / (1 - p), dprobs = dS = P ∘ (dP' · keep / (1 - p) - D),
// P = exp(scores + mask - lse), D = <g_row, out_row> (out of type O: T, or under autocast
// the bfloat16 copy it keeps). A fully masked row (lse -inf) has P = 0, so its gradients
// are 0; a NaN or +inf lse gives NaN. Under autocast p_low and ds_low (N·H·L, S) also get
// P' and ds_scale · dS rounded to bfloat16 (the operands of the gradients' products).
// kPacked (S a multiple of four, the four (N·H·L, S) arrays aligned to packs): each
// lane's four keys move as one access.
template <class T, class O, bool kPacked>
__global__ void attention_backward_rows_kernel(T* probs, T* dprobs, const T* lse, const T* g, View4 gv, const O* out,
                                               View4 ov, bfloat16* p_low, bfloat16* ds_low, T ds_scale,
                                               int64_t rows, int64_t H, int64_t L, int64_t S, int64_t Ev,
                                               MaskView mask, bool drop, uint64_t seed, uint64_t block,
                                               uint64_t threshold, T keep_scale) {
  KILN_FOR_WARP_ROWS(r, rows) {
    const int64_t b = r / L, l = r % L, n = b / H, h = b % H;
    double dot = 0;
    for (int64_t e = threadIdx.x & 31; e < Ev; e += 32) {
      dot += static_cast<double>(g[offset_of(gv, n, h, l, e)]) * static_cast<T>(out[offset_of(ov, n, h, l, e)]);
    }
    const T d = static_cast<T>(warp_total(dot));
    const T row_lse = lse[r];
    T* p_row = probs + r * S;
    T* dp_row = dprobs + r * S;
    DropoutWords words;
    // P' and dS of key s from its score x and dP' value dp.
    auto grads = [&](int64_t s, T x, T& dp, T& pk) {
      const T pv = prob_from_lse(masked_score(x, mask, n, h, l, s), row_lse);
      const T keep = !drop || words.kept(seed, block, r * S + s, threshold) ? keep_scale : T(0);
      dp = pv * (dp * keep - d);
      pk = pv * keep;
    };
    if constexpr (kPacked) {
      for (int64_t s0 = 4 * static_cast<int64_t>(threadIdx.x & 31); s0 < S; s0 += 128) {
        Pack4<T> pp = *reinterpret_cast<const Pack4<T>*>(p_row + s0);
        Pack4<T> dp = *reinterpret_cast<const Pack4<T>*>(dp_row + s0);
        Pack4<bfloat16> pl, dl;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          grads(s0 + k, pp.v[k], dp.v[k], pp.v[k]);
          pl.v[k] = bfloat16(pp.v[k]);
          dl.v[k] = bfloat16(dp.v[k] * ds_scale);
        }
        *reinterpret_cast<Pack4<T>*>(p_row + s0) = pp;
        *reinterpret_cast<Pack4<T>*>(dp_row + s0) = dp;
        if (p_low) *reinterpret_cast<Pack4<bfloat16>*>(p_low + r * S + s0) = pl;
        if (ds_low) *reinterpret_cast<Pack4<bfloat16>*>(ds_low + r * S + s0) = dl;
      }
    } else {
      KILN_FOR_LANE_KEYS(s, S) {
        grads(s, p_row[s], dp_row[s], p_row[s]);
        if (p_low) p_low[r * S + s] = bfloat16(p_row[s]);
        if (ds_low) ds_low[r * S + s] = bfloat16(dp_row[s] * ds_scale);
      }
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
  // Measured on an H200 (benchmarks/history/): the materialising path is about 3x
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

// Device pointer arrays for a pointer-batched cuBLAS call: entry b = n·H + h of array i
// is bases[i] + n·s0[i] + h·s1[i] (bytes).
struct HeadPointers {
  const char* bases[3];
  int64_t s0[3], s1[3];
};

// ptrs (3, count): the matrices of problems b of each operand.
__global__ void head_pointers_kernel(HeadPointers hp, int64_t H, int64_t count, const void** ptrs) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < count;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = b / H, h = b % H;
#pragma unroll
    for (int i = 0; i < 3; ++i) ptrs[i * count + b] = hp.bases[i] + n * hp.s0[i] + h * hp.s1[i];
  }
}

// C (M, Nc) = alpha · op(A) op(B) for each of the N·H problems, row-major; op(X) = Xᵀ
// when X is stored transposed (ta, tb). As in cuda_matmul.cu, cuBLAS gets Cᵀ = op(B)ᵀ
// op(A)ᵀ. One strided-batched call when every operand's problem b = n·H + h sits at
// b·stride; else one pointer-batched call over arrays of the N·H matrices (the heads of
// a projection's rows, MultiheadAttention's layout, read and written where they are),
// where every matrix is 16-byte aligned, or one strided-batched call per n or h. In
// is T, or bfloat16 with T float (autocast's mixed products: float32 accumulation, on
// the tensor cores).
template <class In, class T>
void gemm_heads(cublasHandle_t handle, bool ta, bool tb, int64_t M, int64_t Nc, int64_t K, T alpha, const In* A,
                Heads a, const In* B, Heads b, T* C, Heads c, int64_t N, int64_t H, const Tensor& like) {
  const int m = as_int(Nc), n = as_int(M), k = as_int(K);
  const int lda = as_int(b.ld), ldb = as_int(a.ld), ldc = as_int(c.ld);
  const cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T zero = 0;
  auto call = [&](int64_t offA, int64_t offB, int64_t offC, long long sA, long long sB, long long sC, int64_t count) {
    for (int64_t i0 = 0; i0 < count; i0 += 65535) {  // the grid's z limit, as in cuda_matmul.cu
      const int cnt = static_cast<int>(std::min<int64_t>(65535, count - i0));
      const In* pa = A + offA + i0 * sA;
      const In* pb = B + offB + i0 * sB;
      T* pc = C + offC + i0 * sC;
      if constexpr (std::is_same_v<In, bfloat16>) {
        static_assert(std::is_same_v<T, float>, "a bfloat16 product accumulates in float32");
        KILN_CUBLAS_CHECK(cublas_api().cublasGemmStridedBatchedEx(
                              handle, op_first, op_second, m, n, k, &alpha, pb, CUDA_R_16BF, lda, sB, pa, CUDA_R_16BF,
                              ldb, sA, &zero, pc, CUDA_R_32F, ldc, sC, cnt, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                          "attention");
      } else if constexpr (std::is_same_v<T, double>) {
        KILN_CUBLAS_CHECK(cublas_api().cublasDgemmStridedBatched(handle, op_first, op_second, m, n, k, &alpha, pb, lda,
                                                                 sB, pa, ldb, sA, &zero, pc, ldc, sC, cnt),
                          "attention");
      } else {
        KILN_CUBLAS_CHECK(cublas_api().cublasSgemmStridedBatched(handle, op_first, op_second, m, n, k, &alpha, pb, lda,
                                                                 sB, pa, ldb, sA, &zero, pc, ldc, sC, cnt),
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

  // Pointer arrays: cuBLAS's first operand is B, its second A (see above).
  HeadPointers hp{{reinterpret_cast<const char*>(B), reinterpret_cast<const char*>(A),
                   reinterpret_cast<const char*>(C)},
                  {b.s0 * int64_t{sizeof(In)}, a.s0 * int64_t{sizeof(In)}, c.s0 * int64_t{sizeof(T)}},
                  {b.s1 * int64_t{sizeof(In)}, a.s1 * int64_t{sizeof(In)}, c.s1 * int64_t{sizeof(T)}}};
  // cuBLAS cannot see the alignment of pointers it reads on the device, and its tensor-core
  // kernels take 16-byte loads: matrices off that alignment go one strided-batched call
  // per n (or per h, whichever is fewer), whose pointers it checks.
  bool aligned = true;
  for (int i = 0; i < 3; ++i) {
    aligned = aligned && reinterpret_cast<uintptr_t>(hp.bases[i]) % 16 == 0 && hp.s0[i] % 16 == 0 &&
              hp.s1[i] % 16 == 0;
  }
  if (!aligned) {
    if (N <= H) {
      for (int64_t i = 0; i < N; ++i) call(i * a.s0, i * b.s0, i * c.s0, a.s1, b.s1, c.s1, H);
    } else {
      for (int64_t j = 0; j < H; ++j) call(j * a.s1, j * b.s1, j * c.s1, a.s0, b.s0, c.s0, N);
    }
    return;
  }
  const int64_t count = N * H;
  Tensor ptrs = Tensor::empty({3 * count}, TensorOptions(kInt64).device(like.device()));
  auto** arrays = reinterpret_cast<const void**>(ptrs.data_ptr());
  head_pointers_kernel<<<grid_for(count), kThreads, 0, stream_of(like)>>>(hp, H, count, arrays);
  KILN_CUDA_LAUNCH_CHECK("attention");
  for (int64_t i0 = 0; i0 < count; i0 += 65535) {
    const int cnt = static_cast<int>(std::min<int64_t>(65535, count - i0));
    const void* const* first = arrays + i0;
    const void* const* second = arrays + count + i0;
    void* const* out = const_cast<void* const*>(arrays + 2 * count + i0);
    if constexpr (std::is_same_v<In, bfloat16>) {
      KILN_CUBLAS_CHECK(cublas_api().cublasGemmBatchedEx(handle, op_first, op_second, m, n, k, &alpha, first,
                                                         CUDA_R_16BF, lda, second, CUDA_R_16BF, ldb, &zero, out,
                                                         CUDA_R_32F, ldc, cnt, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                        "attention");
    } else if constexpr (std::is_same_v<T, double>) {
      KILN_CUBLAS_CHECK(cublas_api().cublasDgemmBatched(handle, op_first, op_second, m, n, k, &alpha,
                                                        reinterpret_cast<const double* const*>(first), lda,
                                                        reinterpret_cast<const double* const*>(second), ldb, &zero,
                                                        reinterpret_cast<double* const*>(out), ldc, cnt),
                        "attention");
    } else {
      KILN_CUBLAS_CHECK(cublas_api().cublasSgemmBatched(handle, op_first, op_second, m, n, k, &alpha,
                                                        reinterpret_cast<const float* const*>(first), lda,
                                                        reinterpret_cast<const float* const*>(second), ldb, &zero,
                                                        reinterpret_cast<float* const*>(out), ldc, cnt),
                        "attention");
    }
  }
}

// A (N, H, rows, cols) scratch tensor, contiguous.
Tensor scratch(const Tensor& like, int64_t N, int64_t H, int64_t rows, int64_t cols, DType dtype) {
  return Tensor::empty({N, H, rows, cols}, TensorOptions(dtype).device(like.device()));
}

// Whether one strided-batched call reaches every problem of t (N, H, rows, cols): problem
// n·H + h at (n·H + h)·stride (gemm_heads' test).
bool uniform_heads(const Tensor& t) {
  const int64_t N = t.size(0), H = t.size(1);
  return H == 1 || N == 1 || t.stride(0) == H * t.stride(1);
}

// Whether the heads of a projection's rows are copied head-major around the products
// (KILN_CUDA_HEAD_COPIES set, read once: the earlier path, kept to measure against) or
// read and written in place by pointer-batched calls (the default). At the base model's
// shapes (64 · 8 problems of 100 × 100 × 64) the float32 products took 8.9 ms a step in
// one call per head, 4.2 ms on head-major copies, which cost 1.8 ms.
bool head_copies() {
  static const bool on = std::getenv("KILN_CUDA_HEAD_COPIES") != nullptr;
  return on;
}

// t itself, or under head_copies a contiguous copy where t is not uniform_heads.
Tensor head_major(CudaBackend& be, const Tensor& t) {
  if (!head_copies() || uniform_heads(t)) return t;
  Tensor c = Tensor::empty(t.shape(), TensorOptions(t.dtype()).device(t.device()));
  be.copy(t, c);
  return c;
}

// Where a product meant for dst writes: dst, or under head_copies a contiguous scratch
// where dst is not uniform_heads, which write_back then copies into dst.
Tensor head_major_out(const Tensor& dst) {
  if (!head_copies() || uniform_heads(dst)) return dst;
  return Tensor::empty(dst.shape(), TensorOptions(dst.dtype()).device(dst.device()));
}
void write_back(CudaBackend& be, const Tensor& written, const Tensor& dst) {
  if (written.data_ptr() != dst.data_ptr()) be.copy(written, dst);
}

// The scores' path (In = T, or bfloat16 with T float under autocast: the products on
// bfloat16 operands, P' rounded once more for P' v, as the CPU's attention_mixed).
template <class T, class In>
void attention_materialized(CudaBackend& be, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                            double scale, double p, uint64_t seed, uint64_t block, const Tensor& out,
                            const Tensor& lse) {
  constexpr bool kMixed = !std::is_same_v<In, T>;
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  cudaStream_t stream = stream_of(out);
  cublasHandle_t handle = blas_handle(out.device().index);
  Tensor scores = scratch(q, N, H, L, S, dtype_of<T>::value);
  Tensor low = kMixed ? scratch(q, N, H, L, S, kBFloat16) : Tensor();
  // scores (L, S) = scale · q (L, E) @ k (S, E)ᵀ
  if (S > 0) {
    if (E == 0) {
      be.fill(scores, 0.0);
    } else {
      const Tensor qh = head_major(be, q), kh = head_major(be, k);
      gemm_heads<In, T>(handle, false, true, L, S, E, static_cast<T>(scale), qh.data<In>(), heads_of(qh),
                        kh.data<In>(), heads_of(kh), scores.data<T>(), heads_of(scores), N, H, q);
    }
  }
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  bfloat16* pl = kMixed ? low.data<bfloat16>() : nullptr;
  const bool packed = S % 4 == 0 && pack_aligned<T>(scores.data<T>()) && (!pl || pack_aligned<bfloat16>(pl));
  auto rows_kernel = packed ? attention_rows_kernel<T, true> : attention_rows_kernel<T, false>;
  rows_kernel<<<WarpRows::blocks(N * H * L), kThreads, 0, stream>>>(scores.data<T>(), lse.data<T>(), pl, N * H * L, H,
                                                                     L, S, mask_view(mask), p > 0, seed, block,
                                                                     threshold, static_cast<T>(1.0 / (1.0 - p)));
  KILN_CUDA_LAUNCH_CHECK("attention");
  // out (L, Ev) = P' (L, S) @ v (S, Ev)
  if (Ev == 0) return;
  if (S == 0) return be.fill(out, 0.0);
  const Tensor vh = head_major(be, v), oh = head_major_out(out);
  const Tensor& weights = kMixed ? low : scores;  // P' as the product reads it
  gemm_heads<In, T>(handle, false, false, L, Ev, S, T(1), weights.data<In>(), heads_of(weights), vh.data<In>(),
                    heads_of(vh), oh.data<T>(), heads_of(oh), N, H, q);
  write_back(be, oh, out);
}

template <class T>
void attention_typed(CudaBackend& be, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double scale, double p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
  if (N * H * L == 0) return;
  if (tiled_attention_wanted(N * H * L * S * static_cast<int64_t>(sizeof(T))) &&
      flash_attention<T>(q, k, v, mask, scale, p, seed, block, out, lse))
    return;
  attention_materialized<T, T>(be, q, k, v, mask, scale, p, seed, block, out, lse);
}

// The backward's scores path; In and the mixed form's roundings as attention_materialized
// (g rounded for g vᵀ and P'ᵀ g; scale · dS rounded once for both of its products).
template <class T, class In, class O>
void attention_backward_materialized(CudaBackend& be, const Tensor& g, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& mask, const Tensor& out, const Tensor& lse,
                                     double scale, double p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                     const Tensor& grad_k, const Tensor& grad_v) {
  constexpr bool kMixed = !std::is_same_v<In, T>;
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  cudaStream_t stream = stream_of(grad_q);
  cublasHandle_t handle = blas_handle(grad_q.device().index);
  Tensor probs = scratch(q, N, H, L, S, dtype_of<T>::value), dprobs = scratch(q, N, H, L, S, dtype_of<T>::value);
  Tensor p_low, ds_low, g_low;
  if constexpr (kMixed) {
    p_low = scratch(q, N, H, L, S, kBFloat16);
    ds_low = scratch(q, N, H, L, S, kBFloat16);
    g_low = scratch(q, N, H, L, Ev, kBFloat16);
    be.copy(g, g_low);
  }
  const Tensor qh = head_major(be, q), kh = head_major(be, k), vh = head_major(be, v);
  const Tensor gm = kMixed ? g_low : head_major(be, g);
  const Tensor gq = head_major_out(grad_q), gk = head_major_out(grad_k), gv = head_major_out(grad_v);
  const In* gp = gm.data<In>();
  const Heads gh = heads_of(gm);
  const Heads ph = heads_of(probs);
  const T tscale = static_cast<T>(scale);
  // probs (L, S) = scale · q kᵀ (P once the row kernel adds the mask and takes exp(· - lse))
  if (E == 0) be.fill(probs, 0.0);
  else gemm_heads<In, T>(handle, false, true, L, S, E, tscale, qh.data<In>(), heads_of(qh), kh.data<In>(),
                         heads_of(kh), probs.data<T>(), ph, N, H, q);
  // dprobs (L, S) = dP' = g (L, Ev) @ v (S, Ev)ᵀ
  if (Ev == 0) be.fill(dprobs, 0.0);
  else gemm_heads<In, T>(handle, false, true, L, S, Ev, T(1), gp, gh, vh.data<In>(), heads_of(vh),
                         dprobs.data<T>(), ph, N, H, q);
  const uint64_t threshold = cpu::bernoulli_threshold(1.0 - p);
  bfloat16* pl = kMixed ? p_low.data<bfloat16>() : nullptr;
  bfloat16* dl = kMixed ? ds_low.data<bfloat16>() : nullptr;
  const bool packed = S % 4 == 0 && pack_aligned<T>(probs.data<T>()) && pack_aligned<T>(dprobs.data<T>()) &&
                      (!pl || (pack_aligned<bfloat16>(pl) && pack_aligned<bfloat16>(dl)));
  auto rows_kernel = packed ? attention_backward_rows_kernel<T, O, true> : attention_backward_rows_kernel<T, O, false>;
  rows_kernel<<<WarpRows::blocks(N * H * L), kThreads, 0, stream>>>(
      probs.data<T>(), dprobs.data<T>(), lse.data<T>(), g.data<T>(), view_of(g), static_cast<const O*>(out.data_ptr()),
      view_of(out), pl, dl, tscale, N * H * L, H, L, S, Ev, mask_view(mask), p > 0, seed, block, threshold,
      p > 0 ? static_cast<T>(1.0 / (1.0 - p)) : T(1));
  KILN_CUDA_LAUNCH_CHECK("attention_backward");
  // The operands the gradients' products read: P' and dS as computed, or under autocast
  // P' and scale · dS rounded (the scale then already applied).
  const Tensor& weights = kMixed ? p_low : probs;
  const Tensor& dscores = kMixed ? ds_low : dprobs;
  const T ds_alpha = kMixed ? T(1) : tscale;
  // grad_v (S, Ev) = P'ᵀ (S, L) @ g (L, Ev)
  if (Ev > 0)
    gemm_heads<In, T>(handle, true, false, S, Ev, L, T(1), weights.data<In>(), ph, gp, gh, gv.data<T>(),
                      heads_of(gv), N, H, q);
  if (E > 0) {
    // grad_q (L, E) = scale · dS (L, S) @ k (S, E)
    gemm_heads<In, T>(handle, false, false, L, E, S, ds_alpha, dscores.data<In>(), ph, kh.data<In>(),
                      heads_of(kh), gq.data<T>(), heads_of(gq), N, H, q);
    // grad_k (S, E) = scale · dSᵀ (S, L) @ q (L, E)
    gemm_heads<In, T>(handle, true, false, S, E, L, ds_alpha, dscores.data<In>(), ph, qh.data<In>(),
                      heads_of(qh), gk.data<T>(), heads_of(gk), N, H, q);
  }
  if (Ev > 0) write_back(be, gv, grad_v);
  if (E > 0) {
    write_back(be, gq, grad_q);
    write_back(be, gk, grad_k);
  }
}

template <class T>
void attention_backward_typed(CudaBackend& be, const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, double scale, double p,
                              uint64_t seed, uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                              const Tensor& grad_v) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
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
  attention_backward_materialized<T, T, T>(be, g, q, k, v, mask, out, lse, scale, p, seed, block, grad_q, grad_k,
                                           grad_v);
}

void check_mixed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out) {
  KILN_CHECK(k.dtype() == kBFloat16 && v.dtype() == kBFloat16 && out.dtype() == kFloat32,
             "scaled_dot_product_attention",
             "bfloat16 query, key and value (autocast) take float32 outputs, got key ", dtype_name(k.dtype()),
             ", value ", dtype_name(v.dtype()), " and output ", dtype_name(out.dtype()));
  (void)q;
}

}  // namespace

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                            double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  DeviceGuard guard(out);
  if (q.dtype() == kFloat64) return attention_typed<double>(*this, q, k, v, mask, scale, dropout_p, seed, block, out, lse);
  if (q.dtype() == kBFloat16) {
    // Autocast's mixed form: bfloat16 products on the scores' path; the tiled kernels,
    // where wanted, on float32 copies of q, k, v.
    check_mixed(q, k, v, out);
    const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
    if (N * H * L == 0) return;
    if (!tiled_attention_wanted(N * H * L * S * static_cast<int64_t>(sizeof(float))))
      return attention_materialized<float, bfloat16>(*this, q, k, v, mask, scale, dropout_p, seed, block, out, lse);
    return attention_typed<float>(*this, float32_copy(*this, q), float32_copy(*this, k), float32_copy(*this, v), mask,
                                  scale, dropout_p, seed, block, out, lse);
  }
  attention_typed<float>(*this, q, k, v, mask, scale, dropout_p, seed, block, out, lse);
}

void CudaBackend::attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& mask, const Tensor& out, const Tensor& lse, double scale,
                                     double dropout_p, uint64_t seed, uint64_t block, const Tensor& grad_q,
                                     const Tensor& grad_k, const Tensor& grad_v) {
  DeviceGuard guard(grad_q);
  if (q.dtype() == kBFloat16) {
    check_mixed(q, k, v, grad_q);
    const int64_t N = q.size(0), H = q.size(1), L = q.size(2), S = k.size(2);
    if (N * H == 0) return;
    if (L > 0 && S > 0 && !tiled_attention_wanted(N * H * L * S * static_cast<int64_t>(sizeof(float)))) {
      if (out.dtype() == kBFloat16)
        return attention_backward_materialized<float, bfloat16, bfloat16>(
            *this, g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q, grad_k, grad_v);
      return attention_backward_materialized<float, bfloat16, float>(*this, g, q, k, v, mask, out, lse, scale,
                                                                     dropout_p, seed, block, grad_q, grad_k, grad_v);
    }
    return attention_backward_typed<float>(*this, g, float32_copy(*this, q), float32_copy(*this, k),
                                           float32_copy(*this, v), mask,
                                           out.dtype() == kBFloat16 ? float32_copy(*this, out) : out, lse, scale,
                                           dropout_p, seed, block, grad_q, grad_k, grad_v);
  }
  if (q.dtype() == kFloat64) {
    return attention_backward_typed<double>(*this, g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q,
                                            grad_k, grad_v);
  }
  attention_backward_typed<float>(*this, g, q, k, v, mask, out, lse, scale, dropout_p, seed, block, grad_q, grad_k,
                                  grad_v);
}

}  // namespace kiln::cuda
