#pragma once
// The one pool of worker threads (oneTBB) and the rule for when to use it.
#include <cstdint>
#include <functional>

namespace kiln {

// How many threads Kiln's kernels may use (TBB workers; OpenBLAS stays single-threaded
// and is partitioned by TBB, so the two never compete for the cores).
void set_num_threads(int n);
int get_num_threads();

namespace cpu {

// Below this many elements of simple work a loop stays on the calling thread: a task
// costs about a microsecond, which is 10-30k elements of an add.
constexpr int64_t kGrainElements = 32768;

// f(begin, end) over [0, n) in chunks of at least `grain`; serial when n <= grain or
// when only one thread is allowed.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// True when a parallel_for of n items with this grain would use more than one thread.
bool worth_parallel(int64_t n, int64_t grain);

}  // namespace cpu
}  // namespace kiln
