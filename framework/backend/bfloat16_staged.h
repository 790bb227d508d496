#pragma once
// The Backend that backend_for hands out: a decorator of a device's backend that runs
// every kernel whose tensors include a bfloat16 one on float32 stand-ins, as PyTorch's
// CPU kernels compute bfloat16 (in float32, each result rounded once on store):
//   - bfloat16 inputs are copied to float32 (a broadcast dim, stride 0, is copied once
//     and stays stride 0 in the copy);
//   - bfloat16 outputs are float32 temporaries, copied back into the caller's tensors
//     (rounded to nearest even) once the kernel has returned; outputs the kernel also
//     reads (an accumulating matmul, scatter's self, Adam's state) are copied in first;
//   - the same view passed twice (an in-place kernel) gets one stand-in.
// A call with no bfloat16 tensor goes straight to the device's backend, so float32 and
// float64 pay one virtual call and a dtype test per tensor. copy and fill always go
// straight through: they are the kernels that know bfloat16 (every backend's). A form a
// device backend takes itself (Backend::supports: bfloat16 matmul, autocast's mixed
// matmul and attention, the bfloat16 copies add_layer_norm and relu_dropout write) goes
// through unstaged; for another backend only its bfloat16 operands are staged.
//
// One place for every op and every device: no kernel is written twice, the CUDA backend
// (and host_staged.cpp's defaults) work unchanged, and a reduction's float32 result is
// rounded once. The price is the conversions' memory traffic (a bfloat16 op reads and
// writes about three times the bytes a native kernel would), paid only by bfloat16.
#include "backend.h"

namespace kiln {

// t in float32 on be's device: a bfloat16 t widened (exact). A dim broadcast with stride
// 0 is copied once and keeps stride 0 in the copy, so a bias expanded over a batch costs
// its own size, not the batch's.
Tensor float32_copy(Backend& be, const Tensor& t);

class BFloat16Staged final : public Backend {
 public:
  explicit BFloat16Staged(Backend& inner) : inner_(inner) {}
  Backend& inner() const { return inner_; }

  Device device() const override { return inner_.device(); }
  void copy(const Tensor& src, const Tensor& dst) override { inner_.copy(src, dst); }
  void fill(const Tensor& dst, double value) override { inner_.fill(dst, value); }
  void arange(const Tensor& out, double start, double step) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) override;
  void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out,
              const Tensor* indices) override;
  using Backend::matmul;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) override;
  // Every form: what the inner backend does not take, this wrapper stages.
  bool supports(Kernel, DType, DType) const override { return true; }
  void matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override;
  // Knows bfloat16 itself, as copy does.
  void round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) override {
    inner_.round_bf16_and_column_sums(x, low, sums);
  }
  void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) override;
  void softmax_backward(const Tensor& y, const Tensor& g, int64_t dim, bool log, const Tensor& grad_x) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override;
  void add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                      double eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
                      const Tensor& rstd, const Tensor& low) override;
  // Inference kernels: float32 and float64 pass through; bfloat16 runs the composed
  // default on this wrapper's staged core.
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y) override {
    if (x.dtype() == kBFloat16) return Backend::rms_norm(x, weight, eps, y);
    inner_.rms_norm(x, weight, eps, y);
  }
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, const Tensor& y) override {
    if (x.dtype() == kBFloat16) return Backend::rotary(x, cos, sin, interleaved, y);
    inner_.rotary(x, cos, sin, interleaved, y);
  }
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
  // Straight through when no tensor is bfloat16; else one staged adam_step per parameter.
  void adam_step_many(const std::vector<AdamTensors>& params, const AdamStepParams& hp) override;
  void uniform(const Tensor& out, uint64_t seed, uint64_t block, double lo, double hi) override;
  void normal(const Tensor& out, uint64_t seed, uint64_t block, double mean, double std) override;
  void bernoulli(const Tensor& out, uint64_t seed, uint64_t block, double p) override;
  void randint(const Tensor& out, uint64_t seed, uint64_t block, int64_t lo, int64_t hi) override;
  void dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& out) override;
  void relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                    const Tensor& low) override;
  void relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                 double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const Tensor& out, const Tensor& lse, double scale, double dropout_p, uint64_t seed,
                          uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                          const Tensor& grad_v) override;
  void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& out) override {
    inner_.quantized_matmul(x, w, out);  // float32 x and out: nothing to stage
  }
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override;
  void index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha) override;
  void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) override;
  void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) override;
  void topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
            const Tensor& indices) override;
  void multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t block,
                   const Tensor& out) override;

 private:
  Backend& inner_;
};

}  // namespace kiln
