#pragma once
// The CUDA backend plug-in as the rest of Kiln sees it. No CUDA header here: core/ and
// backend.cpp include this in a CUDA build (KILN_WITH_CUDA) to reach the backend by
// direct calls. A CPU-only build compiles none of backend/cuda/.
//
// Execution model: one stream per GPU, created on first use; every kernel, cuBLAS call
// and copy of a device runs on its stream, in the order the host issued it. That is
// what lets the caching allocator hand a freed block to the next tensor at once (all
// later uses are queued behind the earlier ones), and the host waits only where it
// must read a result (a copy to the CPU, an index check).
#include <cstdint>
#include <string>

#include "../backend.h"
#include "../../core/allocator.h"

namespace kiln::cuda {

class CudaBackend final : public Backend {
 public:
  Device device() const override { return Device(DeviceType::CUDA, 0); }  // it serves every cuda:N
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) override;
  void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out,
              const Tensor* indices) override;
  using Backend::matmul;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) override;
  // cuBLASLt with the bias in its epilogue under set_preferred_blas_library(Cublaslt).
  void matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override;
  // Autocast's mixed product through cublasGemmStridedBatchedEx, and attention's mixed
  // form (bfloat16 q, k, v; float32 scores, outputs and gradients) on such products.
  // Also add_layer_norm's and relu_dropout's bfloat16 copies, written with each element.
  bool supports(Kernel kernel, DType in, DType out) const override;
  void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) override;
  void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log,
                        const Tensor& grad_x) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                      double eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
                      const Tensor& rstd, const Tensor& low) override;
  void embedding(const Tensor& weight, const Tensor& indices, const Tensor& out) override;
  void embedding_backward(const Tensor& g, const Tensor& indices, int64_t padding_idx,
                          const Tensor& grad_weight) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& class_weight, int64_t ignore_index,
                     double label_smoothing, const Tensor& losses, const Tensor& weights,
                     const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& class_weight,
                              int64_t ignore_index, double label_smoothing, const Tensor& lse,
                              const Tensor& g_row, const Tensor& grad_logits) override;
  void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamStepParams& hp) override;
  void adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) override;
  void uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) override;
  void normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) override;
  void bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) override;
  void randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) override;
  void dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) override;
  // Fused (cuda_dropout.cu); under autocast the backward reads y's bfloat16 copy.
  void relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                    const Tensor& low) override;
  void relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                 double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const Tensor& out, const Tensor& lse, double scale, double dropout_p, uint64_t seed,
                          uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                          const Tensor& grad_v) override;
};

// The backend / allocator of a CUDA device, after checking that it is usable; else
// throws "[device] CUDA is built but no GPU is usable (asked for cuda:0): <reason>" or
// "[device] cuda:3 does not exist (this machine has 1 CUDA device)".
Backend& backend_for_device(Device device);
Allocator& allocator_for_device(Device device);

// Bytes the caching allocator of a device keeps for reuse (0 before its first use).
int64_t cached_bytes(Device device);
// Applies core/cuda.h's set_cache_limit to the GPUs' allocators made so far (SIZE_MAX:
// none); one made later reads cache_limit() itself.
void set_cache_limit_bytes(size_t bytes);

// What core/cuda.h reports in a CUDA build. The first call starts the CUDA runtime.
const std::string& runtime_error();  // "" when at least one GPU is usable
int usable_device_count();
void synchronize_devices();
void release_cached_blocks();
// For kiln::config(): the CUDA and cuBLAS versions and the GPUs (or why none is usable).
std::string describe();

}  // namespace kiln::cuda
