// ThreadSanitizer's canary (built only in a -Db_sanitize=thread tree; meson expects it
// to fail). Two chunks of one kiln parallel_for add into the same double without a lock:
// a real data race, which TSan must report (exit 66). It proves that the happens-before
// edges parallel.cpp gives TSan for oneTBB (caller before tasks, tasks before return) do
// not also order the tasks among themselves and hide races between chunks, which would
// make test_threads' clean TSan run prove nothing.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cpu/parallel.h"

int main() {
  kiln::set_num_threads(2);
  const std::vector<double> v(1 << 20, 1.0);
  double sum = 0;
  // [n] elements in chunks of >= 1024: several TBB tasks, all writing `sum`.
  kiln::cpu::parallel_for(static_cast<int64_t>(v.size()), 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += v[static_cast<size_t>(i)];
  });
  std::printf("sum %g (racy on purpose)\n", sum);
  return 0;
}
