// bfloat16: the float32 <-> bfloat16 conversion loops in GB/s next to a memory copy of
// the same bytes, and what the staging of bfloat16 ops through float32 costs.
//
//   bench_bf16 [--threads N] [--min-time S] [--elements N]
//
// Bytes are what a conversion must move: float32 -> bfloat16 reads 4 and writes 2 bytes
// per element, the other way 2 and 4. "loop" is the bulk loop alone
// (backend/cpu/bfloat16_convert.h), one thread; "copy_" is Tensor::copy_ as a user (or
// autocast) calls it, split over the thread pool. The memcpy reference moves the same
// number of bytes (read + write) over the same threads. Then small and large float32 ops
// (the calls bfloat16 staging must not slow: they pass the staging backend with a dtype
// test) and the same ops in bfloat16.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/bfloat16_convert.h"
#include "kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call over 5 runs of at least min_time each.
double time_it(const std::function<void()>& f, double min_time) {
  f();
  std::vector<double> per_call;
  for (int run = 0; run < 5; ++run) {
    int64_t calls = 0;
    auto t0 = Clock::now();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < min_time);
    per_call.push_back(elapsed / static_cast<double>(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

// memcpy of `bytes` split over the pool's threads, GB/s counting read + write.
double memcpy_gbps(size_t bytes, double min_time) {
  std::vector<char> src(bytes, 1), dst(bytes);
  const int64_t threads = kiln::get_num_threads();
  auto copy = [&] {
    kiln::cpu::parallel_for(threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const size_t b = bytes * static_cast<size_t>(t) / static_cast<size_t>(threads);
        const size_t e = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        std::memcpy(dst.data() + b, src.data() + b, e - b);
      }
    });
  };
  return 2.0 * static_cast<double>(bytes) / time_it(copy, min_time) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.2;
  int64_t n = int64_t{1} << 26;  // 64 Mi elements: 256 MiB of float32, past every cache
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--threads") kiln::set_num_threads(std::stoi(argv[i + 1]));
    else if (f == "--min-time") min_time = std::stod(argv[i + 1]);
    else if (f == "--elements") n = std::stoll(argv[i + 1]);
  }
  using kiln::Tensor;
  std::printf("%s\nthreads %d, %lld elements\n\n", kiln::config().c_str(), kiln::get_num_threads(),
              static_cast<long long>(n));
  Tensor f32 = kiln::randn({n});
  Tensor b16 = f32.to(kiln::kBFloat16);
  Tensor f32_out = kiln::empty({n});
  Tensor b16_out = kiln::empty({n}, kiln::kBFloat16);
  const double bytes = 6.0 * static_cast<double>(n);
  const double copy = memcpy_gbps(static_cast<size_t>(bytes / 2), min_time);
  std::printf("memcpy of %.0f MB: %.1f GB/s (read + write)\n\n", bytes / 2 / 1e6, copy);
  std::printf("| conversion | GB/s | / memcpy |\n| --- | ---: | ---: |\n");
  struct Case {
    const char* name;
    std::function<void()> run;
  };
  const float* fp = f32.data<float>();
  float* fo = f32_out.data<float>();
  const auto* bp = reinterpret_cast<const uint16_t*>(b16.data<kiln::bfloat16>());
  auto* bo = reinterpret_cast<uint16_t*>(b16_out.data<kiln::bfloat16>());
  const std::vector<Case> conversions = {
      {"float32 -> bfloat16, loop (1 thread)", [&] { kiln::cpu::float_to_bf16(fp, bo, n); }},
      {"bfloat16 -> float32, loop (1 thread)", [&] { kiln::cpu::bf16_to_float(bp, fo, n); }},
      {"float32 -> bfloat16, copy_", [&] { b16_out.copy_(f32); }},
      {"bfloat16 -> float32, copy_", [&] { f32_out.copy_(b16); }},
  };
  for (const Case& c : conversions) {
    const double gbps = bytes / time_it(c.run, min_time) / 1e9;
    std::printf("| %s | %.1f | %.2f |\n", c.name, gbps, gbps / copy);
  }

  // Ops: a small float32 add is mostly per-call overhead (what the staging backend adds
  // to), a large one memory; then the same in bfloat16 (staged through float32).
  Tensor s1 = kiln::randn({64}), s2 = kiln::randn({64});
  Tensor a1 = kiln::randn({6400, 512}), a2 = kiln::randn({6400, 512});
  Tensor b1 = a1.to(kiln::kBFloat16), b2 = a2.to(kiln::kBFloat16);
  std::printf("\n| op | per call | GB/s |\n| --- | ---: | ---: |\n");
  auto op = [&](const char* name, double op_bytes, const std::function<void()>& f) {
    const double t = time_it(f, min_time);
    if (op_bytes > 0) std::printf("| %s | %.1f us | %.1f |\n", name, t * 1e6, op_bytes / t / 1e9);
    else std::printf("| %s | %.0f ns | |\n", name, t * 1e9);
  };
  op("add float32 (64)", 0, [&] { kiln::add(s1, s2); });
  op("relu float32 (64)", 0, [&] { kiln::relu(s1); });
  const double big = static_cast<double>(a1.numel());
  op("add float32 (6400x512)", 12 * big, [&] { kiln::add(a1, a2); });
  op("gelu float32 (6400x512)", 8 * big, [&] { kiln::gelu(a1); });
  op("add bfloat16 (6400x512)", 6 * big, [&] { kiln::add(b1, b2); });
  op("gelu bfloat16 (6400x512)", 4 * big, [&] { kiln::gelu(b1); });
  op("sum bfloat16 (6400x512)", 2 * big, [&] { kiln::sum(b1); });
  return 0;
}
