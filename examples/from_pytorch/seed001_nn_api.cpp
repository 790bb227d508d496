// Seed 001, "the PyTorch API to match", in Kiln: nn.MultiheadAttention (with kdim/vdim),
// TransformerEncoderLayer and TransformerEncoder, TransformerDecoderLayer and
// TransformerDecoder, and nn.Transformer with its masks, each called as the notebook
// calls it and printing the shapes it prints.
//
//   seed001_nn_api [--scale K] [--seed S]   (K divides d_model and the feed-forward size; 1 = the notebook's sizes)
#include <iostream>

#include <kiln/kiln.h>
#include <kiln/transformer/kiln_transformer.h>

#include "../common/cli.h"

using namespace kiln;

int run(int argc, char** argv) {
  kiln_examples::Cli cli(argc, argv, "seed001_nn_api [--scale K] [--seed S]");
  const int64_t scale = cli.integer("--scale", 1, 1, 64);
  const uint64_t seed = static_cast<uint64_t>(cli.integer("--seed", 0, 0, INT64_MAX));
  cli.finish();
  if (64 % scale != 0)
    cli.fail("--scale must divide 64 (8 heads share 512 / scale features), got " + std::to_string(scale));
  manual_seed(seed);

  // ---- nn.MultiheadAttention
  int64_t embed_dim = 512 / scale, num_heads = 8;
  int64_t batch_size = 5, target_len = 10, source_len = 20;

  Tensor query = rand({target_len, batch_size, embed_dim});
  Tensor key = rand({source_len, batch_size, embed_dim});
  Tensor value = rand({source_len, batch_size, embed_dim});

  nn::MultiheadAttention multihead_attn(embed_dim, num_heads);
  auto [attn_output, attn_output_weights] = multihead_attn(query, key, value);
  std::cout << attn_output.sizes() << "\n";          // torch.Size([10, 5, 512])
  std::cout << attn_output_weights.sizes() << "\n";  // torch.Size([5, 10, 20])

  int64_t kdim = 256 / scale, vdim = 256 / scale;
  key = rand({source_len, batch_size, kdim});
  value = rand({source_len, batch_size, vdim});
  nn::MultiheadAttention multihead_attn_kv(embed_dim, num_heads, nn::MultiheadAttentionOptions{.kdim = kdim, .vdim = vdim});
  auto [attn_output_kv, attn_output_weights_kv] = multihead_attn_kv(query, key, value);
  std::cout << attn_output_kv.sizes() << "\n";
  std::cout << attn_output_weights_kv.sizes() << "\n";

  // ---- nn.TransformerEncoderLayer, nn.TransformerEncoder
  int64_t d_model = 512 / scale, dim_ffn = 2048 / scale;
  batch_size = 10;
  source_len = 32;
  Tensor src = rand({source_len, batch_size, d_model});

  auto encoder_layer = std::make_shared<nn::TransformerEncoderLayer>(d_model, /*nhead=*/8,
                                                                      nn::TransformerLayerOptions{.dim_feedforward = dim_ffn});
  Tensor out = (*encoder_layer)(src);
  std::cout << "src.shape:  " << src.sizes() << "\n";
  std::cout << "out.shape:  " << out.sizes() << "\n";

  nn::TransformerEncoder multi_encoder_layer(encoder_layer, /*num_layers=*/3);
  out = multi_encoder_layer(src);
  std::cout << "src.shape:  " << src.sizes() << "\n";
  std::cout << "out.shape:  " << out.sizes() << "\n";

  // ---- nn.TransformerDecoderLayer, nn.TransformerDecoder
  int64_t nhead = 8;
  Tensor tgt = rand({source_len, batch_size, d_model});
  Tensor memory = rand({source_len, batch_size, d_model});
  auto decoder_layer = std::make_shared<nn::TransformerDecoderLayer>(d_model, nhead,
                                                                      nn::TransformerLayerOptions{.dim_feedforward = dim_ffn});
  Tensor decoder_out = (*decoder_layer)(tgt, memory);
  std::cout << "tgt.shape:  " << tgt.sizes() << "\n";
  std::cout << "memory.shape:  " << memory.sizes() << "\n";
  std::cout << "decoder_out.shape:  " << decoder_out.sizes() << "\n";

  nn::TransformerDecoder multi_decoder_layer(decoder_layer, /*num_layers=*/3);
  decoder_out = multi_decoder_layer(tgt, memory);
  std::cout << "tgt.shape:  " << tgt.sizes() << "\n";
  std::cout << "memory.shape:  " << memory.sizes() << "\n";
  std::cout << "decoder_out.shape:  " << decoder_out.sizes() << "\n";

  // ---- nn.Transformer(d_model, nhead, …) and its forward masks: src (S, N, E), tgt (T, N, E)
  nn::TransformerOptions topts;
  topts.d_model = d_model;
  topts.nhead = nhead;
  topts.num_encoder_layers = 2;
  topts.num_decoder_layers = 2;
  topts.dim_feedforward = dim_ffn;
  nn::Transformer transformer(topts);
  int64_t S = 12, T = 9;
  src = rand({S, batch_size, d_model});
  tgt = rand({T, batch_size, d_model});
  Tensor tgt_mask = nn::Transformer::generate_square_subsequent_mask(T);
  Tensor src_key_padding_mask = zeros({batch_size, S}, kBool);
  src_key_padding_mask.select(1, S - 1).fill_(1);  // the last source position is padding
  out = transformer(src, tgt, /*src_mask=*/Tensor(), tgt_mask, /*memory_mask=*/Tensor(), src_key_padding_mask,
                    /*tgt_key_padding_mask=*/Tensor(), /*memory_key_padding_mask=*/src_key_padding_mask);
  std::cout << "transformer out.shape:  " << out.sizes() << "\n";  // (T, N, E)
  return out.sizes() == Shape{T, batch_size, d_model} ? 0 : 1;
}

int main(int argc, char** argv) {
  return kiln_examples::run_main("seed001_nn_api", [&] { return run(argc, argv); });
}
