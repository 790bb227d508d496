// bf16 GEMMs through oneDNN against fp32 (oneDNN's and Kiln's OpenBLAS path), for the
// GEMMs of the Transformer base step and square products. Built only when Kiln has oneDNN.
//
//   bench_gemm_bf16 [--threads N] [--runs R] [--min-time S] [--cases base,attention,square,small]
//                   [--clock wall|cpu] [--interference] [--bits]
//
// --cases picks groups of products: base (the base configuration's linear layers; "seed",
// its earlier name, still works), attention, square, small.
//
// Implementations, each timed into a preallocated output:
//   blas f32    Kiln's fp32 matmul (Backend::matmul: single-threaded OpenBLAS in blocks
//               fixed by the shape, run by oneTBB)
//   dnnl f32    onednn::gemm_f32: the same blocks, each a oneDNN call at one OpenMP thread
//   f32 omp     one oneDNN fp32 matmul with oneDNN's own N OpenMP threads, called from the
//               main thread
//   bf16        onednn::gemm_bf16 (batched cases: gemm_bf16_batched), blocks as dnnl f32
//   bf16 omp    one oneDNN bf16 matmul with N OpenMP threads
// Runs interleave between implementations (R runs of at least S seconds each, after a
// warm-up); the table shows the median GFLOP/s. After a run with OpenMP threads the
// benchmark pauses 0.25 s, so that libgomp's spinning workers do not take a core from
// the next run.
//
// --interference: how long a TBB-partitioned fp32 matmul takes right after a oneDNN call
// with 2 OpenMP threads, against right after one on Kiln's blocks, and after a pause.
// --bits: whether each implementation gives the same bits at 1, 2 and 4 threads.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.h>

#include "backend/backend.h"
#include "backend/cpu/onednn_gemm.h"

// oneDNN's OpenMP runtime (libgomp, loaded with libdnnl).
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace {

using Clock = std::chrono::steady_clock;
namespace onednn = kiln::cpu::onednn;

struct Case {
  std::string group, name;
  int64_t batch, m, n, k;
  bool ta, tb;
};

std::vector<Case> all_cases() {
  // The base step (bench_train_step --config base): 64 sentences of 100 tokens (6400
  // rows), d_model 512, 8 heads of 64, feed-forward 2048, vocabulary 5000. A linear
  // layer's forward is x W^T, its input gradient g W and its weight gradient g^T x.
  return {
      {"base", "q,k,v: x W^T", 1, 6400, 1536, 512, false, true},
      {"base", "attn out: x W^T", 1, 6400, 512, 512, false, true},
      {"base", "ff in: x W^T", 1, 6400, 2048, 512, false, true},
      {"base", "ff out: x W^T", 1, 6400, 512, 2048, false, true},
      {"base", "generator: x W^T", 1, 6400, 5000, 512, false, true},
      {"base", "q,k,v dx: g W", 1, 6400, 512, 1536, false, false},
      {"base", "attn out dx: g W", 1, 6400, 512, 512, false, false},
      {"base", "ff out dx: g W", 1, 6400, 2048, 512, false, false},
      {"base", "generator dx: g W", 1, 6400, 512, 5000, false, false},
      {"base", "q,k,v dW: g^T x", 1, 1536, 512, 6400, true, false},
      {"base", "attn out dW: g^T x", 1, 512, 512, 6400, true, false},
      {"base", "ff in dW: g^T x", 1, 2048, 512, 6400, true, false},
      {"base", "generator dW: g^T x", 1, 5000, 512, 6400, true, false},
      // Attention per (sentence, head): 512 products of 100 x 100 over 64.
      {"attention", "scores: q k^T", 512, 100, 100, 64, false, true},
      {"attention", "out: p v", 512, 100, 64, 100, false, false},
      {"attention", "dv: p^T g", 512, 100, 64, 100, true, false},
      // The small step (--config small): 32 sentences of 32 tokens (1024 rows), d_model 128,
      // 4 heads of 32, feed-forward 512, vocabulary 1000; attention 128 problems of 32.
      {"small", "q,k,v: x W^T", 1, 1024, 384, 128, false, true},
      {"small", "attn out: x W^T", 1, 1024, 128, 128, false, true},
      {"small", "ff in: x W^T", 1, 1024, 512, 128, false, true},
      {"small", "ff out: x W^T", 1, 1024, 128, 512, false, true},
      {"small", "generator: x W^T", 1, 1024, 1000, 128, false, true},
      {"small", "q,k,v dx: g W", 1, 1024, 128, 384, false, false},
      {"small", "attn out dx: g W", 1, 1024, 128, 128, false, false},
      {"small", "ff out dx: g W", 1, 1024, 512, 128, false, false},
      {"small", "generator dx: g W", 1, 1024, 128, 1000, false, false},
      {"small", "q,k,v dW: g^T x", 1, 384, 128, 1024, true, false},
      {"small", "attn out dW: g^T x", 1, 128, 128, 1024, true, false},
      {"small", "ff in dW: g^T x", 1, 512, 128, 1024, true, false},
      {"small", "ff out dW: g^T x", 1, 128, 512, 1024, true, false},
      {"small", "generator dW: g^T x", 1, 1000, 128, 1024, true, false},
      {"small", "scores: q k^T", 128, 32, 32, 32, false, true},
      {"small", "out: p v", 128, 32, 32, 32, false, false},
      {"small", "dv: p^T g", 128, 32, 32, 32, true, false},
      {"square", "512", 1, 512, 512, 512, false, false},
      {"square", "1024", 1, 1024, 1024, 1024, false, false},
      {"square", "2048", 1, 2048, 2048, 2048, false, false},
  };
}

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// Values in [-1, 1) that bf16 holds exactly, so the bf16 and fp32 inputs are the same numbers.
void fill_bf16_exact(std::vector<float>& f, std::vector<uint16_t>& h, uint64_t seed) {
  h.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    float x = static_cast<float>((seed >> 40) & 0xffff) / 32768.0f - 1.0f;
    h[i] = bf16_bits(x);
    uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    std::memcpy(&f[i], &u, 4);
  }
}

// A raw oneDNN matmul with oneDNN's own OpenMP threads (mode b), dense operands.
class RawOmp {
 public:
  RawOmp(const Case& c, bool bf16, int threads, const void* a, const void* b, float* out)
      : threads_(threads) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dt t = bf16 ? dt::bf16 : dt::f32;
    auto md = [&](int64_t rows, int64_t cols, bool trans, dt type) {
      dims d = {c.batch, rows, cols};
      dims s = trans ? dims{rows * cols, 1, rows} : dims{rows * cols, cols, 1};
      return dnnl::memory::desc(d, type, s);
    };
    omp_set_num_threads(threads_);  // oneDNN fixes its thread count when the primitive is made
    auto amd = md(c.m, c.k, c.ta, t), bmd = md(c.k, c.n, c.tb, t), cmd = md(c.m, c.n, false, dt::f32);
#if DNNL_VERSION_MAJOR >= 3
    dnnl::matmul::primitive_desc pd(eng_, amd, bmd, cmd);
#else
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(amd, bmd, cmd), eng_);
#endif
    impl_ = pd.impl_info_str();
    prim_ = dnnl::matmul(pd);
    a_ = dnnl::memory(amd, eng_, const_cast<void*>(a));
    b_ = dnnl::memory(bmd, eng_, const_cast<void*>(b));
    c_ = dnnl::memory(cmd, eng_, out);
    omp_set_num_threads(1);
  }
  void operator()() {
    omp_set_num_threads(threads_);
    prim_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
    omp_set_num_threads(1);
  }
  const std::string& impl() const { return impl_; }

 private:
  int threads_;
  dnnl::engine eng_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{eng_};
  dnnl::matmul prim_;
  dnnl::memory a_, b_, c_;
  std::string impl_;
};

// The operands of one case: fp32 tensors (for Kiln's matmul) and the same values as bf16.
struct Operands {
  kiln::Tensor a, b, out;       // a, b as stored (transposed when ta / tb)
  kiln::Tensor a_view, b_view;  // (…, M, K) and (…, K, N) views for Backend::matmul
  std::vector<uint16_t> a16, b16;
  std::vector<float> c;

  explicit Operands(const Case& cs) {
    auto stored = [&](int64_t rows, int64_t cols, bool trans) {
      kiln::Shape s = trans ? kiln::Shape{cols, rows} : kiln::Shape{rows, cols};
      if (cs.batch > 1) s.insert(s.begin(), cs.batch);
      return kiln::empty(s);
    };
    a = stored(cs.m, cs.k, cs.ta);
    b = stored(cs.k, cs.n, cs.tb);
    std::vector<float> fa(static_cast<size_t>(a.numel())), fb(static_cast<size_t>(b.numel()));
    fill_bf16_exact(fa, a16, 1);
    fill_bf16_exact(fb, b16, 2);
    std::memcpy(a.data<float>(), fa.data(), fa.size() * 4);
    std::memcpy(b.data<float>(), fb.data(), fb.size() * 4);
    a_view = cs.ta ? a.transpose(-2, -1) : a;
    b_view = cs.tb ? b.transpose(-2, -1) : b;
    kiln::Shape so{cs.m, cs.n};
    if (cs.batch > 1) so.insert(so.begin(), cs.batch);
    out = kiln::empty(so);
    c.assign(static_cast<size_t>(cs.batch * cs.m * cs.n), 0.0f);
  }
};

struct Impl {
  Impl(std::string n, std::function<void()> f, bool with_omp = false)
      : name(std::move(n)), call(std::move(f)), omp(with_omp) {}
  std::string name;
  std::function<void()> call;
  bool omp;  // pause after its runs (libgomp's spinning workers)
  int64_t reps = 1;
  std::vector<double> gflops;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --clock cpu: the process's CPU time instead of the wall clock. At one thread this is
// the time the work itself took, however often another process took the core meanwhile:
// the figure to compare implementations by on a loaded machine (at 2 threads it counts
// both threads, spinning included, so it shows work, not speed).
bool g_cpu_clock = false;

double now_seconds() {
  if (!g_cpu_clock) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
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

void pause_for_omp() { std::this_thread::sleep_for(std::chrono::milliseconds(250)); }

void calibrate(Impl& im, double min_time) {
  auto t0 = Clock::now();
  int64_t calls = 0;
  while (calls < 2 || seconds_since(t0) < 0.2) {
    im.call();
    ++calls;
  }
  im.reps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_time / (seconds_since(t0) / calls))));
  if (im.omp) pause_for_omp();
}

void timed_run(Impl& im, double flops) {
  im.call();
  const double t0 = now_seconds();
  for (int64_t r = 0; r < im.reps; ++r) im.call();
  const double t = now_seconds() - t0;
  im.gflops.push_back(flops * static_cast<double>(im.reps) / t * 1e-9);
  if (im.omp) pause_for_omp();
}

// Kiln's own implementations of a case (mode a): blas f32, dnnl f32, bf16.
std::vector<Impl> kiln_impls(const Case& cs, Operands& o) {
  kiln::Backend& cpu = kiln::backend_for(kiln::Device("cpu"));
  const int64_t lda = cs.ta ? cs.m : cs.k, ldb = cs.tb ? cs.k : cs.n;
  const int64_t sa = cs.m * cs.k, sb = cs.k * cs.n, sc = cs.m * cs.n;
  std::vector<Impl> v;
  v.emplace_back("blas f32", [&cpu, &o] { cpu.matmul(o.a_view, o.b_view, o.out); });
  const float* fa = o.a.data<float>();
  const float* fb = o.b.data<float>();
  float* c = o.c.data();
  v.emplace_back("dnnl f32", [=] {
    if (cs.batch == 1)
      onednn::gemm_f32(cs.ta, cs.tb, cs.m, cs.n, cs.k, fa, lda, fb, ldb, c, cs.n, false);
    else
      onednn::gemm_f32_batched(cs.batch, cs.ta, cs.tb, cs.m, cs.n, cs.k, fa, lda, sa, fb, ldb, sb, c, cs.n,
                               sc, false);
  });
  if (!onednn::has_bf16()) return v;  // an AVX2 CPU: oneDNN 2.x has no bf16 matmul there
  const uint16_t* ha = o.a16.data();
  const uint16_t* hb = o.b16.data();
  v.emplace_back("bf16", [=] {
    if (cs.batch == 1)
      onednn::gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, ha, lda, hb, ldb, c, cs.n, false);
    else
      onednn::gemm_bf16_batched(cs.batch, cs.ta, cs.tb, cs.m, cs.n, cs.k, ha, lda, sa, hb, ldb, sb, c, cs.n,
                                sc, false);
  });
  return v;
}

void run_table(const std::vector<Case>& cases, int threads, int runs, double min_time) {
  std::printf("\n%d thread(s): GFLOP/s%s, median of %d interleaved runs of >= %.2f s\n", threads,
              g_cpu_clock ? " of process CPU time" : "", runs, min_time);
  std::printf("%-10s %-22s %-20s %9s %9s %9s %9s %9s %8s %8s\n", "group", "case", "M x N x K (batch)",
              "blas f32", "dnnl f32", "f32 omp", "bf16", "bf16 omp", "bf16/bl", "dnnl/bl");
  for (const Case& cs : cases) {
    Operands o(cs);
    std::vector<Impl> impls = kiln_impls(cs, o);
    RawOmp f32omp(cs, false, threads, o.a.data<float>(), o.b.data<float>(), o.c.data());
    std::unique_ptr<RawOmp> bf16omp;
    if (onednn::has_bf16()) bf16omp = std::make_unique<RawOmp>(cs, true, threads, o.a16.data(), o.b16.data(), o.c.data());
    impls.insert(impls.begin() + 2, Impl(
                                        "f32 omp", [&] { f32omp(); }, true));
    if (bf16omp)
      impls.emplace_back(
          "bf16 omp", [&] { (*bf16omp)(); }, true);
    const double flops = 2.0 * static_cast<double>(cs.batch) * cs.m * cs.n * cs.k;
    for (Impl& im : impls) calibrate(im, min_time);
    for (int r = 0; r < runs; ++r)
      for (Impl& im : impls) timed_run(im, flops);
    std::ostringstream shape;
    shape << cs.m << "x" << cs.n << "x" << cs.k << (cs.ta ? " T" : "") << (cs.tb ? " .T" : "");
    if (cs.batch > 1) shape << " (" << cs.batch << ")";
    double g[5] = {0, 0, 0, 0, 0};  // 0: not run (no bf16 matmul on this CPU)
    for (size_t i = 0; i < impls.size(); ++i) g[i] = median(impls[i].gflops);
    std::printf("%-10s %-22s %-20s %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f\n", cs.group.c_str(),
                cs.name.c_str(), shape.str().c_str(), g[0], g[1], g[2], g[3], g[4], g[3] / g[0], g[1] / g[0]);
    std::fflush(stdout);
  }
}

// A TBB-partitioned fp32 matmul timed right after something else ran.
void interference(int runs) {
  std::printf(
      "\nInterference: a 1024^3 fp32 Kiln matmul (OpenBLAS in TBB blocks, 2 threads) timed right after\n");
  kiln::set_num_threads(2);
  Case cs{"", "", 1, 1024, 1024, 1024, false, false};
  Operands o(cs);
  kiln::Backend& cpu = kiln::backend_for(kiln::Device("cpu"));
  RawOmp omp2(cs, true, 2, o.a16.data(), o.b16.data(), o.c.data());
  auto kiln_bf16 = [&] {
    onednn::gemm_bf16(false, false, 1024, 1024, 1024, o.a16.data(), 1024, o.b16.data(), 1024, o.c.data(),
                      1024, false);
  };
  auto work = [&] { cpu.matmul(o.a_view, o.b_view, o.out); };
  struct Before {
    const char* name;
    std::function<void()> f;
    std::vector<double> ms;
  };
  std::vector<Before> befores = {
      {"a 0.1 s pause", [] { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }, {}},
      {"a bf16 GEMM on Kiln's blocks (1 OpenMP thread each)", kiln_bf16, {}},
      {"a bf16 GEMM with oneDNN's 2 OpenMP threads", [&] { omp2(); }, {}},
  };
  work();
  for (int r = 0; r < runs * 3; ++r) {
    for (Before& b : befores) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      b.f();
      auto t0 = Clock::now();
      work();
      b.ms.push_back(seconds_since(t0) * 1e3);
    }
  }
  for (Before& b : befores) {
    std::sort(b.ms.begin(), b.ms.end());
    std::printf("  after %-52s median %6.2f ms, max %6.2f ms\n", b.name, median(b.ms), b.ms.back());
  }
}

// Whether each implementation gives the same bits at 1, 2 and 4 threads.
void bits(const std::vector<Case>& cases) {
  std::printf(
      "\nSame bits at 1, 2 and 4 threads (Kiln's threads for blas/dnnl/bf16, OpenMP's for the omp "
      "columns)\n");
  std::printf("%-10s %-22s %9s %9s %9s %9s %9s\n", "group", "case", "blas f32", "dnnl f32", "f32 omp", "bf16",
              "bf16 omp");
  for (const Case& cs : cases) {
    Operands o(cs);
    std::vector<std::vector<float>> first(5);
    bool same[5] = {true, true, true, true, true};
    for (int t : {1, 2, 4}) {
      kiln::set_num_threads(t);
      std::vector<Impl> impls = kiln_impls(cs, o);
      RawOmp f32omp(cs, false, t, o.a.data<float>(), o.b.data<float>(), o.c.data());
      RawOmp bf16omp(cs, true, t, o.a16.data(), o.b16.data(), o.c.data());
      impls.insert(impls.begin() + 2, Impl(
                                          "f32 omp", [&] { f32omp(); }, true));
      impls.emplace_back(
          "bf16 omp", [&] { bf16omp(); }, true);
      for (size_t i = 0; i < 5; ++i) {
        impls[i].call();
        const float* r = i == 0 ? o.out.data<float>() : o.c.data();
        std::vector<float> got(r, r + cs.batch * cs.m * cs.n);
        if (t == 1)
          first[i] = got;
        else
          same[i] = same[i] && std::memcmp(got.data(), first[i].data(), got.size() * 4) == 0;
      }
    }
    std::printf("%-10s %-22s", cs.group.c_str(), cs.name.c_str());
    for (bool s : same) std::printf(" %9s", s ? "same" : "DIFFER");
    std::printf("\n");
    std::fflush(stdout);
  }
}

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--threads N] [--runs R] [--min-time S] [--cases base,attention,square,small] "
               "[--clock wall|cpu] [--interference] [--bits]\n"
               "(in --cases, seed is another name for base)\n",
               argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, runs = 5;
  double min_time = 0.1;
  std::string groups = "base,attention,square";
  bool do_interference = false, do_bits = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--interference")
      do_interference = true;
    else if (arg == "--bits")
      do_bits = true;
    else if (i + 1 >= argc)
      usage(argv[0]);
    else if (arg == "--threads")
      threads = std::atoi(argv[++i]);
    else if (arg == "--runs")
      runs = std::atoi(argv[++i]);
    else if (arg == "--min-time")
      min_time = std::atof(argv[++i]);
    else if (arg == "--cases")
      groups = argv[++i];
    else if (arg == "--clock")
      g_cpu_clock = std::string(argv[++i]) == "cpu";
    else
      usage(argv[0]);
  }
  if (runs < 1 || min_time <= 0 || threads < 0) usage(argv[0]);
  if (!onednn::available() || !omp_set_num_threads) {
    std::printf("%s\noneDNN (with its OpenMP runtime) is needed for this benchmark\n",
                kiln::config().c_str());
    return 1;
  }
  if (threads > 0) kiln::set_num_threads(threads);
  threads = kiln::get_num_threads();
  std::printf("%s", kiln::config().c_str());
  std::printf("load average at start: %s\n", loadavg().c_str());

  std::vector<Case> cases;
  std::string wanted = "," + groups + ",";
  for (size_t at; (at = wanted.find(",seed,")) != std::string::npos;) wanted.replace(at, 6, ",base,");
  for (const Case& c : all_cases())
    if (wanted.find("," + c.group + ",") != std::string::npos) cases.push_back(c);
  if (do_bits)
    bits(cases);
  else if (do_interference)
    interference(runs);
  else
    run_table(cases, threads, runs, min_time);
  std::printf("load average at end: %s\n", loadavg().c_str());
  return 0;
}
