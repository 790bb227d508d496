// Attention in tiles, never holding the (L, S) scores of a problem ("flash" attention):
//   q (N, H, L, E), k (N, H, S, E), v (N, H, S, Ev) -> out (N, H, L, Ev), lse (N, H, L)
// with the arithmetic of Backend::attention (backend.h): scores scale · q kᵀ + mask, a
// row softmax, dropout on P numbered ((n·H + h)·L + l)·S + s in the Philox stream, and a
// fully masked row giving zeros and lse -inf.
//
// Layout of a block: kTile query rows (or, in the key-side backward, kTile keys) of one
// problem b = n·H + h, four threads per row (kGroup, neighbouring lanes of one warp, so
// a row's partial maxima and sums meet through two shuffles). The row's scores in a
// tile are split by key (thread t takes keys 8t … 8t + 7: consecutive elements of the
// dropout stream, so one Philox block serves four of them), its output columns by
// interleaving (columns t, t + 4, …), so a warp reads shared memory without bank
// conflicts: its eight rows differ in the row, its four threads in the key or column.
//
// Forward, per key tile: scores, the running max m and sum l of exp(score - m) (rescaled
// by exp(m_old - m_new) when m grows), P' = exp(score - m) · keep / (1 - p) into shared
// memory, acc += P' v. At the end out = acc / l, lse = m + log l.
// Backward, two kernels that each rebuild P = exp(score - lse) from q, k, mask and lse,
// so that no gradient needs atomics (the same bits on every run):
//   by query tile: D = rowsum(g ∘ out), dS = P ∘ (g vᵀ · keep / (1 - p) - D), grad_q = scale · dS k;
//   by key tile:   grad_v = P'ᵀ g, grad_k = scale · dSᵀ q (reading the first kernel's D).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>

#include "backend/cuda/cuda_attention.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_block_reduce.cuh"

namespace kiln::cuda {
namespace {

constexpr int kTile = 32;                      // query rows (or keys) of a block, and of a tile it loops over
constexpr int kGroup = 4;                      // threads per row
constexpr int kFlashThreads = kTile * kGroup;  // 128
constexpr int kPerThread = kTile / kGroup;     // keys (or rows) of a tile each thread scores
constexpr int kPad = 4;                        // row stride kTile + kPad of the (kTile, kTile) tiles
constexpr int kMaxHead = 128;                  // E and Ev the kernels take

// The operands of one call, by value.
template <class T>
struct FlashArgs {
  const T* q;
  const T* k;
  const T* v;
  View4 qv, kv, vv;
  int64_t H, L, S;
  int E, Ev;
  MaskView mask;
  T scale;
  bool drop;
  uint64_t seed, block, threshold;
  T keep_scale;  // 1 / (1 - p)
};

template <class U>
__device__ inline U group_max(U x) {
  for (int o = 1; o < kGroup; o <<= 1) x = max_skip_nan(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

template <class U>
__device__ inline U group_sum(U x) {
  for (int o = 1; o < kGroup; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// dst (kTile, cols) with row stride ld = rows r0 … r0 + kTile - 1 of problem (n, h) of
// src; rows at or beyond `rows` are zeros. A warp takes a row at a time, its lanes along
// the row (one 64-bit offset per row).
template <class T>
__device__ void load_tile(T* dst, int ld, const T* src, const View4& v, int64_t n, int64_t h, int64_t r0,
                          int64_t rows, int cols) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < kTile; r += kFlashThreads / 32) {
    T* d = dst + r * ld;
    if (r0 + r < rows) {
      const T* row = src + offset_of(v, n, h, r0 + r, 0);
      for (int c = lane; c < cols; c += 32) d[c] = row[c * v.s3];
    } else {
      for (int c = lane; c < cols; c += 32) d[c] = T(0);
    }
  }
}

// x[i] = Σ_e a[e] · b[i·step·(n + 1) + e], i < kPerThread: one row of a tile (a) against
// every step-th row of another (b, row stride n + 1), with kPerThread independent sums
// (a dependent chain of FMAs per dot would leave the SM waiting on each one).
template <class T>
__device__ inline void scores_of_row(const T* a, const T* b, int n, int step, T (&x)[kPerThread]) {
  const int ld = step * (n + 1);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) x[i] = 0;
#pragma unroll 4
  for (int e = 0; e < n; ++e) {
    const T ae = a[e];
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) x[i] += ae * b[i * ld + e];
  }
}

// Where a block and a thread are: block x covers rows first … first + kTile - 1 (queries,
// or keys in the key-side backward) of problem b = n·H + h; thread (r, t) is thread t of
// row r of the tile, row = first + r, ok when it is a real row (< rows).
struct TileRow {
  int64_t b, first, n, h, row;
  int r, t;
  bool ok;
};

__device__ inline TileRow tile_row(int64_t rows, int64_t H) {
  const int64_t tiles = (rows + kTile - 1) / kTile;
  TileRow p;
  p.b = blockIdx.x / tiles;
  p.first = (blockIdx.x % tiles) * kTile;
  p.n = p.b / H;
  p.h = p.b % H;
  p.r = threadIdx.x / kGroup;
  p.t = threadIdx.x % kGroup;
  p.row = p.first + p.r;
  p.ok = p.row < rows;
  return p;
}

// acc[c] += Σ_{j < rows} w[j] · m[j·ld + col], col = t + kGroup·c < cols: a row of one
// tile (weights over its columns) times another tile, for the columns thread t keeps.
template <class T, int kAcc>
__device__ inline void add_row_times_tile(T (&acc)[kAcc], const T* w, const T* m, int ld, int64_t rows, int cols,
                                          int t) {
  for (int j = 0; j < static_cast<int>(rows); ++j) {
    const T wj = w[j];
#pragma unroll
    for (int c = 0; c < kAcc; ++c) {
      const int col = t + kGroup * c;
      if (col < cols) acc[c] += wj * m[j * ld + col];
    }
  }
}

// Shared memory of each kernel, in elements of T (E + 1 / Ev + 1 row strides: the rows a
// warp reads at once fall in different banks).
int64_t forward_smem(int E, int Ev) { return kTile * (E + 1) * 2 + kTile * Ev + kTile * (kTile + kPad); }
int64_t backward_q_smem(int E, int Ev) { return kTile * ((E + 1) * 2 + (Ev + 1) * 2) + kTile * (kTile + kPad); }
int64_t backward_kv_smem(int E, int Ev) {
  return kTile * ((E + 1) * 2 + (Ev + 1) * 2) + 2 * kTile * (kTile + kPad) + 2 * kTile;
}

// Grid: (ceil(L / kTile) · N·H) blocks of kFlashThreads; dynamic shared memory forward_smem.
// kAcc = ceil(Ev / kGroup) rounded up to a power of two: the output columns a thread keeps.
template <class T, int kAcc>
__global__ void __launch_bounds__(kFlashThreads)
    flash_forward_kernel(FlashArgs<T> a, T* out, View4 ov, T* lse) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* const Qs = reinterpret_cast<T*>(smem_bytes);  // (kTile, E + 1)
  T* const Ks = Qs + kTile * (a.E + 1);             // (kTile, E + 1)
  T* const Vs = Ks + kTile * (a.E + 1);             // (kTile, Ev)
  T* const Ps = Vs + kTile * a.Ev;                  // (kTile, kTile + kPad)
  const T inf = std::numeric_limits<T>::infinity();
  const TileRow p = tile_row(a.L, a.H);
  const int64_t b = p.b, l0 = p.first, n = p.n, h = p.h, l = p.row;
  const int r = p.r, t = p.t;
  const bool row_ok = p.ok;
  load_tile(Qs, a.E + 1, a.q, a.qv, n, h, l0, a.L, a.E);
  const int64_t mask_row = a.mask.data ? offset_of(a.mask.at, n, h, l, 0) : 0;
  const int64_t stream_row = (b * a.L + l) * a.S;  // the dropout number of (n, h, l, 0)
  DropoutWords words;
  T m = -inf, sum = 0, acc[kAcc] = {};
  for (int64_t s0 = 0; s0 < a.S; s0 += kTile) {
    __syncthreads();  // the last tile's readers are done with Ks, Vs and Ps
    load_tile(Ks, a.E + 1, a.k, a.kv, n, h, s0, a.S, a.E);
    load_tile(Vs, a.Ev, a.v, a.vv, n, h, s0, a.S, a.Ev);
    __syncthreads();
    T x[kPerThread];
    scores_of_row(Qs + r * (a.E + 1), Ks + t * kPerThread * (a.E + 1), a.E, 1, x);
    T tile_max = -inf;
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t s = s0 + t * kPerThread + i;
      x[i] = row_ok && s < a.S ? masked_score_at(a.scale * x[i], a.mask, mask_row + s * a.mask.at.s3) : -inf;
      tile_max = max_skip_nan(tile_max, x[i]);
    }
    const T m_new = max_skip_nan(m, group_max(tile_max));
    const T alpha = m_new == -inf ? T(1) : exp(m - m_new);  // exp(-inf) = 0 on the first live tile
    T part = 0;
    for (int i = 0; i < kPerThread; ++i) {
      const int j = t * kPerThread + i;
      const T pv = m_new == -inf ? T(0) : exp(x[i] - m_new);
      part += pv;
      T kept_pv = pv;
      if (a.drop && row_ok && s0 + j < a.S) {
        kept_pv = words.kept(a.seed, a.block, stream_row + s0 + j, a.threshold) ? pv * a.keep_scale : T(0);
      }
      Ps[r * (kTile + kPad) + j] = kept_pv;
    }
    sum = sum * alpha + group_sum(part);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kAcc; ++c) acc[c] *= alpha;
    __syncthreads();
    add_row_times_tile(acc, Ps + r * (kTile + kPad), Vs, a.Ev, std::min<int64_t>(kTile, a.S - s0), a.Ev, t);
  }
  if (!row_ok) return;
  const T inv = sum > 0 ? T(1) / sum : T(0);  // sum 0: every score was -inf
#pragma unroll
  for (int c = 0; c < kAcc; ++c) {
    const int col = t + kGroup * c;
    if (col < a.Ev) out[offset_of(ov, n, h, l, col)] = sum > 0 ? acc[c] * inv : T(0);
  }
  if (t == 0) lse[b * a.L + l] = m == -inf ? -inf : m + log(sum);
}

// grad_q, and D = rowsum(g ∘ out) for flash_backward_kv_kernel. Grid as the forward's;
// dynamic shared memory backward_q_smem. kAcc covers E.
template <class T, int kAcc>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_q_kernel(FlashArgs<T> a, const T* g, View4 gv, const T* out, View4 ov, const T* lse, T* D,
                            T* grad_q, View4 gqv) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* const Qs = reinterpret_cast<T*>(smem_bytes);  // (kTile, E + 1)
  T* const Gs = Qs + kTile * (a.E + 1);             // (kTile, Ev + 1)
  T* const Ks = Gs + kTile * (a.Ev + 1);            // (kTile, E + 1)
  T* const Vs = Ks + kTile * (a.E + 1);             // (kTile, Ev + 1)
  T* const dSs = Vs + kTile * (a.Ev + 1);           // (kTile, kTile + kPad)
  const TileRow p = tile_row(a.L, a.H);
  const int64_t b = p.b, l0 = p.first, n = p.n, h = p.h, l = p.row;
  const int r = p.r, t = p.t;
  const bool row_ok = p.ok;
  load_tile(Qs, a.E + 1, a.q, a.qv, n, h, l0, a.L, a.E);
  load_tile(Gs, a.Ev + 1, g, gv, n, h, l0, a.L, a.Ev);
  __syncthreads();
  double dot_out = 0;  // in double, as the materialising path
  if (row_ok) {
    for (int c = t; c < a.Ev; c += kGroup) dot_out += static_cast<double>(Gs[r * (a.Ev + 1) + c]) * out[offset_of(ov, n, h, l, c)];
  }
  const T d = static_cast<T>(group_sum(dot_out));
  if (row_ok && t == 0) D[b * a.L + l] = d;
  const T row_lse = row_ok ? lse[b * a.L + l] : T(0);
  const int64_t mask_row = a.mask.data ? offset_of(a.mask.at, n, h, l, 0) : 0;
  const int64_t stream_row = (b * a.L + l) * a.S;
  DropoutWords words;
  T acc[kAcc] = {};
  for (int64_t s0 = 0; s0 < a.S; s0 += kTile) {
    __syncthreads();
    load_tile(Ks, a.E + 1, a.k, a.kv, n, h, s0, a.S, a.E);
    load_tile(Vs, a.Ev + 1, a.v, a.vv, n, h, s0, a.S, a.Ev);
    __syncthreads();
    T qk[kPerThread], gv[kPerThread];
    scores_of_row(Qs + r * (a.E + 1), Ks + t * kPerThread * (a.E + 1), a.E, 1, qk);
    scores_of_row(Gs + r * (a.Ev + 1), Vs + t * kPerThread * (a.Ev + 1), a.Ev, 1, gv);
    for (int i = 0; i < kPerThread; ++i) {
      const int j = t * kPerThread + i;
      T ds = 0;
      if (row_ok && s0 + j < a.S) {
        const T x = masked_score_at(a.scale * qk[i], a.mask, mask_row + (s0 + j) * a.mask.at.s3);
        const T pv = prob_from_lse(x, row_lse);
        const T dp = gv[i];
        const T keep =
            !a.drop || words.kept(a.seed, a.block, stream_row + s0 + j, a.threshold) ? a.keep_scale : T(0);
        ds = pv * (dp * keep - d);
      }
      dSs[r * (kTile + kPad) + j] = ds;
    }
    __syncthreads();
    add_row_times_tile(acc, dSs + r * (kTile + kPad), Ks, a.E + 1, std::min<int64_t>(kTile, a.S - s0), a.E, t);
  }
  if (!row_ok) return;
#pragma unroll
  for (int c = 0; c < kAcc; ++c) {
    const int col = t + kGroup * c;
    if (col < a.E) grad_q[offset_of(gqv, n, h, l, col)] = a.scale * acc[c];
  }
}

// grad_k and grad_v: a block per kTile keys of a problem, looping over query tiles.
// Grid: (ceil(S / kTile) · N·H) blocks; dynamic shared memory backward_kv_smem. kAcc
// covers E and Ev.
template <class T, int kAcc>
__global__ void __launch_bounds__(kFlashThreads)
    flash_backward_kv_kernel(FlashArgs<T> a, const T* g, View4 gv, const T* lse, const T* D, T* grad_k, View4 gkv,
                             T* grad_v, View4 gvv) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  T* const Ks = reinterpret_cast<T*>(smem_bytes);  // (kTile, E + 1): this block's keys
  T* const Vs = Ks + kTile * (a.E + 1);             // (kTile, Ev + 1)
  T* const Qs = Vs + kTile * (a.Ev + 1);            // (kTile, E + 1): a tile of queries
  T* const Gs = Qs + kTile * (a.E + 1);             // (kTile, Ev + 1)
  T* const Ps = Gs + kTile * (a.Ev + 1);            // (kTile keys, kTile + kPad queries): P'
  T* const dSs = Ps + kTile * (kTile + kPad);       // (kTile keys, kTile + kPad queries): dS
  T* const lses = dSs + kTile * (kTile + kPad);     // (kTile)
  T* const Ds = lses + kTile;                       // (kTile)
  const TileRow p = tile_row(a.S, a.H);
  const int64_t b = p.b, s0 = p.first, n = p.n, h = p.h, s = p.row;
  const int r = p.r, t = p.t;
  const bool key_ok = p.ok;
  load_tile(Ks, a.E + 1, a.k, a.kv, n, h, s0, a.S, a.E);
  load_tile(Vs, a.Ev + 1, a.v, a.vv, n, h, s0, a.S, a.Ev);
  const int64_t mask_col = a.mask.data ? offset_of(a.mask.at, n, h, 0, s) : 0;
  T acc_k[kAcc] = {}, acc_v[kAcc] = {};
  for (int64_t l0 = 0; l0 < a.L; l0 += kTile) {
    __syncthreads();
    load_tile(Qs, a.E + 1, a.q, a.qv, n, h, l0, a.L, a.E);
    load_tile(Gs, a.Ev + 1, g, gv, n, h, l0, a.L, a.Ev);
    if (threadIdx.x < kTile) {
      const int64_t l = l0 + threadIdx.x;
      lses[threadIdx.x] = l < a.L ? lse[b * a.L + l] : T(0);
      Ds[threadIdx.x] = l < a.L ? D[b * a.L + l] : T(0);
    }
    __syncthreads();
    T qk[kPerThread], gv[kPerThread];
    scores_of_row(Ks + r * (a.E + 1), Qs + t * (a.E + 1), a.E, kGroup, qk);
    scores_of_row(Vs + r * (a.Ev + 1), Gs + t * (a.Ev + 1), a.Ev, kGroup, gv);
    for (int k = 0; k < kPerThread; ++k) {
      const int i = t + kGroup * k;
      const int64_t l = l0 + i;
      T kept_p = 0, ds = 0;
      if (key_ok && l < a.L) {
        const T x = masked_score_at(a.scale * qk[k], a.mask, mask_col + l * a.mask.at.s2);
        const T pv = prob_from_lse(x, lses[i]);
        const T dp = gv[k];
        const T keep = !a.drop || kept(a.seed, a.block, (b * a.L + l) * a.S + s, a.threshold) ? a.keep_scale : T(0);
        kept_p = pv * keep;
        ds = pv * (dp * keep - Ds[i]);
      }
      Ps[r * (kTile + kPad) + i] = kept_p;
      dSs[r * (kTile + kPad) + i] = ds;
    }
    __syncthreads();
    const int64_t rows = std::min<int64_t>(kTile, a.L - l0);
    add_row_times_tile(acc_v, Ps + r * (kTile + kPad), Gs, a.Ev + 1, rows, a.Ev, t);
    add_row_times_tile(acc_k, dSs + r * (kTile + kPad), Qs, a.E + 1, rows, a.E, t);
  }
  if (!key_ok) return;
#pragma unroll
  for (int c = 0; c < kAcc; ++c) {
    const int col = t + kGroup * c;
    if (col < a.Ev) grad_v[offset_of(gvv, n, h, s, col)] = acc_v[c];
    if (col < a.E) grad_k[offset_of(gkv, n, h, s, col)] = a.scale * acc_k[c];
  }
}

// The shared memory a block may have on a device (opt-in maximum), asked once per device.
int64_t shared_limit(int device) {
  static std::atomic<int> known[kMaxDevices] = {};  // 0: not asked yet
  int bytes = known[device].load(std::memory_order_relaxed);
  if (bytes == 0) {
    KILN_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "attention");
    known[device].store(bytes, std::memory_order_relaxed);
  }
  return bytes;
}

// Launches kernel on blocks × kFlashThreads with `bytes` of dynamic shared memory,
// raising the kernel's limit first where it is above the default 48 KiB.
template <class Kernel, class... Args>
void launch(Kernel kernel, int64_t blocks, int64_t bytes, cudaStream_t stream, const char* op, Args... args) {
  if (bytes > 48 * 1024) {
    KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
                    op);
  }
  kernel<<<static_cast<unsigned>(blocks), kFlashThreads, static_cast<size_t>(bytes), stream>>>(args...);
  KILN_CUDA_LAUNCH_CHECK(op);
}

// Whether a call with these sizes fits the kernels: heads up to kMaxHead, the grid within
// its x limit, the largest kernel's shared memory within the device's.
template <class T>
bool fits(int64_t NH, int64_t L, int64_t S, int64_t E, int64_t Ev, int device) {
  if (E > kMaxHead || Ev > kMaxHead) return false;
  const int64_t tiles = std::max((L + kTile - 1) / kTile, (S + kTile - 1) / kTile);
  if (NH * tiles > INT_MAX) return false;
  const int64_t bytes = backward_kv_smem(static_cast<int>(E), static_cast<int>(Ev)) * static_cast<int64_t>(sizeof(T));
  return bytes <= shared_limit(device);
}

template <class T>
FlashArgs<T> args_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, double p,
                     uint64_t seed, uint64_t block) {
  FlashArgs<T> a{};
  a.q = q.data<T>();
  a.k = k.data<T>();
  a.v = v.data<T>();
  a.qv = view_of(q);
  a.kv = view_of(k);
  a.vv = view_of(v);
  a.H = q.size(1);
  a.L = q.size(2);
  a.S = k.size(2);
  a.E = static_cast<int>(q.size(3));
  a.Ev = static_cast<int>(v.size(3));
  a.mask = mask_view(mask);
  a.scale = static_cast<T>(scale);
  a.drop = p > 0;
  a.seed = seed;
  a.block = block;
  a.threshold = cpu::bernoulli_threshold(1.0 - p);
  a.keep_scale = p > 0 ? static_cast<T>(1.0 / (1.0 - p)) : T(1);
  return a;
}

// Calls f(std::integral_constant<int, kAcc>) with the accumulator count for `cols` columns.
template <class F>
void with_acc(int cols, F&& f) {
  if (cols <= 4 * kGroup) return f(std::integral_constant<int, 4>());
  if (cols <= 8 * kGroup) return f(std::integral_constant<int, 8>());
  if (cols <= 16 * kGroup) return f(std::integral_constant<int, 16>());
  f(std::integral_constant<int, kMaxHead / kGroup>());
}

}  // namespace

template <class T>
bool flash_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, double p,
                     uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) {
  const int64_t NH = q.size(0) * q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  const int device = out.device().index;
  if (!fits<T>(NH, L, S, E, Ev, device)) return false;
  const FlashArgs<T> a = args_of<T>(q, k, v, mask, scale, p, seed, block);
  const int64_t blocks = NH * ((L + kTile - 1) / kTile);
  const int64_t bytes = forward_smem(a.E, a.Ev) * static_cast<int64_t>(sizeof(T));
  with_acc(a.Ev, [&](auto acc) {
    launch(flash_forward_kernel<T, decltype(acc)::value>, blocks, bytes, stream_of(out), "attention", a,
           out.data<T>(), view_of(out), lse.data<T>());
  });
  return true;
}

template <class T>
bool flash_attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Tensor& out, const Tensor& lse, double scale, double p,
                              uint64_t seed, uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                              const Tensor& grad_v) {
  const int64_t NH = q.size(0) * q.size(1), L = q.size(2), S = k.size(2), E = q.size(3), Ev = v.size(3);
  const int device = grad_q.device().index;
  if (!fits<T>(NH, L, S, E, Ev, device)) return false;
  const FlashArgs<T> a = args_of<T>(q, k, v, mask, scale, p, seed, block);
  cudaStream_t stream = stream_of(grad_q);
  Tensor D = Tensor::empty({NH * L}, TensorOptions(q.dtype()).device(q.device()));  // rowsum(g ∘ out)
  const int cols = std::max(a.E, a.Ev);
  with_acc(cols, [&](auto acc) {
    constexpr int kAcc = decltype(acc)::value;
    launch(flash_backward_q_kernel<T, kAcc>, NH * ((L + kTile - 1) / kTile),
           backward_q_smem(a.E, a.Ev) * static_cast<int64_t>(sizeof(T)), stream, "attention_backward", a,
           g.data<T>(), view_of(g), out.data<T>(), view_of(out), lse.data<T>(), D.data<T>(), grad_q.data<T>(),
           view_of(grad_q));
    launch(flash_backward_kv_kernel<T, kAcc>, NH * ((S + kTile - 1) / kTile),
           backward_kv_smem(a.E, a.Ev) * static_cast<int64_t>(sizeof(T)), stream, "attention_backward", a,
           g.data<T>(), view_of(g), lse.data<T>(), D.data<T>(), grad_k.data<T>(), view_of(grad_k),
           grad_v.data<T>(), view_of(grad_v));
  });
  return true;
}

template bool flash_attention<float>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, double,
                                     uint64_t, uint64_t, const Tensor&, const Tensor&);
template bool flash_attention<double>(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, double,
                                      uint64_t, uint64_t, const Tensor&, const Tensor&);
template bool flash_attention_backward<float>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                              const Tensor&, const Tensor&, const Tensor&, double, double, uint64_t,
                                              uint64_t, const Tensor&, const Tensor&, const Tensor&);
template bool flash_attention_backward<double>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&, double, double, uint64_t,
                                               uint64_t, const Tensor&, const Tensor&, const Tensor&);

}  // namespace kiln::cuda
