#include "backend/backend.h"

#include <memory>

#include "backend/bfloat16_staged.h"
#include "backend/cpu/cpu_backend.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln {
namespace {
Backend* g_cuda_backend = nullptr;
std::unique_ptr<BFloat16Staged> g_cuda_staged;  // g_cuda_backend's wrapper
}

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

void Backend::matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  // The bias as (M, N) with row stride 0 (a view made here: no op below ops/).
  auto rows = std::make_shared<TensorImpl>();
  rows->storage = bias.impl()->storage;
  rows->shape = out.shape();
  rows->strides = {0, bias.stride(0)};
  rows->offset = bias.offset();
  rows->dtype = bias.dtype();
  copy(Tensor(std::move(rows)), out);
  matmul(a, b, out, /*accumulate=*/true);
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

void Backend::round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) {
  check_round_bf16_and_column_sums(x, low, sums);
  copy(x, low);
  reduce(ReduceOp::Sum, x, {0}, sums, nullptr);
}

void Backend::relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y) {
  unary(UnaryOp::Relu, x, y, 0, 0);
  dropout(y, seed, block, p, y);  // elementwise, so in place is safe
}

void Backend::add_layer_norm_and_round_bf16(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                            const Tensor& bias, double eps, const Tensor& sum, const Tensor& y,
                                            const Tensor& mean, const Tensor& rstd, const Tensor& low) {
  add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd);
  copy(y, low);
}

void Backend::relu_dropout_and_round_bf16(const Tensor& x, uint64_t seed, uint64_t block, double p,
                                          const Tensor& y, const Tensor& low) {
  relu_dropout(x, seed, block, p, y);
  copy(y, low);
}

void Backend::relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) {
  binary(BinaryOp::ReluBackward, g, y, gx);
  unary(UnaryOp::MulScalar, gx, gx, 1.0 / (1.0 - p), 0);
}

void Backend::adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) {
  for (const AdamTensors& t : params) adam_step(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.max_exp_avg_sq, hp);
}

// Every backend is handed out wrapped in BFloat16Staged (bfloat16_staged.h), which runs
// kernels on float32 copies of bfloat16 tensors and passes everything else through.
Backend& backend_for(Device device) {
  // The wrappers are never destroyed (as the CUDA backend): a static object's destructor
  // that runs an op at exit still finds them.
  if (device.is_cpu()) {
    static BFloat16Staged* cpu = new BFloat16Staged(cpu::cpu_backend());
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

void register_backend(DeviceType type, Backend* backend) {
  if (type != DeviceType::CUDA) return;
  g_cuda_backend = backend;
  g_cuda_staged = backend ? std::make_unique<BFloat16Staged>(*backend) : nullptr;
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
