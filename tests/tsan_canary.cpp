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

int main() {
  kiln::set_num_threads(2);
  const std::vector<double> v(1 << 20, 1.0);
  double sum = 0;
  // [n] elements in chunks of >= 1024: several TBB tasks, all writing `sum`. Each chunk
  // first waits (up to 2 s) until a second thread has joined, so that the tasks do run on
  // two threads: on a busy machine one thread could otherwise take every chunk, and a
  // race that never happens is not reported.
  std::atomic<int> threads_in{0};
  const auto start = std::chrono::steady_clock::now();
  kiln::cpu::parallel_for(static_cast<int64_t>(v.size()), 1024, [&](int64_t b, int64_t e) {
    thread_local bool counted = false;
    if (!counted) {
      counted = true;
      ++threads_in;
    }
    while (threads_in.load() < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(2))
      std::this_thread::yield();
    for (int64_t i = b; i < e; ++i) sum += v[static_cast<size_t>(i)];
  });
  std::printf("sum %g (racy on purpose)\n", sum);
  return 0;
}
