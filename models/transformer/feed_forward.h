#pragma once
// The position-wise feed-forward block: linear2(dropout(activation(linear1(x)))).
#include <memory>
#include <string>

#include <kiln/kiln.h>

namespace kiln::transformer {

// "relu", "gelu" (exact) or "gelu_tanh"; anything else is an error naming it.
Tensor activation_fn(const std::string& name, const Tensor& x);
void check_activation(const char* op, const std::string& name);

// linear2(dropout(activation(linear1(x)))): x (…, d_model) -> (…, d_model). The
// position-wise block of PositionwiseFeedForward and of the encoder and decoder layers.
// checkpoint (while grad is on): the hidden layer dropout(activation(linear1(x))) through
// utils::checkpoint with recompute_outputs, so neither it nor what its ops save is kept
// (linear2 keeps its recipe): backward runs linear1 and the activation once more for the
// step's largest activation per layer (d_ff wide), the same bits.
Tensor feed_forward(const Tensor& x, const std::shared_ptr<nn::Linear>& linear1, const nn::Dropout& dropout,
                    nn::Linear& linear2, const std::string& activation, bool checkpoint = false);

class PositionwiseFeedForward : public nn::Cloneable<PositionwiseFeedForward, nn::UnaryModule> {
 public:
  PositionwiseFeedForward(int64_t d_model, int64_t d_ff, double dropout = 0.1, std::string activation = "relu");
  // x (…, d_model) -> (…, d_model)
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override { return "activation=" + activation; }
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  std::string activation;
  std::shared_ptr<nn::Linear> linear1, linear2;
  std::shared_ptr<nn::Dropout> dropout;
};

}  // namespace kiln::transformer
