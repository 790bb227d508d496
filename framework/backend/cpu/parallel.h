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

}  // namespace cpu
}  // namespace kiln
