#pragma once
// Positional encodings added to token embeddings, each followed by dropout:
// the paper's fixed sinusoids (a buffer "pe" up to max_len) and learned positions
// (an Embedding, as 003's LearnedPositionalEncoding).
#include <kiln/kiln.h>

namespace kiln::transformer {

// PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)),
// computed in double and rounded once to `dtype` (floating). -> (max_len, d_model).
Tensor sinusoidal_table(int64_t max_len, int64_t d_model, DType dtype = kFloat32);

// The table is a buffer "pe" in the module's dtype: to(kFloat64) recomputes it in double
// (not a widened float32 table), so a float64 model adds exact float64 sinusoids.
class SinusoidalPositionalEncoding
    : public nn::Cloneable<SinusoidalPositionalEncoding, nn::UnaryModule> {
 public:
  SinusoidalPositionalEncoding(int64_t d_model, double dropout = 0.1, int64_t max_len = 5000,
                               bool batch_first = true);
  // x (B, L, d_model) if batch_first else (L, B, d_model) -> same shape: x + PE[:L].
  // `offset` shifts the positions (for decoding one token at a time).
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  Tensor forward(const Tensor& x, int64_t offset);
  std::string extra_repr() const override;
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  int64_t d_model, max_len;
  bool batch_first;
  Tensor pe;  // buffer (max_len, d_model)
  std::shared_ptr<nn::Dropout> dropout;

 protected:
  void converted_to(DType dtype) override;
};

class LearnedPositionalEncoding : public nn::Cloneable<LearnedPositionalEncoding, nn::UnaryModule> {
 public:
  LearnedPositionalEncoding(int64_t d_model, double dropout = 0.1, int64_t max_len = 512,
                            bool batch_first = true);
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  Tensor forward(const Tensor& x, int64_t offset);
  std::string extra_repr() const override;
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  int64_t d_model, max_len;
  bool batch_first;
  std::shared_ptr<nn::Embedding> position_embeddings;
  std::shared_ptr<nn::Dropout> dropout;
};

}  // namespace kiln::transformer
