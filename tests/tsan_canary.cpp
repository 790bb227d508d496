// ThreadSanitizer's canary (built only in a -Db_sanitize=thread tree; meson expects it
// to fail). Two chunks of one kiln parallel_for add into the same double without a lock:
// a real data race, which TSan must report (exit 66). It proves that the happens-before
// edges parallel.cpp gives TSan for oneTBB (caller before tasks, tasks before return) do
// not also order the tasks among themselves and hide races between chunks, which would
// make test_threads' clean TSan run prove nothing.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "backend/cpu/parallel.h"

// TSan reports a race only when it can still find the earlier access in that thread's
// history; an access that has scrolled out of it (32K accesses at the default size) is
// dropped silently, which is how a larger vector let this canary pass now and then.
// Hence a small vector and the longest history.
extern "C" const char* __tsan_default_options() { return "history_size=7"; }

int main() {
  kiln::set_num_threads(2);
  const std::vector<double> v(4096, 1.0);
  double sum = 0;
  // 4096 elements in chunks of >= 256 (8 of 512): several TBB tasks, all writing `sum`.
  // Each chunk first waits (up to 20 s) until a second thread has joined, so that the
  // tasks do run on two threads: on a busy machine one thread could otherwise take every chunk, and a
  // race that never happens is not reported. The count is the only thing the chunks
  // share besides `sum`: a lock there would order the chunks and hide the race.
  std::atomic<int> threads_in{0};
  const auto start = std::chrono::steady_clock::now();
  kiln::cpu::parallel_for(static_cast<int64_t>(v.size()), 256, [&](int64_t b, int64_t e) {
    thread_local bool counted = false;
    if (!counted) {
      counted = true;
      ++threads_in;
    }
    while (threads_in.load() < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
      std::this_thread::yield();
    for (int64_t i = b; i < e; ++i) sum += v[static_cast<size_t>(i)];
  });
  std::printf("sum %g (racy on purpose)\n", sum);
  if (threads_in.load() < 2) {
    // One thread ran every chunk: there was no race to report, so this run proves
    // nothing either way. 77 is meson's "skipped", which should_fail leaves as it is.
    std::printf("no second thread joined within 20 s: skipped\n");
    return 77;
  }
  return 0;
}
