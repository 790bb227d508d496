#pragma once
// The Transformer of "Attention Is All You Need", its trainer and decoding:
// #include "transformer/kiln_transformer.h".
#include "transformer/attention.h"
#include "transformer/decoder.h"
#include "transformer/decoding.h"
#include "transformer/encoder.h"
#include "transformer/feed_forward.h"
#include "transformer/masks.h"
#include "transformer/metrics_log.h"
#include "transformer/positional_encoding.h"
#include "transformer/progress.h"
#include "transformer/seq2seq.h"
#include "transformer/trainer.h"
#include "transformer/transformer.h"

// torch.nn's spellings: nn.MultiheadAttention, nn.TransformerEncoderLayer, … are in
// kiln::nn as well, so `nn::Transformer model(opts);` reads as PyTorch does.
namespace kiln::nn {
using transformer::MultiheadAttention;
using transformer::MultiheadAttentionOptions;
using transformer::Transformer;
using transformer::TransformerDecoder;
using transformer::TransformerDecoderLayer;
using transformer::TransformerEncoder;
using transformer::TransformerEncoderLayer;
using transformer::TransformerLayerOptions;
using transformer::TransformerOptions;
}  // namespace kiln::nn
