// The CPU's arithmetic peak: what no kernel on this machine can beat, the floor under
// every speed target. Chains of independent multiply-adds in registers (no memory), on
// 1..T threads at once (a core's clock drops when its neighbours work too):
//
//   bench_peak [--threads T] [--seconds S]
//
//   fp32 fma avx2     vfmadd231ps on 8 lanes     (16 flops an instruction)
//   fp32 fma avx512   vfmadd231ps on 16 lanes    (32 flops)
//   bf16 dot avx512   vdpbf16ps on 32 bf16 pairs (64 flops: 16 lanes x 2 products x 2)
//
// Each kind where the CPU has it (__builtin_cpu_supports), GFLOP/s summed over the
// threads. Zen 4 runs AVX-512 on 256-bit units, two instructions' worth of work each, so
// avx2 and avx512 give the same fp32 figure there; Intel's server cores and Zen 5 have
// full-width 512-bit units. A model's forward at F GFLOP of products can take no less
// than F / (this figure at its thread count) seconds.
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

// 12 independent accumulators: enough to cover the FMA latency (4 cycles) on two pipes.
constexpr int kChains = 12;
constexpr long kInnerIters = 1 << 20;

__attribute__((target("avx2,fma"))) float fma_avx2(long iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  return _mm256_cvtss_f32(s);  // kept, so that the loop is not optimized away
}

__attribute__((target("avx512f"))) float fma_avx512(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

__attribute__((target("avx512f,avx512bf16"))) float dot_bf16(long iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  // 1.0 and 2^-25 as bfloat16 bits: the sums stay finite.
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3300);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_cvtss_f32(s);
}

struct Kind {
  const char* name;
  bool available;
  float (*run)(long);
  double flops_per_iter;  // per thread, one pass over the chains
};

// GFLOP/s of `threads` threads each running k for about `seconds`, summed.
double measure(const Kind& k, int threads, double seconds) {
  k.run(kInnerIters / 8);  // warm up: the wide units power up on first use
  std::atomic<bool> stop{false};
  std::vector<long> done(static_cast<size_t>(threads), 0);
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!stop.load(std::memory_order_relaxed)) {
        sink[static_cast<size_t>(t)] += k.run(kInnerIters);
        ++done[static_cast<size_t>(t)];
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long blocks = 0;
  for (long d : done) blocks += d;
  float total = 0;
  for (float v : sink) total += v;
  if (total == 12345.0f) std::puts("");  // uses the results
  return static_cast<double>(blocks) * kInnerIters * k.flops_per_iter / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--threads" && has_value) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--seconds" && has_value) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_peak [--threads T] [--seconds S]\n");
      return 2;
    }
  }
  if (threads < 1 || threads > 1024 || !(seconds > 0 && seconds <= 60)) {
    std::fprintf(stderr, "bench_peak: --threads must be 1..1024 and --seconds in (0, 60], got %d and %g\n", threads,
                 seconds);
    return 2;
  }
  __builtin_cpu_init();
  const Kind kinds[] = {
      {"fp32 fma avx2", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), fma_avx2, kChains * 16.0},
      {"fp32 fma avx512", static_cast<bool>(__builtin_cpu_supports("avx512f")), fma_avx512, kChains * 32.0},
      {"bf16 dot avx512", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"), dot_bf16,
       kChains * 64.0},
  };
  std::printf("%-18s", "GFLOP/s");
  for (int t = 1; t <= threads; t *= 2) std::printf(" %9d thr", t);
  if ((threads & (threads - 1)) != 0) std::printf(" %9d thr", threads);
  std::printf("\n");
  for (const Kind& k : kinds) {
    std::printf("%-18s", k.name);
    if (!k.available) {
      std::printf(" not on this CPU\n");
      continue;
    }
    for (int t = 1; t <= threads; t *= 2) std::printf(" %13.1f", measure(k, t, seconds));
    if ((threads & (threads - 1)) != 0) std::printf(" %13.1f", measure(k, threads, seconds));
    std::printf("\n");
  }
  return 0;
}
