#pragma once
// The basic layers, with torch.nn's names, arguments, defaults, initialisation and
// parameter names.
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../ops/ops.h"
#include "module.h"

namespace kiln::nn {

// A module with one tensor in and one out: what Sequential chains.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
};

// y = x W^T + b. weight (out, in), bias (out). Kaiming-uniform init as PyTorch.
class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // A layer whose weight is ggml blocks (a GGUF file's tensor, or quantize_matrix's):
  // (out_features, in_features) = (weight.rows, weight.cols); bias float32 or undefined.
  explicit Linear(QuantizedMatrix weight, Tensor bias = Tensor());
  Tensor forward(const Tensor& x) override;
  // An input the caller gives up (linear2.forward(hidden(x))): kiln::linear's rvalue
  // overload, whose float32 input goes before the output is made under autocast. A
  // subclass's forward(const Tensor&) still runs for its objects.
  Tensor forward(Tensor&& x);
  std::string extra_repr() const override;
  void reset_parameters();
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration (and adapter)

  int64_t in_features, out_features;
  Tensor weight, bias;

  // The weight in ggml's blocks: forward runs quantized_linear on them and `weight` is
  // undefined (the layer keeps no float copy; its bias and any LoRA adapter still train,
  // as QLoRA's). Set by quantize() or the constructor above.
  std::optional<QuantizedMatrix> qweight;
  bool is_quantized() const { return qweight.has_value(); }
  // Replaces the float weight by its blocks in `type` (in_features a multiple of the
  // type's block); returns them.
  const QuantizedMatrix& quantize(GGMLType type);

  // A LoRA adapter (nn/lora.h: add_lora): while not merged into the weight, forward adds
  // lora_B(lora_A(dropout(x))) * lora_scaling. lora_A (r, in) and lora_B (out, r) are
  // children named as PEFT names them, so a state dict holds <path>.lora_A.weight.
  std::shared_ptr<Linear> lora_A, lora_B;
  double lora_scaling = 0.0, lora_dropout = 0.0;
  bool lora_merged = false;
  bool has_lora() const { return lora_A != nullptr; }
  // Gives this layer an adapter of rank r: lora_A Kaiming-uniform, lora_B zeros (so the
  // output is unchanged until it trains), as PEFT initialises them.
  void attach_lora(int64_t r, double scaling, double dropout);

 private:
  Tensor add_lora_delta(Tensor y, const Tensor& x);
};

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  // forward(x + residual) in one pass (add_layer_norm): a post-norm residual block's end.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  // {x + residual, forward(x + residual)} in one pass (add_layer_norm_with_sum): a pre-norm
  // block's residual stream and the next sub-layer's normalised input.
  SumAndNorm forward_add_with_sum(const Tensor& x, const Tensor& residual);
  std::string extra_repr() const override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;
};

// torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the trailing dims (rms_norm);
// eps unset is the dtype's machine epsilon, as torch's None.
class RMSNorm : public UnaryModule {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration

  Shape normalized_shape;
  std::optional<double> eps;
  bool elementwise_affine;
  Tensor weight;
};

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
  double p;
};

// weight (num_embeddings, embedding_dim) ~ N(0, 1); the padding_idx row starts at zero
// and receives no gradient.
// Unary (indices in, vectors out), so that it can open a Sequential.
class Embedding : public UnaryModule {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt);
  // A table in ggml's blocks (a GGUF file's token embeddings): rows are dequantised as
  // they are looked up (quantized_embedding), and `weight` is undefined.
  explicit Embedding(QuantizedMatrix weight);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;
  Tensor weight;
  std::optional<QuantizedMatrix> qweight;  // the table in blocks, when it is so stored
  bool is_quantized() const { return qweight.has_value(); }
  const QuantizedMatrix& quantize(GGMLType type);  // as Linear::quantize
};

class Softmax : public UnaryModule {
 public:
  explicit Softmax(int64_t dim) : UnaryModule("Softmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

class LogSoftmax : public UnaryModule {
 public:
  explicit LogSoftmax(int64_t dim) : UnaryModule("LogSoftmax"), dim(dim) {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
};

class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  std::string approximate;
};

// ---- activations of the pointwise math ops
class SiLU : public UnaryModule {
 public:
  SiLU() : UnaryModule("SiLU") {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
};

// softplus(x, beta, threshold); prints "Softplus(beta=1, threshold=20)" as torch does
// with its integer defaults.
class Softplus : public UnaryModule {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
  std::string extra_repr() const override;
  double beta, threshold;
};

class Tanh : public UnaryModule {
 public:
  Tanh() : UnaryModule("Tanh") {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
};

class Sigmoid : public UnaryModule {
 public:
  Sigmoid() : UnaryModule("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
};

class Identity : public UnaryModule {
 public:
  Identity() : UnaryModule("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration
};

// Runs its modules in order; they are named "0", "1", … as in PyTorch. Built from a
// braced list or from the modules themselves, as torch::nn::Sequential:
//   nn::Sequential a({std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>()});
//   nn::Sequential b(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>());
class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> modules);
  // The braced list (an initializer_list beats the variadic form's implicit conversion).
  explicit Sequential(std::initializer_list<std::shared_ptr<UnaryModule>> modules)
      : Sequential(std::vector<std::shared_ptr<UnaryModule>>(modules)) {}
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && (std::is_base_of_v<UnaryModule, Ms> && ...))
  explicit Sequential(std::shared_ptr<Ms>... modules) : Sequential() {
    (push_back(std::move(modules)), ...);
  }
  void push_back(std::shared_ptr<UnaryModule> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  std::shared_ptr<UnaryModule> operator[](size_t i) const;
  std::shared_ptr<Module> make_fresh() const override;  // clone(): same configuration

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

// A list of submodules of one type, registered as "0", "1", ….
template <class M = Module>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<M> m) {
    register_module(std::to_string(items_.size()), m);
    items_.push_back(std::move(m));
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::shared_ptr<M>& operator[](size_t i) const {
    KILN_CHECK(i < items_.size(), "ModuleList", "index ", i, " out of range for a list of ", items_.size());
    return items_[i];
  }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  // clone(): a list of the items' clones (an item listed twice stays one module).
  std::shared_ptr<Module> make_fresh() const override {
    auto copy = std::make_shared<ModuleList>();
    for (const auto& item : items_) copy->push_back(clone_child(item));
    return copy;
  }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

// Python's repr of a float, for extra_repr: 1e-05, 0.5, 1.0.
std::string repr_float(double v);

}  // namespace kiln::nn
