// Unbatched products through cuBLASLt: the row-major product out (M, N) = a @ b is the
// column-major one outᵀ (N, M) = bᵀ · aᵀ, as in cuda_matmul.cu: cuBLASLt's A is Kiln's b
// (m = N rows of D), its B is Kiln's a (n = M columns), and a linear's bias, one value per
// output feature, is the per-row bias of D that CUBLASLT_EPILOGUE_BIAS adds.
//
// A plan (the matmul descriptor, the three matrix layouts and the heuristic's first
// algorithm, or under set_blas_tuning the fastest of a wider set of candidates as timed
// on this problem: tuning_candidates) is made once per problem: sizes, leading dimensions, transposes,
// dtypes, epilogue, tuning and the alignment of every pointer (the heuristic picks
// kernels by it), and kept for the process. A call then sets the bias pointer and
// launches.
#include "backend/cuda/cuda_gemm_lt.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/env_flag.h"
#include "backend/matrix_layout.h"
#include "core/cuda.h"

namespace kiln::cuda {
namespace {

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: the heuristic had no algorithm (the caller takes cuBLAS)
};

// device, bfloat16 operands, bias, tuned, op_first, op_second, m, n, k, lda, ldb, and
// the alignments of the first operand, the second, the output and the bias.
using LtKey = std::array<int64_t, 15>;

// Under set_blas_tuning: how many of the heuristic's algorithms are asked for, how many
// candidates at most are timed once those are widened (widen), and how many launches of
// each (after one to warm up) the timing takes.
constexpr int kTuneCandidates = 16;
constexpr size_t kMaxTimedCandidates = 96;
constexpr int kTuneLaunches = 5;

// Plans of every device; a few per model in training, more where sizes vary (decoding),
// so past kMaxPlans the map starts over.
constexpr size_t kMaxPlans = 1024;
std::mutex g_mutex;
std::map<LtKey, LtPlan>& plans() {
  static auto* m = new std::map<LtKey, LtPlan>();  // never destroyed: see per_device
  return *m;
}

void destroy(LtPlan& p) {
  if (p.desc) cublas_api().cublasLtMatmulDescDestroy(p.desc);
  if (p.first) cublas_api().cublasLtMatrixLayoutDestroy(p.first);
  if (p.second) cublas_api().cublasLtMatrixLayoutDestroy(p.second);
  if (p.result) cublas_api().cublasLtMatrixLayoutDestroy(p.result);
  p = LtPlan{};
}

// The alignment in bytes (1 to 256, cuBLASLt's default assumption) of a matrix at p
// whose columns are ld_bytes apart.
int64_t alignment(const void* p, int64_t ld_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(p) | static_cast<uintptr_t>(ld_bytes) | uintptr_t{256};
  return static_cast<int64_t>(x & (~x + 1));
}

template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  KILN_CUBLAS_CHECK(cublas_api().cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "matmul");
}

template <class V>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  KILN_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), "matmul");
}

// The problem of one call, in cuBLASLt's (column-major) terms.
struct LtProblem {
  int device;
  bool low;    // bfloat16 operands
  bool tuned;  // the fastest of the heuristic's candidates, timed (set_blas_tuning)
  const void *first, *second, *bias;
  float* out;
  cublasOperation_t op_first, op_second;
  int64_t m, n, k, lda, ldb;

  // The alignments in bytes the heuristic is told: the first operand's, the second's,
  // the output's (C and D) and the bias's (0: none).
  std::array<int64_t, 4> alignments() const {
    const int64_t es = low ? 2 : 4;
    return {alignment(first, lda * es), alignment(second, ldb * es), alignment(out, m * 4),
            bias ? alignment(bias, 0) : 0};
  }
  LtKey key() const {
    const std::array<int64_t, 4> al = alignments();
    return {device, low, bias != nullptr, tuned, op_first, op_second, m, n, k, lda, ldb, al[0], al[1], al[2], al[3]};
  }
};

// The layout of an operand X with op(X) (rows, cols): X is stored (cols, rows) when op
// transposes it. (m, k) for the first operand, (k, n) for the second.
cublasLtMatrixLayout_t layout(cudaDataType_t type, cublasOperation_t op, int64_t rows, int64_t cols, int64_t ld) {
  if (op != CUBLAS_OP_N) std::swap(rows, cols);
  cublasLtMatrixLayout_t l = nullptr;
  KILN_CUBLAS_CHECK(
      cublas_api().cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
      "matmul");
  return l;
}

// One launch of `algo` on the problem, writing `out` (C and D); beta 0 or 1 as the call's.
cublasStatus_t launch(const LtProblem& pr, const LtPlan& p, const cublasLtMatmulAlgo_t& algo, float* out,
                      float beta) {
  const float alpha = 1;
  return cublas_api().cublasLtMatmul(lt_handle(pr.device), p.desc, &alpha, pr.first, p.first, pr.second, p.second,
                                     &beta, out, p.result, out, p.result, &algo, blas_workspace(pr.device),
                                     kBlasWorkspaceBytes, stream(pr.device));
}

// A CUDA event for the tuning's timing, destroyed with its scope.
struct TuneEvent {
  cudaEvent_t e = nullptr;
  TuneEvent() { KILN_CUDA_CHECK(cudaEventCreate(&e), "matmul"); }
  ~TuneEvent() { cudaEventDestroy(e); }
  TuneEvent(const TuneEvent&) = delete;
  TuneEvent& operator=(const TuneEvent&) = delete;
};

// The milliseconds of kTuneLaunches launches of each of `found` on this problem
// (set_blas_tuning), infinity for one that failed or whose state is not success: each
// launched once to warm up, then kTuneLaunches times between two events, into a scratch
// output, so the call's own output (which an accumulating product reads) is untouched.
std::vector<float> time_candidates(const LtProblem& pr, const LtPlan& p,
                                   const std::vector<cublasLtMatmulHeuristicResult_t>& found) {
  const Tensor scratch =
      Tensor::empty({pr.m * pr.n}, TensorOptions(kFloat32).device(Device(DeviceType::CUDA, pr.device)));
  float* out = scratch.data<float>();
  const TuneEvent start, stop;
  std::vector<float> times(found.size(), std::numeric_limits<float>::infinity());
  cudaStream_t s = stream(pr.device);
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = launch(pr, p, found[i].algo, out, 0) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(start.e, s) == cudaSuccess;
    for (int r = 0; ok && r < kTuneLaunches; ++r) ok = launch(pr, p, found[i].algo, out, 0) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(stop.e, s) == cudaSuccess && cudaEventSynchronize(stop.e) == cudaSuccess;
    float ms = 0;
    if (ok && cudaEventElapsedTime(&ms, start.e, stop.e) == cudaSuccess) times[i] = ms;
  }
  (void)cudaGetLastError();  // a failed candidate's launch is not the caller's error
  return times;
}

// An algorithm's configuration, for telling candidates apart and for the tuning's log:
// id, tile, split-K count, reduction scheme, CTA swizzling, custom option, stages, inner
// shape, cluster shape.
using AlgoConfig = std::array<int64_t, 9>;

template <class V>
int64_t config_value(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  V v{};
  size_t written = 0;
  if (cublas_api().cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return static_cast<int64_t>(v);
}

AlgoConfig config_of(const cublasLtMatmulAlgo_t& a) {
  return {config_value<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID),
          config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
          config_value<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
          config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
          config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
          config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
          config_value<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
          config_value<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
          config_value<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)};
}

// The values of a list capability (tile ids, stage ids) of an algorithm; empty when it
// has none or the query fails.
std::vector<uint32_t> capability_list(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublas_api().cublasLtMatmulAlgoCapGetAttribute(&a, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<uint32_t> v(bytes / sizeof(uint32_t));
  if (cublas_api().cublasLtMatmulAlgoCapGetAttribute(&a, attr, v.data(), v.size() * sizeof(uint32_t), &bytes) !=
      CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

template <class V>
V capability(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t attr) {
  V v{};
  size_t written = 0;
  if (cublas_api().cublasLtMatmulAlgoCapGetAttribute(&a, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS)
    return V{};
  return v;
}

template <class V>
bool set_config(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, V v) {
  return cublas_api().cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS;
}

// Under set_blas_tuning the heuristic's candidates are widened before timing: each of
// their algorithms also with its other tile shapes, and with the K dimension split in 2
// or 4 (with each reduction scheme it supports). The reason: the heuristic ranks by a
// model, and on an H200 its first pick for a 6400 x 512 x 512 float32 product ran 100
// blocks on 132 multiprocessors at a third of the rate of the step's other GEMMs, with
// none of its first 16 picks faster. Every added configuration passes
// cublasLtMatmulAlgoCheck with a workspace that fits; at most kMaxTimedCandidates in all.
void widen(const LtProblem& pr, const LtPlan& p, std::vector<cublasLtMatmulHeuristicResult_t>& found) {
  std::set<AlgoConfig> seen;
  for (const auto& f : found) seen.insert(config_of(f.algo));
  auto add = [&](const cublasLtMatmulAlgo_t& a) {
    const AlgoConfig config = config_of(a);
    if (found.size() >= kMaxTimedCandidates || seen.count(config)) return false;
    cublasLtMatmulHeuristicResult_t r{};
    if (cublas_api().cublasLtMatmulAlgoCheck(lt_handle(pr.device), p.desc, p.first, p.second, p.result, p.result, &a,
                                             &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > kBlasWorkspaceBytes)
      return false;
    seen.insert(config);
    r.algo = a;
    r.state = CUBLAS_STATUS_SUCCESS;
    found.push_back(r);
    return true;
  };
  const size_t heuristic = found.size();
  for (size_t i = 0; i < heuristic; ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
    const cublasLtMatmulAlgo_t base = found[i].algo;
    const std::vector<uint32_t> stages = capability_list(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    for (uint32_t tile : capability_list(base, CUBLASLT_ALGO_CAP_TILE_IDS)) {
      cublasLtMatmulAlgo_t a = base;
      if (!set_config(a, CUBLASLT_ALGO_CONFIG_TILE_ID, tile)) continue;
      if (add(a)) continue;
      // The base's stage count may not suit this tile: the first stage count that does.
      for (uint32_t st : stages)
        if (set_config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, st) && add(a)) break;
    }
    if (capability<int32_t>(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) == 0) continue;
    const auto schemes = capability<uint32_t>(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    for (int32_t splits : {2, 4}) {
      for (uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                              CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
        if (!(schemes & scheme)) continue;
        cublasLtMatmulAlgo_t a = base;
        if (set_config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splits) &&
            set_config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme))
          add(a);
      }
    }
  }
}

// KILN_CUDA_BLAS_TUNING_LOG=1: one line on stderr per tuned problem, the heuristic's first
// pick and the fastest, each with its configuration (config_of) and time of
// kTuneLaunches launches, for finding which shapes the heuristic serves badly.
void log_tuning(const LtProblem& pr, const std::vector<cublasLtMatmulHeuristicResult_t>& found,
                const std::vector<float>& ms, int pick) {
  static const bool on = env_flag("KILN_CUDA_BLAS_TUNING_LOG");
  if (!on || found.empty() || pick < 0) return;
  auto text = [&](size_t i) {
    const AlgoConfig c = config_of(found[i].algo);
    char buf[160];
    std::snprintf(buf, sizeof buf, "algo %lld tile %lld splitk %lld red %lld swz %lld stages %lld waves %.2f %.4f ms",
                  static_cast<long long>(c[0]), static_cast<long long>(c[1]), static_cast<long long>(c[2]),
                  static_cast<long long>(c[3]), static_cast<long long>(c[4]), static_cast<long long>(c[6]),
                  static_cast<double>(found[i].wavesCount), static_cast<double>(ms[i]));
    return std::string(buf);
  };
  std::fprintf(stderr, "blas tuning: m %lld n %lld k %lld op %d%d %s%s: first [%s] best [%s] of %zu\n",
               static_cast<long long>(pr.m), static_cast<long long>(pr.n), static_cast<long long>(pr.k),
               static_cast<int>(pr.op_first), static_cast<int>(pr.op_second), pr.low ? "bf16" : "f32",
               pr.bias ? " bias" : "", text(0).c_str(), text(static_cast<size_t>(pick)).c_str(), found.size());
}

// The index of the fastest of `found` (after widening) on this problem; -1 when none ran.
int fastest(const LtProblem& pr, const LtPlan& p, std::vector<cublasLtMatmulHeuristicResult_t>& found) {
  widen(pr, p, found);
  const std::vector<float> ms = time_candidates(pr, p, found);
  int best = -1;
  for (size_t i = 0; i < ms.size(); ++i)
    if (ms[i] < std::numeric_limits<float>::infinity() && (best < 0 || ms[i] < ms[static_cast<size_t>(best)]))
      best = static_cast<int>(i);
  log_tuning(pr, found, ms, best);
  return best;
}

LtPlan make_plan(const LtProblem& pr) {
  LtPlan p;
  const std::array<int64_t, 4> al = pr.alignments();
  const cudaDataType_t in = pr.low ? CUDA_R_16BF : CUDA_R_32F;
  try {
    KILN_CUBLAS_CHECK(cublas_api().cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul");
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(pr.op_first));
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(pr.op_second));
    if (pr.bias) {
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, pr.bias);  // its alignment guides the heuristic
    }
    p.first = layout(in, pr.op_first, pr.m, pr.k, pr.lda);
    p.second = layout(in, pr.op_second, pr.k, pr.n, pr.ldb);
    p.result = layout(CUDA_R_32F, CUBLAS_OP_N, pr.m, pr.n, pr.m);

    cublasLtMatmulPreference_t pref = nullptr;
    KILN_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceCreate(&pref), "matmul");
    std::vector<cublasLtMatmulHeuristicResult_t> found(pr.tuned ? kTuneCandidates : 1);
    int count = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    try {
      set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kBlasWorkspaceBytes));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(al[0]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(al[1]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(al[2]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(al[2]));
      st = cublas_api().cublasLtMatmulAlgoGetHeuristic(lt_handle(pr.device), p.desc, p.first, p.second, p.result,
                                                       p.result, pref, static_cast<int>(found.size()), found.data(),
                                                       &count);
    } catch (...) {
      cublas_api().cublasLtMatmulPreferenceDestroy(pref);
      throw;
    }
    cublas_api().cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED (or no result): no kernel for this problem; anything else is an error.
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) KILN_CUBLAS_CHECK(st, "matmul");
    found.resize(st == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(std::max(count, 0)) : 0);
    const int pick = pr.tuned && !found.empty() ? fastest(pr, p, found) : found.empty() ? -1 : 0;
    p.usable = pick >= 0 && found[pick].state == CUBLAS_STATUS_SUCCESS;
    if (p.usable) p.algo = found[pick].algo;
  } catch (...) {
    destroy(p);
    throw;
  }
  return p;
}

bool eligible(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out) {
  const int64_t nd = out.dim();
  if (nd < 2 || a.dim() != nd || b.dim() != nd || out.dtype() != kFloat32 || !out.is_contiguous()) return false;
  const int64_t M = out.size(nd - 2), N = out.size(nd - 1), K = a.size(nd - 1);
  if (M == 0 || N == 0 || K == 0 || out.numel() != M * N) return false;
  const bool f32 = a.dtype() == kFloat32 && b.dtype() == kFloat32;
  const bool mixed = a.dtype() == kBFloat16 && b.dtype() == kBFloat16;
  if (!f32 && !mixed) return false;
  // The heuristic is told no alignment for the bias, and the epilogue's loads want 16
  // bytes: a bias off that takes the cuBLAS path.
  return !bias || (bias->dtype() == kFloat32 && bias->is_contiguous() && bias->numel() == N &&
                   alignment(bias->data_ptr(), 0) >= 16);
}

}  // namespace

bool lt_matmul(const Tensor& a, const Tensor& b, const Tensor* bias, const Tensor& out, bool accumulate) {
  if (preferred_blas_library() != BlasLibrary::Cublaslt || !eligible(a, b, bias, out)) return false;
  MatLayout la, lb;
  if (!blas_layout(a, la) || !blas_layout(b, lb)) return false;
  const int64_t nd = out.dim();
  LtProblem pr;
  pr.device = out.device().index;
  pr.low = a.dtype() == kBFloat16;
  pr.tuned = blas_tuning();
  pr.first = b.data_ptr();
  pr.second = a.data_ptr();
  pr.bias = bias ? bias->data_ptr() : nullptr;
  pr.out = out.data<float>();
  pr.op_first = lb.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  pr.op_second = la.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  pr.m = out.size(nd - 1);
  pr.n = out.size(nd - 2);
  pr.k = a.size(nd - 1);
  pr.lda = lb.ld;
  pr.ldb = la.ld;

  DeviceGuard guard(pr.device);
  std::lock_guard<std::mutex> lock(g_mutex);  // the plans, and a plan's bias pointer up to its launch
  const LtKey key = pr.key();
  auto it = plans().find(key);
  if (it == plans().end()) {
    if (plans().size() >= kMaxPlans) {
      for (auto& [k, p] : plans()) destroy(p);
      plans().clear();
    }
    it = plans().emplace(key, make_plan(pr)).first;
  }
  LtPlan& p = it->second;
  if (!p.usable) return false;
  if (pr.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, pr.bias);
  KILN_CUBLAS_CHECK(launch(pr, p, p.algo, pr.out, accumulate ? 1.0f : 0.0f), "matmul");
  return true;
}

}  // namespace kiln::cuda
