// kiln::set_flush_denormal (torch.set_flush_denormal): subnormal float32 results become
// zero and subnormal operands read as zero in Kiln's kernels, on the calling thread and on
// the worker threads, and everything is as before once it is turned off again.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kiln.h"

using namespace kiln;

namespace {

// Above the serial grain: the op runs in tasks on the worker threads.
constexpr int64_t kParallel = 1 << 20;
constexpr int64_t kInline = 16;  // runs inline on the calling thread

// 1e-20 · 1e-20 = 1e-40, a float32 subnormal (below 2^-126 ≈ 1.18e-38).
Tensor tiny_square(int64_t n) {
  const Tensor a = full({n}, 1e-20, TensorOptions(kFloat32));
  return mul(a, a);
}

// n subnormal float32 values (1e-40), made while nothing flushes.
Tensor subnormals(int64_t n) { return full({n}, 1e-40, TensorOptions(kFloat32)); }

// sub times 1e30: 1e-10, a normal result, when sub's subnormals are read; 0 when they are
// read as zeros (DAZ).
Tensor times_big(const Tensor& sub) { return mul(sub, full(sub.shape(), 1e30, TensorOptions(kFloat32))); }

// What a float32 is, read from its bits: a comparison would itself read a subnormal as
// zero on a thread that flushes (DAZ).
bool is_zero(float x) { return (std::bit_cast<uint32_t>(x) & 0x7fffffffu) == 0; }
bool is_subnormal(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return (b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0;
}

// How many of t's float32 values are zero, and how many are subnormal.
struct Census {
  int64_t zeros = 0, subnormals = 0;
};
Census census(const Tensor& t) {
  Census c;
  const float* p = t.contiguous().data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (is_zero(p[i])) ++c.zeros;
    else if (is_subnormal(p[i])) ++c.subnormals;
  }
  return c;
}

// A product whose every element is 64 · (1e-20 · 1e-20): subnormal, or zero when flushed.
Tensor tiny_matmul(int64_t n) {
  const Tensor a = full({n, 64}, 1e-20, TensorOptions(kFloat32));
  return matmul(a, full({64, n}, 1e-20, TensorOptions(kFloat32)));
}

// 1e-20f squared on this thread, where the compiler cannot fold it.
float square_here() {
  volatile float x = 1e-20f;
  return x * x;
}

// Turns flushing off again however a case ends.
struct FlushOff {
  ~FlushOff() { set_flush_denormal(false); }
};

}  // namespace

#if defined(__x86_64__) || defined(__aarch64__)

TEST_CASE("set_flush_denormal: off by default, IEEE subnormals kept") {
  tiny_square(kParallel);  // the workers exist before any flushing is asked for
  CHECK_FALSE(flush_denormal());
  CHECK(census(tiny_square(kParallel)).subnormals == kParallel);
  CHECK(census(tiny_square(kInline)).subnormals == kInline);
  CHECK(census(tiny_matmul(256)).subnormals == 256 * 256);
  const Tensor big = times_big(subnormals(kParallel));
  CHECK(census(big).zeros == 0);
  CHECK(big.data<float>()[0] == doctest::Approx(1e-10).epsilon(1e-3));
}

TEST_CASE("set_flush_denormal(true) flushes on the calling thread and on the workers, and false undoes it") {
  tiny_square(kParallel);
  const Tensor sub = subnormals(kParallel);
  REQUIRE(census(sub).subnormals == kParallel);
  FlushOff off;
  REQUIRE(set_flush_denormal(true));
  CHECK(flush_denormal());
  CHECK(census(tiny_square(kParallel)).zeros == kParallel);  // results flushed (FTZ)
  CHECK(census(tiny_square(kInline)).zeros == kInline);
  CHECK(census(times_big(sub)).zeros == kParallel);  // subnormal operands read as zero (DAZ)
  CHECK(census(tiny_matmul(256)).zeros == 256 * 256);               // the GEMM library's kernels too
  CHECK(is_zero(square_here()));

  REQUIRE(set_flush_denormal(false));
  CHECK_FALSE(flush_denormal());
  // The workers' own mode came back after each task: nothing flushes any more.
  CHECK(census(tiny_square(kParallel)).subnormals == kParallel);
  CHECK(census(tiny_square(kInline)).subnormals == kInline);
  CHECK(census(tiny_matmul(256)).subnormals == 256 * 256);
  CHECK(is_subnormal(square_here()));
}

TEST_CASE("set_flush_denormal: another thread's Kiln work flushes, its own arithmetic is left as it was") {
  tiny_square(kParallel);
  FlushOff off;
  Census parallel, inline_on_thread;
  float own = 0;
  std::thread other;  // made while flushing is off, so its own mode keeps subnormals
  {
    bool go = false;
    std::mutex mu;
    std::condition_variable cv;
    other = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return go; });
      parallel = census(tiny_square(kParallel));
      inline_on_thread = census(tiny_square(kInline));
      own = square_here();
    });
    REQUIRE(set_flush_denormal(true));
    {
      std::lock_guard<std::mutex> lock(mu);
      go = true;
    }
    cv.notify_one();
    other.join();
  }
  CHECK(parallel.zeros == kParallel);  // its tasks ran flushing, on it and on the workers
  CHECK(is_subnormal(own));  // and its own mode was restored after them (main flushes: bits, not a comparison)
  // An op small enough to stay inline never enters a task: it keeps the thread's mode.
  CHECK(inline_on_thread.subnormals == kInline);
}

#else

TEST_CASE("set_flush_denormal: unsupported on this architecture, changes nothing") {
  CHECK_FALSE(set_flush_denormal(true));
  CHECK_FALSE(flush_denormal());
}

#endif
