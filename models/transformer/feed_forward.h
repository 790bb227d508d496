#pragma once
// The position-wise feed-forward block: linear2(dropout(activation(linear1(x)))).
#include <memory>
#include <optional>
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
// step's largest activation per layer (d_ff wide), the same bits. std::nullopt (the
// default) decides by checkpoint_feed_forward_by_default.
Tensor feed_forward(const Tensor& x, const std::shared_ptr<nn::Linear>& linear1, const nn::Dropout& dropout,
                    nn::Linear& linear2, const std::string& activation, std::optional<bool> checkpoint = std::nullopt);

// Whether a feed-forward block over x checkpoints its hidden layer when nobody said: under
// autocast (linear1 again is one bfloat16 GEMM, a small part of the step) on a device
// whose saved activations are written again in backward (is_recompute_saved_enabled: a
// GPU by default, any device after set_recompute_saved(true)), where memory is what the
// trade is for. The base model's bf16 step on a GPU: 12% less peak (benchmarks/history/).
bool checkpoint_feed_forward_by_default(const Tensor& x);

// In its scope on this thread the default above is off: for a layer checkpointed whole
// (checkpoint_layers), where the hidden layer's own checkpoint would only run linear1 a
// third time.
class WholeLayerCheckpoint {
 public:
  WholeLayerCheckpoint();
  ~WholeLayerCheckpoint();
  WholeLayerCheckpoint(const WholeLayerCheckpoint&) = delete;
  WholeLayerCheckpoint& operator=(const WholeLayerCheckpoint&) = delete;

 private:
  bool previous_;
};

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
