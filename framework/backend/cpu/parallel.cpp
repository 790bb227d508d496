#include "backend/cpu/parallel.h"

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "backend/cpu/blas.h"
#include "backend/cpu/denormals.h"
#include "core/error.h"

// ThreadSanitizer does not see oneTBB's synchronisation (libtbb.so is not instrumented),
// so it would take every kernel run in a TBB task for a race with the thread that
// prepared its inputs. In a TSan build this file is compiled uninstrumented, like
// libtbb.so (framework/meson.build defines KILN_TSAN_ANNOTATE for it), and
// parallel_for_chunks tells TSan what TBB guarantees: the caller's writes happen before
// each task runs, and each task's writes before parallel_for returns. Tasks of one call
// get no order among themselves, so two chunks that write the same element are still
// reported.
#ifdef KILN_TSAN_ANNOTATE
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace kiln {
namespace {

#ifdef KILN_TSAN_ANNOTATE
void tsan_release(void* sync) { __tsan_release(sync); }
void tsan_acquire(void* sync) { __tsan_acquire(sync); }
#else
void tsan_release(void*) {}
void tsan_acquire(void*) {}
#endif

std::mutex g_mu;
std::unique_ptr<tbb::global_control> g_control;
int g_threads = 0;  // 0: not set, use the machine's

int default_threads() { return std::max(1, tbb::this_task_arena::max_concurrency()); }

}  // namespace

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads", "expected at least 1 thread, got ", n);
  std::lock_guard<std::mutex> lock(g_mu);
  g_control.reset();
  g_control = std::make_unique<tbb::global_control>(
      tbb::global_control::max_allowed_parallelism, static_cast<size_t>(n));
  g_threads = n;
  cpu::blas_init();  // keeps OpenBLAS at one thread: TBB partitions matmuls itself
}

int get_num_threads() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_threads > 0) return g_threads;
  return static_cast<int>(std::min<size_t>(
      default_threads(),
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)));
}

namespace cpu {

bool worth_parallel(int64_t n, int64_t grain) { return n > grain && get_num_threads() > 1; }

FixedChunks fixed_chunks(int64_t n, int64_t min_size, int64_t max_count) {
  if (n <= 0) return {};
  min_size = std::max<int64_t>(1, min_size);
  max_count = std::max<int64_t>(1, max_count);
  const int64_t count = std::clamp<int64_t>(n / min_size, 1, max_count);
  const int64_t size = (n + count - 1) / count;
  return {(n + size - 1) / size, size};
}

void parallel_for_chunks(int64_t n, int64_t grain, RangeFn f) {
  if (!worth_parallel(n, grain)) {
    DenormalScope mode;  // as the tasks below: the same bits at one thread as at several
    f(0, n);
    return;
  }
  // Chunks of at least `grain`, and no more than a few per thread so each is worth a task.
  int64_t threads = get_num_threads();
  int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  char start = 0, done = 0;  // ThreadSanitizer's names for the two orderings (see top)
  tsan_release(&start);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, chunk),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      tsan_acquire(&start);
                      DenormalScope mode;  // set_flush_denormal reaches the workers here
                      f(r.begin(), r.end());
                      tsan_release(&done);
                    },
                    tbb::simple_partitioner());
  tsan_acquire(&done);
}

}  // namespace cpu
}  // namespace kiln
