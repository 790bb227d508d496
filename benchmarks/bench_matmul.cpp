// Kiln's float32 matmul against a raw OpenBLAS cblas_sgemm at the same thread count.
//
//   bench_matmul [--threads N] [--runs R] [--min-time S]
//
// For each case: Kiln (kiln::matmul: single-threaded OpenBLAS partitioned by oneTBB,
// output allocated per call, as a user calls it) next to cblas_sgemm with OpenBLAS's
// own N threads into a preallocated output; batched cases compare with a loop of
// cblas_sgemm calls. Also shown: the same raw calls with one OpenBLAS thread. Each
// implementation is warmed up, then timed (std::chrono::steady_clock) in R runs of at
// least S seconds each, interleaved between implementations so that load from other
// processes hits all of them alike; the table shows the median GFLOP/s of the runs.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string name;
  int64_t batch, m, n, k;
};

struct Impl {
  std::string name;
  std::function<void()> setup;     // before each timed run (e.g. OpenBLAS's thread count)
  std::function<void()> teardown;  // after it
  std::function<void()> call;      // one product (all batches)
  int64_t reps = 1;
  std::vector<double> gflops;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Warm up, then pick a repetition count that makes one run last about min_time.
void calibrate(Impl& im, double min_time) {
  im.setup();
  auto t0 = Clock::now();
  int64_t calls = 0;
  while (calls < 3 || seconds_since(t0) < 0.2) {
    im.call();
    ++calls;
  }
  double per_call = seconds_since(t0) / static_cast<double>(calls);
  im.teardown();
  im.reps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_time / per_call)));
}

void timed_run(Impl& im, double flops) {
  im.setup();
  im.call();  // wakes OpenBLAS's threads after the switch of thread count
  auto t0 = Clock::now();
  for (int64_t r = 0; r < im.reps; ++r) im.call();
  double t = seconds_since(t0);
  im.teardown();
  im.gflops.push_back(flops * static_cast<double>(im.reps) / t * 1e-9);
}

void raw_sgemm(const float* a, const float* b, float* c, const Case& cs) {
  for (int64_t i = 0; i < cs.batch; ++i)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(cs.m),
                static_cast<blasint>(cs.n), static_cast<blasint>(cs.k), 1.0f,
                a + i * cs.m * cs.k, static_cast<blasint>(cs.k), b + i * cs.k * cs.n,
                static_cast<blasint>(cs.n), 0.0f, c + i * cs.m * cs.n,
                static_cast<blasint>(cs.n));
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--threads N] [--runs R] [--min-time SECONDS]\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, runs = 7;
  double min_time = 0.1;  // seconds per run; runs * min_time >= 0.5 s per implementation
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    if (arg == "--threads") threads = std::atoi(argv[++i]);
    else if (arg == "--runs") runs = std::atoi(argv[++i]);
    else if (arg == "--min-time") min_time = std::atof(argv[++i]);
    else usage(argv[0]);
  }
  if (runs < 1 || min_time <= 0 || threads < 0) usage(argv[0]);
  if (threads > 0) kiln::set_num_threads(threads);
  threads = kiln::get_num_threads();

  // config() runs Kiln's BLAS set-up (kernel core, one OpenBLAS thread) first, so that
  // the raw calls below use the same kernels as Kiln.
  std::printf("%s", kiln::config().c_str());
  std::printf("OpenBLAS core in use (raw calls): %s\n", openblas_get_corename());
  std::printf("threads: %d (Kiln: oneTBB workers; raw: openblas_set_num_threads(%d))\n",
              threads, threads);
  std::printf("timing: median of %d runs of >= %.2f s each per implementation, interleaved\n",
              runs, min_time);
  std::printf("load average at start: %s\n\n", loadavg().c_str());

  const std::vector<Case> cases = {
      {"256x256 @ 256x256", 1, 256, 256, 256},
      {"512x512 @ 512x512", 1, 512, 512, 512},
      {"1024x1024 @ 1024x1024", 1, 1024, 1024, 1024},
      {"2048x2048 @ 2048x2048", 1, 2048, 2048, 2048},
      {"[512,100,64] @ [512,64,100]", 512, 100, 100, 64},
      {"[512,100,100] @ [512,100,64]", 512, 100, 64, 100},
  };

  std::printf("%-30s %10s %10s %8s %10s %10s\n", "case (float32)", "Kiln", "raw", "Kiln/raw",
              "raw 1thr", "max|diff|");
  std::printf("%-30s %10s %10s %8s %10s %10s\n", "", "GFLOP/s", "GFLOP/s", "", "GFLOP/s", "");
  for (const Case& cs : cases) {
    kiln::Shape sa{cs.m, cs.k}, sb{cs.k, cs.n};
    if (cs.batch > 1) {
      sa.insert(sa.begin(), cs.batch);
      sb.insert(sb.begin(), cs.batch);
    }
    kiln::Tensor a = kiln::randn(sa), b = kiln::randn(sb);
    const float* pa = a.data<float>();
    const float* pb = b.data<float>();
    std::vector<float> c(static_cast<size_t>(cs.batch * cs.m * cs.n));
    const double flops = 2.0 * cs.batch * cs.m * cs.n * cs.k;

    // Sanity: Kiln and raw agree.
    kiln::Tensor out = kiln::matmul(a, b);
    raw_sgemm(pa, pb, c.data(), cs);
    double diff = 0;
    const float* po = out.data<float>();
    for (size_t i = 0; i < c.size(); ++i) diff = std::max<double>(diff, std::fabs(po[i] - c[i]));

    auto nothing = [] {};
    auto blas_threads = [](int n) { return [n] { openblas_set_num_threads(n); }; };
    // After a call, OpenBLAS's idle workers keep spinning (sched_yield) for about 2^28
    // TSC cycles (~0.1 s here) before they sleep; let them, so that they do not take a
    // core from the next implementation's run.
    auto back_to_one_blas_thread = [] {
      openblas_set_num_threads(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    };
    std::vector<Impl> impls;
    impls.push_back({"kiln", nothing, nothing, [&] { out = kiln::matmul(a, b); }, 1, {}});
    // Kiln keeps OpenBLAS at one thread; the raw reference gets all of them for its
    // timed run only, and Kiln's setting is restored after it.
    impls.push_back({"raw", blas_threads(threads), back_to_one_blas_thread,
                     [&] { raw_sgemm(pa, pb, c.data(), cs); }, 1, {}});
    impls.push_back({"raw1", blas_threads(1), blas_threads(1),
                     [&] { raw_sgemm(pa, pb, c.data(), cs); }, 1, {}});
    for (Impl& im : impls) calibrate(im, min_time);
    for (int r = 0; r < runs; ++r)
      for (Impl& im : impls) timed_run(im, flops);

    double kiln_g = median(impls[0].gflops), raw_g = median(impls[1].gflops);
    std::printf("%-30s %10.1f %10.1f %8.3f %10.1f %10.2g\n", cs.name.c_str(), kiln_g, raw_g,
                kiln_g / raw_g, median(impls[2].gflops), diff);
    std::fflush(stdout);
  }
  std::printf("\nraw: cblas_sgemm with OpenBLAS's own %d threads (batched: a loop of calls); "
              "raw 1thr: the same with one OpenBLAS thread.\n",
              threads);
  std::printf("load average at end: %s\n", loadavg().c_str());
  return 0;
}
