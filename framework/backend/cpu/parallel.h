#pragma once
// The one pool of worker threads (oneTBB) and the rule for when to use it.
#include <cstdint>

namespace kiln {

// How many threads Kiln's kernels may use (TBB workers; OpenBLAS stays single-threaded
// and is partitioned by TBB, so the two never compete for the cores).
void set_num_threads(int n);
int get_num_threads();

namespace cpu {

// Below this many elements of simple work a loop stays on the calling thread: a task
// costs about a microsecond, which is 10-30k elements of an add.
constexpr int64_t kGrainElements = 32768;

// A borrowed f(begin, end): what the parallel path needs of a caller's lambda, without
// std::function's heap copy of its captures.
class RangeFn {
 public:
  template <class F>
  explicit RangeFn(F& f)
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// The parallel path of parallel_for (serial too when only one thread is allowed).
void parallel_for_chunks(int64_t n, int64_t grain, RangeFn f);

// f(begin, end) over [0, n) in chunks of at least `grain`; serial when n <= grain or
// when only one thread is allowed. Small loops, the common case in small models, run
// inline with no allocation, lock or task.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain) {
    f(int64_t{0}, n);
    return;
  }
  parallel_for_chunks(n, grain, RangeFn(f));
}

// True when a parallel_for of n items with this grain would use more than one thread.
bool worth_parallel(int64_t n, int64_t grain);

// parallel_for may cut [0, n) where the thread count and TBB's scheduling say: fine for
// work whose every output element is computed whole by one call, from the same inputs in
// the same order (elementwise, one row or line per item). Work that combines partial
// results (a sum over rows, a GEMM cut into sub-GEMMs) must instead cut by the shape
// alone, so that the bits do not depend on the thread count: fixed_chunks.

// [0, n) cut into `count` chunks of `size` items (the last one shorter), a function of
// n, min_size and max_count only: chunks of at least min_size items, at most max_count of
// them (then larger), and none empty.
struct FixedChunks {
  int64_t count = 0, size = 0;
  int64_t begin(int64_t c) const { return c * size; }
  int64_t end(int64_t c, int64_t n) const { return c * size + size < n ? c * size + size : n; }
};
FixedChunks fixed_chunks(int64_t n, int64_t min_size, int64_t max_count);

// f(chunk, begin, end) for every chunk of `chunks` over [0, n), in parallel; each chunk
// is one call, whatever the thread count. Callers that combine per-chunk partial results
// do so afterwards in chunk order.
template <class F>
void parallel_for_fixed(int64_t n, const FixedChunks& chunks, F&& f) {
  parallel_for(chunks.count, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(c, chunks.begin(c), chunks.end(c, n));
  });
}

}  // namespace cpu
}  // namespace kiln
