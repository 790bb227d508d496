// Reductions. x (contiguous) is viewed as (A, R, B) with R the reduced block:
// out (A, B) = reduce_r x[a, r, b]. Reduced dims that are not one block are done one
// block at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/reduce_plan.h"
#include "backend/sum_accumulator.h"
#include "backend/cpu/bfloat16_convert.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {
namespace {

template <class T>
bool better(ReduceOp op, T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (best != best) return false;  // NaN wins and stays
    if (v != v) return true;
  }
  return op == ReduceOp::Max ? v > best : v < best;
}

// How many slices of R a column sum is split into: enough that a (1, R, B) sum (a
// bias gradient: R rows of B columns) keeps every thread busy. It depends on the shape
// only, so the sum's rounding does not depend on the thread count.
int64_t sum_slices(int64_t A, int64_t R, int64_t B, int64_t bchunk) {
  constexpr int64_t kMaxSlices = 8, kMinRows = 256;
  const int64_t tasks = A * ((B + bchunk - 1) / bchunk);
  if (tasks >= kMaxSlices || R * B < 4 * kGrainElements) return 1;
  return std::clamp<int64_t>(R / kMinRows, 1, kMaxSlices / tasks);
}

// acc (n) += Σ_r rows (count, n) at `stride` apart, row after row: a column sum's inner
// loop. Every column is its own serial sum, so the vector width changes no bit; in the
// AVX-512 clone a float column sum in double runs 8 columns per instruction, against the
// baseline's 2 (it was 2% of the small training step, in bias gradients).
template <class T, class AccT>
KILN_MULTIVERSION void add_rows(const T* rows, int64_t count, int64_t stride, int64_t n, AccT* __restrict acc) {
  for (int64_t r = 0; r < count; ++r) {
    const T* row = rows + r * stride;
    for (int64_t b = 0; b < n; ++b) acc[b] += static_cast<AccT>(row[b]);
  }
}

// add_rows, and each of the rows' n elements rounded to bfloat16 into `low` (the same
// layout as rows) when low is non-null (float only): a row is read from memory once,
// rounded while in cache and added. The sums' bits are add_rows' (the same order).
template <class T, class AccT>
void add_rows_rounding(const T* rows, int64_t count, int64_t stride, int64_t n, AccT* acc, uint16_t* low) {
  if constexpr (std::is_same_v<T, float>) {
    if (low) {
      for (int64_t r = 0; r < count; ++r) {
        float_to_bf16(rows + r * stride, low + r * stride, n);
        add_rows<T, AccT>(rows + r * stride, 1, stride, n, acc);
      }
      return;
    }
  }
  add_rows<T, AccT>(rows, count, stride, n, acc);
}

// out (A, B) = Σ_r x (A, R, B), R cut into `slices` parts summed apart (in parallel),
// then added in slice order; `low` as add_rows_rounding's, over all of x.
template <class T, class AccT>
void sum_in_slices(const T* x, int64_t A, int64_t R, int64_t B, int64_t slices, T* out, uint16_t* low) {
  const int64_t rows = (R + slices - 1) / slices;
  std::vector<AccT> partial(static_cast<size_t>(A * slices * B), AccT(0));  // (A, slices, B)
  parallel_for(A * slices, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t a = t / slices, r0 = (t % slices) * rows, r1 = std::min(R, r0 + rows);
      const int64_t first = (a * R + r0) * B;
      if (r1 > r0) add_rows_rounding<T, AccT>(x + first, r1 - r0, B, B, partial.data() + t * B, low ? low + first : nullptr);
    }
  });
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      AccT s = 0;
      for (int64_t k = 0; k < slices; ++k) s += partial[static_cast<size_t>((a * slices + k) * B + b)];
      out[a * B + b] = static_cast<T>(s);
    }
  }
}

// Column chunks of at most this many: a task's accumulators stay in L1.
constexpr int64_t kColumnChunk = 1024;

// out (A, B) = Σ_r x (A, R, B) for B > 1, x contiguous: in slices of R where (A, B) is
// too few columns to keep every thread busy, else tasks over (a, chunk of b) that each
// walk all of R. `low` as add_rows_rounding's. The split depends on the shape only.
template <class T, class AccT>
void column_sums(const T* x, int64_t A, int64_t R, int64_t B, T* out, uint16_t* low) {
  const int64_t bchunk = std::min<int64_t>(B, kColumnChunk);
  const int64_t slices = sum_slices(A, R, B, bchunk);
  if (slices > 1) return sum_in_slices<T, AccT>(x, A, R, B, slices, out, low);
  const int64_t nchunks = (B + bchunk - 1) / bchunk;
  parallel_for(A * nchunks, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(R * bchunk, 1)),
               [&](int64_t t0, int64_t t1) {
    std::vector<AccT> acc(bchunk);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t a = t / nchunks, b0 = (t % nchunks) * bchunk, nb = std::min(bchunk, B - b0);
      const int64_t first = a * R * B + b0;
      std::fill(acc.begin(), acc.begin() + nb, AccT(0));
      add_rows_rounding<T, AccT>(x + first, R, B, nb, acc.data(), low ? low + first : nullptr);
      for (int64_t b = 0; b < nb; ++b) out[a * B + b0 + b] = static_cast<T>(acc[b]);
    }
  });
}

// out (A, B), idx (A, B) or null; x (A, R, B) contiguous.
template <class T>
void reduce_block(ReduceOp op, const T* x, int64_t A, int64_t R, int64_t B, T* out, int64_t* idx) {
  using AccT = sum_accumulator_t<T>;
  if (B == 1) {
    parallel_for(A, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(R, 1)), [&](int64_t a0, int64_t a1) {
      for (int64_t a = a0; a < a1; ++a) {
        const T* row = x + a * R;
        if (op == ReduceOp::Sum) {
          AccT s = 0;
          for (int64_t r = 0; r < R; ++r) s += static_cast<AccT>(row[r]);
          out[a] = static_cast<T>(s);
        } else {
          T best = row[0];
          int64_t bi = 0;
          for (int64_t r = 1; r < R; ++r)
            if (better(op, row[r], best)) best = row[r], bi = r;
          out[a] = best;
          if (idx) idx[a] = bi;
        }
      }
    });
    return;
  }
  if (op == ReduceOp::Sum) return column_sums<T, AccT>(x, A, R, B, out, nullptr);
  // Max/min: tasks over (a, chunk of b); each walks r with a vectorisable inner loop over b.
  const int64_t bchunk = std::min<int64_t>(B, kColumnChunk);
  const int64_t nchunks = (B + bchunk - 1) / bchunk;
  parallel_for(A * nchunks, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(R * bchunk, 1)),
               [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t a = t / nchunks, b0 = (t % nchunks) * bchunk, nb = std::min(bchunk, B - b0);
      const T* base = x + a * R * B + b0;
      T* o = out + a * B + b0;
      int64_t* oi = idx ? idx + a * B + b0 : nullptr;
      for (int64_t b = 0; b < nb; ++b) {
        o[b] = base[b];
        if (oi) oi[b] = 0;
      }
      for (int64_t r = 1; r < R; ++r) {
        const T* row = base + r * B;
        for (int64_t b = 0; b < nb; ++b) {
          if (better(op, row[b], o[b])) {
            o[b] = row[b];
            if (oi) oi[b] = r;
          }
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x_in, const std::vector<int64_t>& dims,
                        const Tensor& out, const Tensor* indices) {
  Tensor x = x_in.is_contiguous() ? x_in : x_in.contiguous();
  const std::vector<ReducePass> plan = reduce_plan(x.shape(), dims);
  KILN_CHECK(!indices || plan.size() == 1, "reduce", "indices need a single block of dims");
  Tensor cur = x;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ReducePass& p = plan[i];
    Tensor dst = i + 1 == plan.size() ? out : Tensor::empty(p.out_shape, TensorOptions(cur.dtype()));
    visit_dtype(cur.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      reduce_block<T>(op, cur.data<T>(), p.A, p.R, p.B, dst.data<T>(), indices ? indices->data<int64_t>() : nullptr);
    });
    cur = dst;
  }
}

// low (R, N) = x rounded to bfloat16, sums (N) = Σ_r x (R, N): column_sums' split and
// order, so the sums have reduce's bits.
void CpuBackend::round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) {
  check_round_bf16_and_column_sums(x, low, sums);
  const int64_t R = x.size(0), N = x.size(1);
  // Nothing to read, or one column (reduce's B == 1 path, a single row sum): the default's
  // copy then reduce.
  if (R == 0 || N <= 1) return Backend::round_bf16_and_column_sums(x, low, sums);
  column_sums<float, sum_accumulator_t<float>>(x.data<float>(), 1, R, N, sums.data<float>(),
                                               reinterpret_cast<uint16_t*>(low.data<bfloat16>()));
}

}  // namespace kiln::cpu
