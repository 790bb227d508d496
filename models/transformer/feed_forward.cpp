#include "transformer/feed_forward.h"

namespace kiln::transformer {

void check_activation(const char* op, const std::string& name) {
  KILN_CHECK(name == "relu" || name == "gelu" || name == "gelu_tanh", op,
             "activation should be relu, gelu or gelu_tanh, not '", name, "'");
}

Tensor activation_fn(const std::string& name, const Tensor& x) {
  if (name == "relu") return relu(x);
  if (name == "gelu") return gelu(x);
  if (name == "gelu_tanh") return gelu(x, "tanh");
  check_activation("activation", name);
  return x;
}

PositionwiseFeedForward::PositionwiseFeedForward(int64_t d_model, int64_t d_ff, double p, std::string act)
    : Cloneable("PositionwiseFeedForward"), activation(std::move(act)) {
  check_activation("PositionwiseFeedForward", activation);
  linear1 = register_module("linear1", std::make_shared<nn::Linear>(d_model, d_ff));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<nn::Linear>(d_ff, d_model));
}

Tensor feed_forward(const Tensor& x, nn::Linear& linear1, nn::Dropout& dropout, nn::Linear& linear2,
                    const std::string& activation) {
  Tensor h = linear1.forward(x);
  // One fused op for relu then dropout: backward needs only its output.
  h = activation == "relu" ? relu_dropout(h, dropout.p, dropout.training_effective())
                           : dropout.forward(activation_fn(activation, h));
  return linear2.forward(h);
}

std::shared_ptr<nn::Module> PositionwiseFeedForward::make_fresh() const {
  return std::make_shared<PositionwiseFeedForward>(linear1->in_features, linear1->out_features, dropout->p,
                                                   activation);
}

Tensor PositionwiseFeedForward::forward(const Tensor& x) {
  return feed_forward(x, *linear1, *dropout, *linear2, activation);
}

}  // namespace kiln::transformer
