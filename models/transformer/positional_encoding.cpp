#include "transformer/positional_encoding.h"

#include <cmath>

namespace kiln::transformer {
namespace {

// Checks x against the module's layout and returns the sequence length.
int64_t seq_len_of(const char* op, const Tensor& x, int64_t d_model, int64_t max_len, bool batch_first,
                   int64_t offset) {
  KILN_CHECK(x.defined() && x.dim() == 3 && x.size(2) == d_model, op, "expected input of shape ",
             batch_first ? "(batch, length, " : "(length, batch, ", d_model, "), got ",
             x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  int64_t len = x.size(batch_first ? 1 : 0);
  KILN_CHECK(offset >= 0 && offset + len <= max_len, op, "positions ", offset, "..", offset + len,
             " exceed max_len ", max_len);
  return len;
}

}  // namespace

Tensor sinusoidal_table(int64_t max_len, int64_t d_model, DType dtype) {
  KILN_CHECK(max_len >= 0 && d_model > 0, "sinusoidal_table", "need max_len >= 0 and d_model > 0, got ",
             max_len, " and ", d_model);
  KILN_CHECK(is_floating(dtype), "sinusoidal_table", "dtype must be floating, got ", dtype_name(dtype));
  // The paper's frequencies, computed in double, then rounded once to dtype.
  std::vector<double> table(static_cast<size_t>(max_len * d_model));
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; i < d_model; i += 2) {
      double angle = static_cast<double>(pos) * std::exp(-std::log(10000.0) * static_cast<double>(i) / d_model);
      table[static_cast<size_t>(pos * d_model + i)] = std::sin(angle);
      if (i + 1 < d_model) table[static_cast<size_t>(pos * d_model + i + 1)] = std::cos(angle);
    }
  }
  return from_vector<double>(table, {max_len, d_model}).to(dtype);
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t d, double p, int64_t max_len_, bool bf)
    : Cloneable("SinusoidalPositionalEncoding"), d_model(d), max_len(max_len_), batch_first(bf) {
  pe = register_buffer("pe", sinusoidal_table(max_len, d_model));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t offset) {
  int64_t len = seq_len_of("SinusoidalPositionalEncoding", x, d_model, max_len, batch_first, offset);
  Tensor table = pe.narrow(0, offset, len).to(x.dtype());  // (L, D)
  return dropout->forward(add(x, batch_first ? table : table.unsqueeze(1)));
}

void SinusoidalPositionalEncoding::converted_to(DType dtype) {
  // Recomputed in double at the new precision rather than kept as a converted table.
  nn::set_data(pe, sinusoidal_table(max_len, d_model, dtype).to(pe.device()));
}

std::shared_ptr<nn::Module> SinusoidalPositionalEncoding::make_fresh() const {
  return std::make_shared<SinusoidalPositionalEncoding>(d_model, dropout->p, max_len, batch_first);
}

std::shared_ptr<nn::Module> LearnedPositionalEncoding::make_fresh() const {
  return std::make_shared<LearnedPositionalEncoding>(d_model, dropout->p, max_len, batch_first);
}

std::string SinusoidalPositionalEncoding::extra_repr() const {
  return "d_model=" + std::to_string(d_model) + ", max_len=" + std::to_string(max_len);
}

LearnedPositionalEncoding::LearnedPositionalEncoding(int64_t d, double p, int64_t max_len_, bool bf)
    : Cloneable("LearnedPositionalEncoding"), d_model(d), max_len(max_len_), batch_first(bf) {
  position_embeddings = register_module("position_embeddings", std::make_shared<nn::Embedding>(max_len, d_model));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(p));
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x, int64_t offset) {
  int64_t len = seq_len_of("LearnedPositionalEncoding", x, d_model, max_len, batch_first, offset);
  Tensor positions = arange(static_cast<double>(offset), static_cast<double>(offset + len), 1.0,
                            TensorOptions(kInt64).device(x.device()));
  Tensor table = position_embeddings->forward(positions);  // (L, D)
  return dropout->forward(add(x, batch_first ? table : table.unsqueeze(1)));
}

std::string LearnedPositionalEncoding::extra_repr() const {
  return "d_model=" + std::to_string(d_model) + ", max_len=" + std::to_string(max_len);
}

}  // namespace kiln::transformer
