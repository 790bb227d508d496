#pragma once
// What bench_train_step and bench_ddp_step build alike for a training-step configuration
// (train_config.h): the Transformer's options, the optimizer's, the token batches, and
// their command-line integer parsing. benchmarks/torch_train_step.py repeats the model
// and optimizer settings for PyTorch.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "train_config.h"

namespace bench {

inline kiln::transformer::Seq2SeqOptions model_options(const TrainConfig& c) {
  kiln::transformer::Seq2SeqOptions o;
  o.src_vocab_size = c.vocab;
  o.tgt_vocab_size = c.vocab;
  o.d_model = c.d_model;
  o.nhead = c.heads;
  o.num_encoder_layers = c.layers;
  o.num_decoder_layers = c.layers;
  o.dim_feedforward = c.d_ff;
  o.dropout = 0.1;
  o.max_len = std::max<int64_t>(c.seq + 1, 128);
  return o;
}

// The paper's Adam (beta2 0.98, eps 1e-9) at a fixed learning rate.
inline kiln::optim::AdamOptions adam_options() {
  kiln::optim::AdamOptions adam;
  adam.lr = 1e-4;
  adam.beta2 = 0.98;
  adam.eps = 1e-9;
  return adam;
}

// (rows, seq) token ids of sentences first .. first + rows - 1 (token_at).
inline kiln::Tensor ids(const TrainConfig& c, int64_t salt, int64_t first, int64_t rows) {
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(rows * c.seq));
  for (int64_t i = first; i < first + rows; ++i)
    for (int64_t j = 0; j < c.seq; ++j) v.push_back(token_at(i, j, c.seq, c.vocab, salt));
  return kiln::from_vector<int64_t>(v, {rows, c.seq});
}

// The whole text as an integer >= lo, or an error naming the option.
inline int int_option(const std::string& flag, const std::string& v, int lo) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || n < lo)
    throw std::invalid_argument(flag + " takes an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return n;
}

// "on" or "off" as a bool, or an error naming the option.
inline bool on_off_option(const std::string& flag, const std::string& v) {
  if (v == "on" || v == "off") return v == "on";
  throw std::invalid_argument(flag + " takes on or off, got '" + v + "'");
}

// --attention's value: kiln::cuda::set_attention_kernel's choice for a GPU.
inline kiln::cuda::AttentionKernel attention_option(const std::string& v) {
  if (v == "auto") return kiln::cuda::AttentionKernel::Auto;
  if (v == "tiled") return kiln::cuda::AttentionKernel::Tiled;
  if (v == "materialized") return kiln::cuda::AttentionKernel::Materialized;
  throw std::invalid_argument("--attention takes auto, tiled or materialized, got '" + v + "'");
}

inline kiln::cuda::BlasLibrary blas_option(const std::string& v) {
  if (v == "cublas") return kiln::cuda::BlasLibrary::Cublas;
  if (v == "cublaslt") return kiln::cuda::BlasLibrary::Cublaslt;
  throw std::invalid_argument("--blas takes cublas or cublaslt, got '" + v + "'");
}

}  // namespace bench
