#pragma once
// The Transformer of "Attention Is All You Need", its trainer and decoding:
// #include <kiln/transformer/kiln_transformer.h>.
#include "attention.h"
#include "decoder.h"
#include "decoding.h"
#include "encoder.h"
#include "feed_forward.h"
#include "masks.h"
#include "positional_encoding.h"
#include "seq2seq.h"
#include "trainer.h"
#include "transformer.h"

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
