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

namespace {

// dropout(activation(linear1(x))); relu and dropout as one fused op, whose backward needs
// only its output, written over linear1's output (given up: the layer's one d_ff-wide
// float32 tensor).
Tensor hidden_layer(const Tensor& x, nn::Linear& linear1, double p, bool training, const std::string& activation) {
  Tensor h = linear1.forward(x);
  if (activation == "relu") return relu_dropout(std::move(h), p, training);
  return dropout(activation_fn(activation, h), p, training);
}

}  // namespace

namespace {
thread_local bool t_whole_layer_checkpoint = false;
}  // namespace

WholeLayerCheckpoint::WholeLayerCheckpoint() : previous_(t_whole_layer_checkpoint) { t_whole_layer_checkpoint = true; }
WholeLayerCheckpoint::~WholeLayerCheckpoint() { t_whole_layer_checkpoint = previous_; }

bool checkpoint_feed_forward_by_default(const Tensor& x) {
  return !t_whole_layer_checkpoint && is_autocast_enabled() && is_recompute_saved_enabled(x.device());
}

Tensor feed_forward(const Tensor& x, const std::shared_ptr<nn::Linear>& linear1, const nn::Dropout& dropout,
                    nn::Linear& linear2, const std::string& activation, std::optional<bool> checkpoint) {
  const double p = dropout.p;
  const bool training = dropout.training_effective();
  const bool checkpointed = checkpoint.value_or(checkpoint_feed_forward_by_default(x));
  if (!checkpointed || !is_grad_enabled()) return linear2.forward(hidden_layer(x, *linear1, p, training, activation));
  utils::CheckpointOptions options;
  options.recompute_outputs = true;
  // By value: the block runs again in backward, after this call has returned.
  Tensor h = utils::checkpoint(
      [linear1, p, training, activation](const Tensor& in) { return hidden_layer(in, *linear1, p, training, activation); },
      x, options);
  return linear2.forward(h);
}

std::shared_ptr<nn::Module> PositionwiseFeedForward::make_fresh() const {
  return std::make_shared<PositionwiseFeedForward>(linear1->in_features, linear1->out_features, dropout->p,
                                                   activation);
}

Tensor PositionwiseFeedForward::forward(const Tensor& x) {
  return feed_forward(x, linear1, *dropout, *linear2, activation);
}

}  // namespace kiln::transformer
