// GEMMs through oneDNN's matmul primitive (see onednn_gemm.h). Compiled only when meson
// found oneDNN (KILN_WITH_ONEDNN); onednn_none.cpp stands in for it otherwise.
#include "backend/cpu/onednn_gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "backend/cpu/parallel.h"
#include "core/error.h"

// Debian's oneDNN runs its primitives on OpenMP (libgomp). Declared weak so that a
// oneDNN built on the sequential runtime needs no OpenMP at all; resolved at load time
// from the OpenMP runtime libdnnl itself pulls in.
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" int omp_get_max_threads(void) __attribute__((weak));

namespace kiln::cpu::onednn {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// ---- the engine, set up once and never destroyed ------------------------------------
//
// Kept alive until the process ends (a leaked singleton, not a static object): streams
// are thread_local (see ThreadState) and a TBB worker may end after static destructors
// have run, so the engine they point to must outlive every thread.
struct Runtime {
  bool ok = false;       // the engine works: fp32 matmuls
  bool has_bf16 = false;  // oneDNN has a bf16 matmul for this CPU (see probe_bf16_matmul)
  std::string error;      // why not, when !ok
  dnnl::engine engine;
  dnnl::cpu_isa isa = dnnl::cpu_isa::all;
};

// Whether oneDNN has a bfloat16 matmul for this CPU at all: builds of oneDNN 2.x have
// none below AVX512_CORE (an AVX2-only CPU gets "could not create a primitive descriptor
// iterator" for every shape), and Kiln's bf16 products then take their other path.
void probe_bf16_matmul(const dnnl::engine& eng) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a({1, 1}, dt::bf16, dnnl::memory::dims{1, 1});
  const dnnl::memory::desc c({1, 1}, dt::f32, dnnl::memory::dims{1, 1});
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd(eng, a, a, c);
#else
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), eng);
#endif
  (void)pd;
}

const Runtime& runtime() {
  static const Runtime* r = [] {
    auto* rt = new Runtime;
    try {
      rt->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
      rt->isa = dnnl::get_effective_cpu_isa();
      rt->ok = true;
    } catch (const dnnl::error& e) {
      rt->error = e.what();
      return rt;
    }
    try {
      probe_bf16_matmul(rt->engine);
      rt->has_bf16 = true;
    } catch (const dnnl::error&) {
      // fp32 only: bf16 products take Kiln's other path.
    }
    return rt;
  }();
  return *r;
}

bool isa_has(dnnl::cpu_isa isa, dnnl_cpu_isa_t feature) {
  // oneDNN's ISA values nest: each includes the bits of the ones it extends.
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(feature)) == static_cast<unsigned>(feature);
}

std::string isa_name(dnnl::cpu_isa isa) {
  struct Named {
    dnnl_cpu_isa_t isa;
    const char* name;
  };
  static constexpr Named kNames[] = {
      {dnnl_cpu_isa_avx512_core_amx, "AVX512_CORE_AMX"},
      {dnnl_cpu_isa_avx512_core_bf16, "AVX512_CORE_BF16"},
      {dnnl_cpu_isa_avx512_core_vnni, "AVX512_CORE_VNNI"},
      {dnnl_cpu_isa_avx512_core, "AVX512_CORE"},
      {dnnl_cpu_isa_avx2_vnni, "AVX2_VNNI"},
      {dnnl_cpu_isa_avx2, "AVX2"},
      {dnnl_cpu_isa_avx, "AVX"},
      {dnnl_cpu_isa_sse41, "SSE41"},
  };
  for (const Named& n : kNames)
    if (static_cast<unsigned>(isa) == static_cast<unsigned>(n.isa)) return n.name;
  std::ostringstream os;
  os << "0x" << std::hex << static_cast<unsigned>(isa);
  return os.str();
}

// ---- the primitive cache ------------------------------------------------------------

// Everything a primitive depends on: the operand types, the (batch, M, N, K) shape, the
// layouts (transposes, leading dimensions, batch strides), whether it accumulates and
// whether it adds a bias.
struct Key {
  int64_t v[15];
  bool operator==(const Key& o) const { return std::equal(v, v + 15, o.v); }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Entry {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias, scratch;
  size_t scratch_bytes = 0;
  bool reference = false;  // oneDNN's reference code ("ref:any"), orders of magnitude slower
};

// Least recently used out first, bounded: a training run meets a few dozen shapes, but a
// program that multiplies ever new shapes must not keep a primitive (and its JIT code)
// for each. Lookups take a mutex; a primitive is made outside it, so two threads missing
// the same key at once both make one and the first to insert wins.
class PrimitiveCache {
 public:
  static constexpr size_t kCapacity = 256;

  std::shared_ptr<const Entry> find(const Key& k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(k);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }

  std::shared_ptr<const Entry> insert(const Key& k, std::shared_ptr<const Entry> e) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(k);
    if (it != index_.end()) return it->second->second;
    order_.emplace_front(k, std::move(e));
    index_.emplace(k, order_.begin());
    if (order_.size() > kCapacity) {
      index_.erase(order_.back().first);
      order_.pop_back();  // a caller still holding the entry keeps it alive
    }
    return order_.front().second;
  }

  CacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {static_cast<int64_t>(order_.size()), static_cast<int64_t>(kCapacity), hits_, misses_};
  }

 private:
  std::mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<const Entry>>> order_;
  std::unordered_map<Key, decltype(order_)::iterator, KeyHash> index_;
  int64_t hits_ = 0, misses_ = 0;
};

PrimitiveCache& cache() {
  static PrimitiveCache* c = new PrimitiveCache;  // never destroyed, like the engine
  return *c;
}

// ---- per-thread state ---------------------------------------------------------------

// A primitive as one thread runs it: its memory objects made once and re-pointed at each
// call's operands, and the argument map that names them (making them anew cost ~2 us a
// call, as much as a 64^3 product itself).
struct Bound {
  std::shared_ptr<const Entry> entry;
  dnnl::memory a, b, c, bias, scratch;
  std::unordered_map<int, dnnl::memory> args;
};

// The stream a thread executes on, its scratchpad, and the primitives it used lately
// (looked up without the shared cache's lock). The primitives are made with a user
// scratchpad, so that oneDNN does not allocate (and, in its default mode, free again) up
// to megabytes of it on every call.
struct ThreadState {
  static constexpr size_t kRecent = 64;  // then forgotten at once, and looked up again

  dnnl::stream stream;
  std::unique_ptr<char, decltype(&std::free)> scratch{nullptr, &std::free};
  size_t scratch_bytes = 0;
  std::unordered_map<Key, Bound, KeyHash> recent;

  ThreadState() : stream(runtime().engine) {}

  char* scratchpad(size_t bytes) {
    if (bytes > scratch_bytes) {
      constexpr size_t kAlign = 4096;
      const size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
      scratch.reset(static_cast<char*>(std::aligned_alloc(kAlign, size)));
      if (!scratch) {
        scratch_bytes = 0;
        KILN_FAIL_OUT_OF_MEMORY("gemm", "cannot allocate oneDNN's scratchpad of ", size, " bytes");
      }
      scratch_bytes = size;
    }
    return scratch.get();
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

// ---- one oneDNN call ----------------------------------------------------------------

// A product as oneDNN sees it: `batch` products of one shape, operand i at base + i * stride.
struct Problem {
  dt type;
  bool ta, tb, acc;
  int64_t batch, M, N, K, lda, ldb, ldc, sa, sb, sc;
  bool bias;  // C = A·B + bias (N), not accumulating (batch 1)
};

Key key_of(const Problem& p) {
  return {{static_cast<int64_t>(p.type), p.ta, p.tb, p.acc, p.batch, p.M, p.N, p.K, p.lda, p.ldb,
           p.ldc, p.sa, p.sb, p.sc, p.bias}};
}

// A (rows, cols) operand, transposed in memory or not, with its batch dim (size 1 and
// broadcast when its batch stride is 0).
dnnl::memory::desc operand(dt type, int64_t batch, int64_t stride, int64_t rows, int64_t cols,
                           bool trans, int64_t ld) {
  dims d = {rows, cols};
  dims s = trans ? dims{1, ld} : dims{ld, 1};
  if (batch > 1) {
    const bool shared = stride == 0;
    d.insert(d.begin(), shared ? 1 : batch);
    s.insert(s.begin(), shared ? rows * cols : stride);
  }
  return dnnl::memory::desc(d, type, s);
}

std::shared_ptr<const Entry> make_entry(const Problem& p) {
  auto e = std::make_shared<Entry>();
  e->a = operand(p.type, p.batch, p.sa, p.M, p.K, p.ta, p.lda);
  e->b = operand(p.type, p.batch, p.sb, p.K, p.N, p.tb, p.ldb);
  e->c = operand(dt::f32, p.batch, p.sc, p.M, p.N, false, p.ldc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (p.acc) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);  // C = C + A·B: the accumulation is oneDNN's sum post-op
    attr.set_post_ops(ops);
  }
  const dnnl::engine& eng = runtime().engine;
  if (p.bias) e->bias = dnnl::memory::desc({1, p.N}, dt::f32, dims{p.N, 1});
#if DNNL_VERSION_MAJOR >= 3
  dnnl::matmul::primitive_desc pd = p.bias ? dnnl::matmul::primitive_desc(eng, e->a, e->b, e->bias, e->c, attr)
                                           : dnnl::matmul::primitive_desc(eng, e->a, e->b, e->c, attr);
#else
  dnnl::matmul::primitive_desc pd(p.bias ? dnnl::matmul::desc(e->a, e->b, e->bias, e->c)
                                         : dnnl::matmul::desc(e->a, e->b, e->c),
                                  attr, eng);
#endif
  e->scratch = pd.scratchpad_desc();
  e->scratch_bytes = e->scratch.get_size();
  e->reference = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  e->prim = dnnl::matmul(pd);
  return e;
}

// oneDNN at one OpenMP thread while it lives: the parallelism is Kiln's (TBB), and a
// primitive made and run at one thread runs the same code, and gives the same bits,
// wherever it runs. OpenMP's thread count is a per-thread setting (a TBB worker has its
// own, the machine's core count by default), so it is set around every call and the
// caller's value restored.
class OneOmpThread {
 public:
  OneOmpThread() : saved_(omp_get_max_threads && omp_set_num_threads ? omp_get_max_threads() : 1) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int saved_;
};

// Runs one problem on the calling thread (oneDNN at one thread). Returns false, having
// done nothing, when oneDNN has only its reference code for a batched problem (as for a
// batch whose A and B are both shared): the caller then runs its products one by one.
bool run_one(const Problem& p, const void* A, const void* B, float* C, const float* bias = nullptr) {
  OneOmpThread one_thread;  // before a primitive is made: oneDNN fixes its thread count then
  ThreadState& ts = thread_state();
  const Key k = key_of(p);
  auto it = ts.recent.find(k);
  if (it == ts.recent.end()) {
    std::shared_ptr<const Entry> e = cache().find(k);
    if (!e) e = cache().insert(k, make_entry(p));
    if (ts.recent.size() >= ThreadState::kRecent) ts.recent.clear();
    const dnnl::engine& eng = runtime().engine;
    Bound b;
    b.a = dnnl::memory(e->a, eng, const_cast<void*>(A));
    b.b = dnnl::memory(e->b, eng, const_cast<void*>(B));
    b.c = dnnl::memory(e->c, eng, C);
    b.scratch = dnnl::memory(e->scratch, eng, ts.scratchpad(e->scratch_bytes));
    b.args = {{DNNL_ARG_SRC, b.a}, {DNNL_ARG_WEIGHTS, b.b}, {DNNL_ARG_DST, b.c}, {DNNL_ARG_SCRATCHPAD, b.scratch}};
    if (p.bias) {
      b.bias = dnnl::memory(e->bias, eng, const_cast<float*>(bias));
      b.args.emplace(DNNL_ARG_BIAS, b.bias);
    }
    b.entry = std::move(e);
    it = ts.recent.emplace(k, std::move(b)).first;
  }
  Bound& b = it->second;
  if (b.entry->reference && p.batch > 1) return false;
  b.a.set_data_handle(const_cast<void*>(A));
  b.b.set_data_handle(const_cast<void*>(B));
  b.c.set_data_handle(C);
  if (p.bias) b.bias.set_data_handle(const_cast<float*>(bias));
  b.scratch.set_data_handle(ts.scratchpad(b.entry->scratch_bytes));
  b.entry->prim.execute(ts.stream, b.args);
  ts.stream.wait();
  return true;
}

// ---- cutting a product into blocks fixed by its shape -------------------------------

// Roughly the flops below which another task costs more than it saves (a task ~1 us, a
// bf16 block at ~200 GFLOP/s on AMX).
constexpr double kMinFlopsPerTask = 1e6;
// A single product is cut into blocks of whole tiles, at least 2 and about kBlockExtent
// long, at most kMaxBlocks: the rule of cpu_matmul.cpp for OpenBLAS (long blocks, since
// each one packs the other operand again; 512 or 2048 measured no better).
constexpr int64_t kBlockExtent = 1024, kMaxBlocks = 16, kTile = 32;
// Batched products go in groups of about this many flops per oneDNN call: 12 of the
// base model's (100, 100, 64) attention products, 1.1-1.3x faster than one per call.
constexpr double kGroupFlops = 1.6e7;

void check_args(const char* op, dt type, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                int64_t ldb, int64_t ldc) {
  KILN_CHECK(M >= 0 && N >= 0 && K >= 0, op, "sizes must not be negative, got M = ", M, ", N = ", N,
             ", K = ", K);
  const int64_t a_cols = ta ? M : K, b_cols = tb ? K : N;
  KILN_CHECK(lda >= std::max<int64_t>(1, a_cols), op, "lda = ", lda, " is less than A's row length ",
             a_cols, " (A is ", ta ? "(K, M)" : "(M, K)", " = (", ta ? K : M, ", ", a_cols, "))");
  KILN_CHECK(ldb >= std::max<int64_t>(1, b_cols), op, "ldb = ", ldb, " is less than B's row length ",
             b_cols, " (B is ", tb ? "(N, K)" : "(K, N)", " = (", tb ? N : K, ", ", b_cols, "))");
  KILN_CHECK(ldc >= std::max<int64_t>(1, N), op, "ldc = ", ldc, " is less than C's row length N = ", N);
  KILN_CHECK(runtime().ok, op, "oneDNN's CPU engine could not be created: ", runtime().error);
  KILN_CHECK(type != dt::bf16 || runtime().has_bf16, op, "oneDNN has no bfloat16 matmul for this CPU (ISA ",
             isa_name(runtime().isa), ")");
}

// K = 0: an empty sum (plus the bias, when there is one).
void empty_product(int64_t M, int64_t N, float* C, int64_t ldc, bool acc, const float* bias = nullptr) {
  if (acc) return;
  for (int64_t i = 0; i < M; ++i) {
    if (bias) std::copy(bias, bias + N, C + i * ldc);
    else std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
  }
}

template <class F>
void rethrow_as_kiln(const char* op, int64_t M, int64_t N, int64_t K, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    KILN_FAIL(op, "oneDNN failed on (M, N, K) = (", M, ", ", N, ", ", K, "), CPU ISA ",
              isa_name(runtime().isa), ": ", e.what());
  }
}

// A float32 weight gradient, dW (M, N) = gᵀ (M, K) @ x (K, N) with K the batch's rows:
// blocks of C's rows would hand oneDNN column slices of the transposed A, which its fast
// fp32 kernels do not take (one thread: 119-152 GFLOP/s on the base step's weight
// gradients in 768- to 1280-row blocks, 160-170 for the same products whole). Such a
// product is cut along K instead, into parts of at least kSplitKExtent rows of A and B
// (dense, as whole products), each one product; the parts after the first go to scratch
// buffers and are added onto C in part order, so the bits depend on the shape alone.
constexpr int64_t kSplitKExtent = 3200;

bool split_along_k(dt type, bool ta, int64_t M, int64_t N, int64_t K) {
  return type == dt::f32 && ta && K >= 2 * kSplitKExtent && K >= std::max(M, N);
}

// A buffer for split_along_k's parts, taken from a shared pool and given back: allocating
// the few MB anew on every weight gradient costs page faults, and a thread-local one could
// be reused under us by another product that TBB runs on this thread while it waits.
class PartsBuffer {
 public:
  explicit PartsBuffer(size_t n) {
    {
      std::lock_guard<std::mutex> lock(pool().mutex);
      if (!pool().free.empty()) {
        buf_ = std::move(pool().free.back());
        pool().free.pop_back();
      }
    }
    buf_.resize(n);
  }
  ~PartsBuffer() {
    std::lock_guard<std::mutex> lock(pool().mutex);
    pool().free.push_back(std::move(buf_));
  }
  PartsBuffer(const PartsBuffer&) = delete;
  PartsBuffer& operator=(const PartsBuffer&) = delete;
  float* data() { return buf_.data(); }

 private:
  struct Pool {
    std::mutex mutex;
    std::vector<std::vector<float>> free;
  };
  static Pool& pool() {
    static Pool* p = new Pool;  // never destroyed: products may run during static destruction
    return *p;
  }
  std::vector<float> buf_;
};

// C (M, N) = A (M, K) @ B (K, N) [+ C] [+ bias] as parts of K (split_along_k).
template <class T>
void gemm_split_k(dt type, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
                  const T* B, int64_t ldb, float* C, int64_t ldc, bool acc, const float* bias) {
  const FixedChunks parts = fixed_chunks(K, kSplitKExtent, kMaxBlocks);
  const size_t mn = static_cast<size_t>(M * N);
  PartsBuffer buffer(mn * static_cast<size_t>(parts.count - 1));  // parts 1.. as dense (M, N)
  float* const parts_out = buffer.data();
  parallel_for_fixed(K, parts, [&](int64_t c, int64_t k0, int64_t k1) {
    const T* a = A + (ta ? k0 * lda : k0);
    const T* b = B + (tb ? k0 : k0 * ldb);
    if (c == 0) {
      Problem p{type, ta, tb, acc, 1, M, N, k1 - k0, lda, ldb, ldc, 0, 0, 0, bias != nullptr};
      run_one(p, a, b, C, bias);
    } else {
      Problem p{type, ta, tb, false, 1, M, N, k1 - k0, lda, ldb, N, 0, 0, 0, false};
      run_one(p, a, b, parts_out + mn * static_cast<size_t>(c - 1), nullptr);
    }
  });
  // C's rows += each scratch part's, in part order.
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t c = 1; c < parts.count; ++c)
      for (int64_t i = i0; i < i1; ++i) {
        const float* src = parts_out + mn * static_cast<size_t>(c - 1) + static_cast<size_t>(i * N);
        float* dst = C + i * ldc;
        for (int64_t j = 0; j < N; ++j) dst[j] += src[j];
      }
  });
}

template <class T>
void gemm_parallel(const char* op, dt type, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   const T* A, int64_t lda, const T* B, int64_t ldb, float* C, int64_t ldc,
                   bool acc, const float* bias = nullptr) {
  check_args(op, type, ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return empty_product(M, N, C, ldc, acc, bias);
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  auto block = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    Problem p{type, ta, tb, acc, 1, m1 - m0, n1 - n0, K, lda, ldb, ldc, 0, 0, 0, bias != nullptr};
    run_one(p, A + (ta ? m0 : m0 * lda), B + (tb ? n0 * ldb : n0), C + m0 * ldc + n0, bias ? bias + n0 : nullptr);
  };
  rethrow_as_kiln(op, M, N, K, [&] {
    if (flops < 2 * kMinFlopsPerTask) return block(0, M, 0, N);
    if (split_along_k(type, ta, M, N, K)) return gemm_split_k(type, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc, bias);
    // Blocks of rows of C wherever there are rows enough: they keep C (and A, unless
    // transposed) dense, which oneDNN 2.6's fast kernels (brgemm) require; a block of
    // columns has row stride N and goes to its "gemm:jit" code instead, measured 0.7-0.85x
    // on (512, 6400, 512) products (benchmarks, bench_gemm_bf16).
    const bool split_m = M >= 2 * kTile || M >= N;
    const int64_t extent = split_m ? M : N;
    const int64_t parts = std::min<int64_t>(std::clamp<int64_t>(extent / kBlockExtent, 2, kMaxBlocks),
                                            static_cast<int64_t>(flops / kMinFlopsPerTask));
    const int64_t size = ((extent + parts - 1) / parts + kTile - 1) / kTile * kTile;
    const FixedChunks blocks{(extent + size - 1) / size, size};
    parallel_for_fixed(extent, blocks, [&](int64_t, int64_t s, int64_t e) {
      if (split_m) block(s, e, 0, N);
      else block(0, M, s, e);
    });
  });
}

template <class T>
void gemm_batched(const char* op, dt type, int64_t batch, bool ta, bool tb, int64_t M, int64_t N,
                  int64_t K, const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                  int64_t stride_b, float* C, int64_t ldc, int64_t stride_c, bool accumulate) {
  KILN_CHECK(batch >= 0, op, "batch must not be negative, got ", batch);
  KILN_CHECK(stride_a >= 0 && stride_b >= 0 && stride_c >= 0, op,
             "batch strides must not be negative, got ", stride_a, ", ", stride_b, ", ", stride_c);
  KILN_CHECK(batch <= 1 || stride_c >= std::max<int64_t>(1, (M - 1) * ldc + N) || M == 0 || N == 0,
             op, "C's batch stride ", stride_c, " makes products overlap (M = ", M, ", N = ", N,
             ", ldc = ", ldc, ")");
  check_args(op, type, ta, tb, M, N, K, lda, ldb, ldc);
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < batch; ++i) empty_product(M, N, C + i * stride_c, ldc, accumulate);
    return;
  }
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  // Groups of products fixed by the shape, each one batched call.
  const int64_t group = std::max<int64_t>(1, static_cast<int64_t>(kGroupFlops / flops));
  const FixedChunks groups{(batch + group - 1) / group, group};
  rethrow_as_kiln(op, M, N, K, [&] {
    parallel_for_fixed(batch, groups, [&](int64_t, int64_t s, int64_t e) {
      // A and B both shared: oneDNN has no batched form for that (its batch dims
      // broadcast into C's only from one side), so the products go one by one.
      const bool one = e - s == 1 || (stride_a == 0 && stride_b == 0);
      Problem p{type, ta, tb, accumulate, one ? 1 : e - s, M, N, K, lda, ldb, ldc,
                one ? 0 : stride_a, one ? 0 : stride_b, one ? 0 : stride_c, false};
      if (!one && run_one(p, A + s * stride_a, B + s * stride_b, C + s * stride_c)) return;
      p = Problem{type, ta, tb, accumulate, 1, M, N, K, lda, ldb, ldc, 0, 0, 0, false};
      for (int64_t i = s; i < e; ++i) run_one(p, A + i * stride_a, B + i * stride_b, C + i * stride_c);
    });
  });
}

}  // namespace

bool available() { return runtime().ok; }

bool has_bf16() { return available() && runtime().has_bf16; }

bool has_avx512() { return available() && isa_has(runtime().isa, dnnl_cpu_isa_avx512_core); }

bool has_native_bf16() { return has_bf16() && isa_has(runtime().isa, dnnl_cpu_isa_avx512_core_bf16); }

std::string describe() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream os;
  os << "oneDNN " << v->major << "." << v->minor << "." << v->patch;
  if (!available()) {
    os << ", not usable: " << runtime().error;
    return os.str();
  }
  os << ", ISA " << isa_name(runtime().isa) << ", bf16 GEMM: "
     << (has_native_bf16() ? "native" : runtime().has_bf16 ? "emulated, slower than fp32" : "none for this CPU");
  return os.str();
}

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  gemm_parallel("gemm_bf16", dt::bf16, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_bf16_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                    const uint16_t* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  KILN_CHECK(bias != nullptr, "gemm_bf16_bias", "the bias is a null pointer");
  gemm_parallel("gemm_bf16_bias", dt::bf16, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, false, bias);
}

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  gemm_parallel("gemm_f32", dt::f32, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

void gemm_f32_bias(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                   const float* B, int64_t ldb, const float* bias, float* C, int64_t ldc) {
  KILN_CHECK(bias != nullptr, "gemm_f32_bias", "the bias is a null pointer");
  gemm_parallel("gemm_f32_bias", dt::f32, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, false, bias);
}

void gemm_bf16_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                       const uint16_t* A, int64_t lda, int64_t stride_a, const uint16_t* B,
                       int64_t ldb, int64_t stride_b, float* C, int64_t ldc, int64_t stride_c,
                       bool accumulate) {
  gemm_batched("gemm_bf16_batched", dt::bf16, batch, ta, tb, M, N, K, A, lda, stride_a, B, ldb,
               stride_b, C, ldc, stride_c, accumulate);
}

void gemm_f32_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                      const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb,
                      int64_t stride_b, float* C, int64_t ldc, int64_t stride_c, bool accumulate) {
  gemm_batched("gemm_f32_batched", dt::f32, batch, ta, tb, M, N, K, A, lda, stride_a, B, ldb,
               stride_b, C, ldc, stride_c, accumulate);
}

CacheStats cache_stats() { return cache().stats(); }

}  // namespace kiln::cpu::onednn
