#include "backend/backend.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/bfloat16_staged.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/reference/reference_backend.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln {
namespace {
Backend* g_cuda_backend = nullptr;
std::unique_ptr<BFloat16Staged> g_cuda_staged;  // g_cuda_backend's wrapper
std::unique_ptr<BFloat16Staged> g_cpu_staged;   // a registered CPU backend's wrapper
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

bool supports_autocast_forms(Kernel kernel, DType in, DType out) {
  if (in != kBFloat16 && out != kBFloat16) return true;
  switch (kernel) {
    case Kernel::Matmul:
    case Kernel::Attention:
      return in == kBFloat16 && out == kFloat32;
    case Kernel::AddLayerNorm:
    case Kernel::ReluDropout:
      return in == kFloat32 && out == kBFloat16;
  }
  return false;
}

void check_round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) {
  const char* op = "round_bf16_and_column_sums";
  KILN_CHECK(x.dim() == 2 && x.dtype() == kFloat32 && x.is_contiguous(), op,
             "x must be a contiguous 2-D float32 tensor, got shape ", shape_str(x.shape()), " and dtype ",
             dtype_name(x.dtype()));
  KILN_CHECK(low.shape() == x.shape() && low.dtype() == kBFloat16 && low.is_contiguous(), op,
             "low must be contiguous bfloat16 of x's shape ", shape_str(x.shape()), ", got shape ",
             shape_str(low.shape()), " and dtype ", dtype_name(low.dtype()));
  KILN_CHECK(sums.dim() == 1 && sums.size(0) == x.size(1) && sums.dtype() == kFloat32, op,
             "sums must be float32 of shape ", shape_str({x.size(1)}), ", got shape ", shape_str(sums.shape()), " and dtype ",
             dtype_name(sums.dtype()));
  KILN_CHECK(low.device() == x.device() && sums.device() == x.device(), op, "expected all tensors on ",
             x.device().str(), ", got ", low.device().str(), " and ", sums.device().str());
}

namespace {

// The CPU's backend: KILN_CPU_BACKEND=reference picks the reference backend (the required
// core in plain loops), unset or "cpu" the CPU backend; register_backend may replace it.
bool reference_from_env() {
  const char* name = std::getenv("KILN_CPU_BACKEND");
  const std::string choice = name ? name : "";
  if (choice.empty() || choice == "cpu") return false;
  KILN_CHECK(choice == "reference", "KILN_CPU_BACKEND", "unknown backend '", choice,
             "' (expected cpu or reference)");
  return true;
}

Backend& cpu_backend_from_env() {
  if (reference_from_env()) return reference_backend();
  return cpu::cpu_backend();
}

}  // namespace

// Every backend is handed out wrapped in BFloat16Staged (bfloat16_staged.h), which runs
// kernels on float32 copies of bfloat16 tensors and passes everything else through.
Backend& backend_for(Device device) {
  // The wrappers are never destroyed (as the CUDA backend): a static object's destructor
  // that runs an op at exit still finds them.
  if (device.is_cpu()) {
    if (g_cpu_staged) return *g_cpu_staged;
    static BFloat16Staged* cpu = new BFloat16Staged(cpu_backend_from_env());
    return *cpu;
  }
#ifdef KILN_WITH_CUDA
  // The built-in CUDA backend (checks that the device is usable; one object for every
  // device), unless a plug-in registered another one.
  if (g_cuda_backend == nullptr) {
    Backend& inner = cuda::backend_for_device(device);
    static BFloat16Staged* cuda = new BFloat16Staged(inner);
    return *cuda;
  }
#endif
  KILN_CHECK(g_cuda_backend != nullptr, "device",
             "CUDA is not available in this build of Kiln (asked for ", device.str(), ")");
  return *g_cuda_staged;
}

const char* cpu_backend_name() {
  if (g_cpu_staged) return "registered";
  return reference_from_env() ? "reference (the required kernels in plain loops)" : "cpu";
}

void register_backend(DeviceType type, Backend* backend) {
  std::unique_ptr<BFloat16Staged> staged = backend ? std::make_unique<BFloat16Staged>(*backend) : nullptr;
  if (type == DeviceType::CPU) {
    // The wrapper replaced is kept alive: a backend_for reference taken before may still be in use.
    static std::vector<std::unique_ptr<BFloat16Staged>> retired;
    if (g_cpu_staged) retired.push_back(std::move(g_cpu_staged));
    g_cpu_staged = std::move(staged);
    return;
  }
  g_cuda_backend = backend;
  g_cuda_staged = std::move(staged);
}

Backend& backend_of(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else {
      KILN_CHECK(t->device() == first->device(), op,
                 "expected all tensors on the same device, got ", first->device().str(), " and ",
                 t->device().str());
    }
  }
  return backend_for(first ? first->device() : kCPU);
}

}  // namespace kiln
