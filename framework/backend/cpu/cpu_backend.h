#pragma once
#include <string>

#include "../backend.h"

namespace kiln::cpu {

// How this CPU runs autocast's bfloat16 products (matmul and attention), for
// kiln::config(): "oneDNN native", or "fp32 compute on bf16-rounded inputs (why)".
std::string autocast_bf16_path();

class CpuBackend final : public Backend {
 public:
  Device device() const override { return kCPU; }
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
  void matmul_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override;
  void round_bf16_and_column_sums(const Tensor& x, const Tensor& low, const Tensor& sums) override;
  // Autocast's mixed matmul and attention (oneDNN's bf16 GEMMs, or float32 ones on the
  // widened operands), and add_layer_norm's and relu_dropout's bfloat16 copies.
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
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y) override;
  void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved, const Tensor& y) override;
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
  void relu_dropout(const Tensor& x, uint64_t seed, uint64_t block, double p, const Tensor& y,
                    const Tensor& low) override;
  void relu_dropout_backward(const Tensor& g, const Tensor& y, double p, const Tensor& gx) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                 double dropout_p, uint64_t seed, uint64_t block, const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& g, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const Tensor& out, const Tensor& lse, double scale, double dropout_p, uint64_t seed,
                          uint64_t block, const Tensor& grad_q, const Tensor& grad_k,
                          const Tensor& grad_v) override;
  void quantized_matmul(const Tensor& x, const QuantizedMatrix& w, const Tensor& out) override;  // quant_matmul.cpp
  // ---- indexing, scatter, scan, sort and sampling:
  // cpu_index.cpp, cpu_cumsum.cpp, cpu_sort.cpp, cpu_multinomial.cpp
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) override;
  void index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha) override;
  void cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) override;
  void sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) override;
  void topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
            const Tensor& indices) override;
  void multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed, uint64_t block,
                   const Tensor& out) override;
};

CpuBackend& cpu_backend();

// copy and fill where a tensor is bfloat16 (cpu_bfloat16.cpp), the only CPU kernels that
// see that dtype.
void copy_bfloat16(const Tensor& src, const Tensor& dst);
void fill_bfloat16(const Tensor& dst, double value);

// x viewed as (outer, n, inner) around `dim`, for kernels that work along one dim.
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
DimSplit split_at_dim(const Shape& shape, int64_t dim);

}  // namespace kiln::cpu
