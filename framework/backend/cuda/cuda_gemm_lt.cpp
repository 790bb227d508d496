// Unbatched products through cuBLASLt: the row-major product out (M, N) = a @ b is the
// column-major one outᵀ (N, M) = bᵀ · aᵀ, as in cuda_matmul.cu: cuBLASLt's A is Kiln's b
// (m = N rows of D), its B is Kiln's a (n = M columns), and a linear's bias, one value per
// output feature, is the per-row bias of D that CUBLASLT_EPILOGUE_BIAS adds.
//
// A plan (the matmul descriptor, the three matrix layouts and the heuristic's first
// algorithm, or under set_blas_tuning the fastest of its first kTuneCandidates as timed
// on this problem) is made once per problem: sizes, leading dimensions, transposes,
// dtypes, epilogue, tuning and the alignment of every pointer (the heuristic picks
// kernels by it), and kept for the process. A call then sets the bias pointer and
// launches.
#include "backend/cuda/cuda_gemm_lt.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_device.h"
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

// Under set_blas_tuning: how many of the heuristic's algorithms are timed, and how many
// launches of each (after one to warm up) the timing takes.
constexpr int kTuneCandidates = 16;
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
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  if (p.first) cublasLtMatrixLayoutDestroy(p.first);
  if (p.second) cublasLtMatrixLayoutDestroy(p.second);
  if (p.result) cublasLtMatrixLayoutDestroy(p.result);
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
  KILN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), "matmul");
}

template <class V>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), "matmul");
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
  KILN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
                    "matmul");
  return l;
}

// One launch of `algo` on the problem, writing `out` (C and D); beta 0 or 1 as the call's.
cublasStatus_t launch(const LtProblem& pr, const LtPlan& p, const cublasLtMatmulAlgo_t& algo, float* out,
                      float beta) {
  const float alpha = 1;
  return cublasLtMatmul(lt_handle(pr.device), p.desc, &alpha, pr.first, p.first, pr.second, p.second, &beta, out,
                        p.result, out, p.result, &algo, blas_workspace(pr.device), kBlasWorkspaceBytes,
                        stream(pr.device));
}

// A CUDA event for the tuning's timing, destroyed with its scope.
struct TuneEvent {
  cudaEvent_t e = nullptr;
  TuneEvent() { KILN_CUDA_CHECK(cudaEventCreate(&e), "matmul"); }
  ~TuneEvent() { cudaEventDestroy(e); }
  TuneEvent(const TuneEvent&) = delete;
  TuneEvent& operator=(const TuneEvent&) = delete;
};

// The index of the fastest of `found` on this problem (set_blas_tuning): each candidate
// launched once to warm up, then kTuneLaunches times between two events, into a scratch
// output, so the call's own output (which an accumulating product reads) is untouched.
// A candidate whose launch fails is passed over; -1 when every one fails.
int fastest(const LtProblem& pr, const LtPlan& p, const std::vector<cublasLtMatmulHeuristicResult_t>& found) {
  const Tensor scratch =
      Tensor::empty({pr.m * pr.n}, TensorOptions(kFloat32).device(Device(DeviceType::CUDA, pr.device)));
  float* out = scratch.data<float>();
  const TuneEvent start, stop;
  int best = -1;
  float best_ms = std::numeric_limits<float>::infinity();
  cudaStream_t s = stream(pr.device);
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = launch(pr, p, found[i].algo, out, 0) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(start.e, s) == cudaSuccess;
    for (int r = 0; ok && r < kTuneLaunches; ++r) ok = launch(pr, p, found[i].algo, out, 0) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(stop.e, s) == cudaSuccess && cudaEventSynchronize(stop.e) == cudaSuccess;
    float ms = 0;
    if (ok && cudaEventElapsedTime(&ms, start.e, stop.e) == cudaSuccess && ms < best_ms) {
      best_ms = ms;
      best = static_cast<int>(i);
    }
  }
  (void)cudaGetLastError();  // a failed candidate's launch is not the caller's error
  return best;
}

LtPlan make_plan(const LtProblem& pr) {
  LtPlan p;
  const std::array<int64_t, 4> al = pr.alignments();
  const cudaDataType_t in = pr.low ? CUDA_R_16BF : CUDA_R_32F;
  try {
    KILN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul");
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
    KILN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref), "matmul");
    std::vector<cublasLtMatmulHeuristicResult_t> found(pr.tuned ? kTuneCandidates : 1);
    int count = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    try {
      set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kBlasWorkspaceBytes));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(al[0]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(al[1]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(al[2]));
      set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(al[2]));
      st = cublasLtMatmulAlgoGetHeuristic(lt_handle(pr.device), p.desc, p.first, p.second, p.result, p.result, pref,
                                          static_cast<int>(found.size()), found.data(), &count);
    } catch (...) {
      cublasLtMatmulPreferenceDestroy(pref);
      throw;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    // NOT_SUPPORTED (or no result): no kernel for this problem; anything else is an error.
    if (st != CUBLAS_STATUS_NOT_SUPPORTED) KILN_CUBLAS_CHECK(st, "matmul");
    found.resize(st == CUBLAS_STATUS_SUCCESS ? static_cast<size_t>(std::max(count, 0)) : 0);
    const int pick = found.size() > 1 ? fastest(pr, p, found) : found.empty() ? -1 : 0;
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
