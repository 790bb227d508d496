#include "nn/layers.h"

#include <cmath>
#include <cstdio>
#include <typeinfo>

#include "autograd/grad_mode.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace kiln::nn {

std::string repr_float(double v) {
  char buf[32];
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e16) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  } else {
    // The shortest form that reads back the same value, as Python's repr.
    for (int prec = 1; prec <= 17; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, v);
      if (std::strtod(buf, nullptr) == v) break;
    }
  }
  return buf;
}

// ---------------------------------------------------------------- Linear
Linear::Linear(int64_t in, int64_t out, bool with_bias) : UnaryModule("Linear"), in_features(in), out_features(out) {
  KILN_CHECK(in >= 0 && out >= 0, "Linear", "sizes must be non-negative, got in_features=", in, ", out_features=", out);
  weight = register_parameter("weight", empty({out, in}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  reset_parameters();
}

Linear::Linear(QuantizedMatrix w, Tensor b) : UnaryModule("Linear"), in_features(w.cols), out_features(w.rows) {
  KILN_CHECK(w.data != nullptr || w.rows * w.cols == 0, "Linear", "the quantized weight has no data");
  KILN_CHECK(!b.defined() || (b.dim() == 1 && b.size(0) == w.rows), "Linear", "bias must have shape (", w.rows,
             ",), got ", shape_str(b.shape()));
  weight = register_parameter("weight", Tensor());
  if (b.defined()) bias = register_parameter("bias", std::move(b));
  qweight = std::move(w);
}

const QuantizedMatrix& Linear::quantize(GGMLType type) {
  KILN_CHECK(!is_quantized(), "Linear.quantize", "the weight is already quantized (",
             ggml_type_info(qweight->type).name, ")");
  qweight = quantize_matrix(weight, type);
  weight = Tensor();
  parameter_slot("weight") = Tensor();
  return *qweight;
}

void Linear::reset_parameters() {
  if (is_quantized()) return;  // blocks are not re-drawn
  // PyTorch's default: kaiming_uniform_(a=sqrt(5)) on the weight, which gives
  // U(-1/sqrt(in), 1/sqrt(in)); the bias uses the same bound.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

namespace {

void check_linear_input(const Tensor& x, int64_t in_features, const Tensor& weight) {
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features, "Linear",
             "expected input with last dimension ", in_features, ", got shape ",
             x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  KILN_CHECK(!weight.defined() || x.dtype() == weight.dtype(), "Linear", "input has dtype ", dtype_name(x.dtype()), ", the weight has ",
             dtype_name(weight.dtype()));
}

}  // namespace

Tensor Linear::forward(const Tensor& x) {
  check_linear_input(x, in_features, weight);
  Tensor y = is_quantized() ? quantized_linear(x, *qweight, bias) : linear(x, weight, bias);
  return has_lora() ? add_lora_delta(std::move(y), x) : y;
}

Tensor Linear::forward(Tensor&& x) {
  // A subclass's own forward, or an adapter's, which reads x again.
  if (typeid(*this) != typeid(Linear) || has_lora() || is_quantized()) return forward(static_cast<const Tensor&>(x));
  check_linear_input(x, in_features, weight);
  return linear(std::move(x), weight, bias);
}

Tensor Linear::add_lora_delta(Tensor y, const Tensor& x) {
  if (lora_merged) return y;
  const Tensor h = lora_dropout > 0 ? dropout(x, lora_dropout, training_effective()) : x;
  return add(y, mul(lora_B->forward(lora_A->forward(h)), lora_scaling));
}

void Linear::attach_lora(int64_t r, double scaling, double dropout_p) {
  KILN_CHECK(!has_lora(), "Linear.attach_lora", "this layer already has an adapter");
  KILN_CHECK(r >= 1, "Linear.attach_lora", "the rank r must be at least 1, got ", r);
  KILN_CHECK(dropout_p >= 0 && dropout_p < 1, "Linear.attach_lora", "dropout must be in [0, 1), got ", dropout_p);
  lora_A = register_module("lora_A", std::make_shared<Linear>(in_features, r, false));
  lora_B = register_module("lora_B", std::make_shared<Linear>(r, out_features, false));
  // Over quantized blocks (QLoRA) the adapter is float32 on the host, where the blocks are.
  if (weight.defined()) {
    lora_A->to(weight.dtype());
    lora_B->to(weight.dtype());
    lora_A->to(weight.device());
    lora_B->to(weight.device());
  }
  {
    NoGradGuard no_grad;
    lora_B->weight.zero_();
  }
  lora_scaling = scaling;
  lora_dropout = dropout_p;
  lora_merged = false;
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "True" : "False") +
         (is_quantized() ? std::string(", weight=") + ggml_type_info(qweight->type).name : "");
}

// ---------------------------------------------------------------- LayerNorm
LayerNorm::LayerNorm(Shape shape, double eps_, bool affine)
    : UnaryModule("LayerNorm"), normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  if (affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }
Tensor LayerNorm::forward_add(const Tensor& x, const Tensor& residual) {
  return add_layer_norm(x, residual, normalized_shape, weight, bias, eps);
}
SumAndNorm LayerNorm::forward_add_with_sum(const Tensor& x, const Tensor& residual) {
  return add_layer_norm_with_sum(x, residual, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  return shape_str(normalized_shape) + ", eps=" + repr_float(eps) +
         ", elementwise_affine=" + (elementwise_affine ? "True" : "False");
}

// ---------------------------------------------------------------- RMSNorm
RMSNorm::RMSNorm(Shape shape, std::optional<double> eps_, bool affine)
    : UnaryModule("RMSNorm"), normalized_shape(std::move(shape)), eps(eps_), elementwise_affine(affine) {
  KILN_CHECK(eps.value_or(0) >= 0, "RMSNorm", "eps must be non-negative, got ", *eps);
  if (affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return shape_str(normalized_shape) + ", eps=" + (eps ? repr_float(*eps) : std::string("None")) +
         ", elementwise_affine=" + (elementwise_affine ? "True" : "False");
}

// ---------------------------------------------------------------- Dropout
Dropout::Dropout(double p_) : UnaryModule("Dropout"), p(p_) {
  KILN_CHECK(p >= 0 && p <= 1, "Dropout", "probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training_effective()); }

std::string Dropout::extra_repr() const { return "p=" + repr_float(p) + ", inplace=False"; }

// ---------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> pad)
    : UnaryModule("Embedding"), num_embeddings(num), embedding_dim(dim) {
  KILN_CHECK(num >= 0 && dim >= 0, "Embedding", "sizes must be non-negative, got ", num, " and ", dim);
  if (pad) {
    KILN_CHECK(*pad >= -num && *pad < num, "Embedding", "padding_idx ", *pad, " must be within num_embeddings (",
               num, ")");
    padding_idx = *pad < 0 ? *pad + num : *pad;
  }
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight);
  if (padding_idx) {
    NoGradGuard g;
    weight.select(0, *padding_idx).zero_();
  }
}

Embedding::Embedding(QuantizedMatrix w) : UnaryModule("Embedding"), num_embeddings(w.rows), embedding_dim(w.cols) {
  KILN_CHECK(w.data != nullptr || w.rows * w.cols == 0, "Embedding", "the quantized table has no data");
  weight = register_parameter("weight", Tensor());
  qweight = std::move(w);
}

const QuantizedMatrix& Embedding::quantize(GGMLType type) {
  KILN_CHECK(!is_quantized(), "Embedding.quantize", "the table is already quantized (",
             ggml_type_info(qweight->type).name, ")");
  qweight = quantize_matrix(weight, type);
  weight = Tensor();
  parameter_slot("weight") = Tensor();
  return *qweight;
}

Tensor Embedding::forward(const Tensor& indices) {
  return is_quantized() ? quantized_embedding(*qweight, indices) : embedding(weight, indices, padding_idx);
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
  if (padding_idx) s += ", padding_idx=" + std::to_string(*padding_idx);
  if (is_quantized()) s += std::string(", weight=") + ggml_type_info(qweight->type).name;
  return s;
}

// ---------------------------------------------------------------- activations
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim); }
Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim); }
Tensor ReLU::forward(const Tensor& x) { return relu(x); }

GELU::GELU(std::string a) : UnaryModule("GELU"), approximate(std::move(a)) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "GELU", "approximate must be 'none' or 'tanh', got '",
             approximate, "'");
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

// ---- activations of the pointwise math ops
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }

Softplus::Softplus(double beta_, double threshold_) : UnaryModule("Softplus"), beta(beta_), threshold(threshold_) {
  KILN_CHECK(beta != 0 && !std::isnan(beta), "Softplus", "beta must be a non-zero number, got ", beta);
}
Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }
std::string Softplus::extra_repr() const {
  // torch's defaults are the ints 1 and 20, printed without ".0": integral values print
  // as integers, others as Python floats.
  auto num = [](double v) {
    return std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15 ? std::to_string(static_cast<int64_t>(v))
                                                                         : repr_float(v);
  };
  return "beta=" + num(beta) + ", threshold=" + num(threshold);
}

// ---------------------------------------------------------------- Sequential
Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> modules) : UnaryModule("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  KILN_CHECK(m != nullptr, "Sequential", "cannot add a null module");
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

std::shared_ptr<UnaryModule> Sequential::operator[](size_t i) const {
  KILN_CHECK(i < layers_.size(), "Sequential", "index ", i, " out of range for ", layers_.size(), " modules");
  return layers_[i];
}

}  // namespace kiln::nn

// ---------------------------------------------------------------- make_fresh (for clone)
// Each builds a module of the same configuration; clone() then copies the values in.
namespace kiln::nn {

std::shared_ptr<Module> Linear::make_fresh() const {
  // Blocks are immutable: the copy shares them.
  auto fresh = is_quantized() ? std::make_shared<Linear>(*qweight, bias.defined() ? zeros({out_features}) : Tensor())
                              : std::make_shared<Linear>(in_features, out_features, bias.defined());
  if (has_lora()) {
    fresh->attach_lora(lora_A->out_features, lora_scaling, lora_dropout);
    fresh->lora_merged = lora_merged;
  }
  return fresh;
}
std::shared_ptr<Module> LayerNorm::make_fresh() const {
  return std::make_shared<LayerNorm>(normalized_shape, eps, elementwise_affine);
}
std::shared_ptr<Module> RMSNorm::make_fresh() const {
  return std::make_shared<RMSNorm>(normalized_shape, eps, elementwise_affine);
}
std::shared_ptr<Module> Dropout::make_fresh() const { return std::make_shared<Dropout>(p); }
std::shared_ptr<Module> Embedding::make_fresh() const {
  if (is_quantized()) return std::make_shared<Embedding>(*qweight);
  return std::make_shared<Embedding>(num_embeddings, embedding_dim, padding_idx);
}
std::shared_ptr<Module> Softmax::make_fresh() const { return std::make_shared<Softmax>(dim); }
std::shared_ptr<Module> LogSoftmax::make_fresh() const { return std::make_shared<LogSoftmax>(dim); }
std::shared_ptr<Module> ReLU::make_fresh() const { return std::make_shared<ReLU>(); }
std::shared_ptr<Module> GELU::make_fresh() const { return std::make_shared<GELU>(approximate); }
std::shared_ptr<Module> SiLU::make_fresh() const { return std::make_shared<SiLU>(); }
std::shared_ptr<Module> Softplus::make_fresh() const { return std::make_shared<Softplus>(beta, threshold); }
std::shared_ptr<Module> Tanh::make_fresh() const { return std::make_shared<Tanh>(); }
std::shared_ptr<Module> Sigmoid::make_fresh() const { return std::make_shared<Sigmoid>(); }
std::shared_ptr<Module> Identity::make_fresh() const { return std::make_shared<Identity>(); }
std::shared_ptr<Module> Sequential::make_fresh() const {
  auto copy = std::make_shared<Sequential>();
  for (const auto& m : layers_) copy->push_back(clone_child(m));
  return copy;
}

}  // namespace kiln::nn
