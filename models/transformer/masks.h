#pragma once
// Attention masks with the seeds' semantics: true marks a position that must NOT be
// attended to (000_…: get_attn_pad_mask / get_attn_subsequence_mask), and PyTorch's
// float form (0 where allowed, -inf where masked) for nn.Transformer.
#include <cstdint>

#include <kiln/kiln.h>

namespace kiln::transformer {

// seq_q (B, Lq), seq_k (B, Lk) int64 ids -> (B, Lq, Lk) bool, true where the key is pad_id.
Tensor attn_pad_mask(const Tensor& seq_q, const Tensor& seq_k, int64_t pad_id = 0);

// seq (B, L) -> (B, L, L) bool, true above the diagonal (a token cannot see later ones).
Tensor attn_subsequence_mask(const Tensor& seq);

// (B, L) ids -> (B, L) bool, true at padding: the key_padding_mask of nn.Transformer.
Tensor key_padding_mask(const Tensor& seq, int64_t pad_id = 0);

// (L, L) bool, true above the diagonal: the causal attn_mask.
Tensor causal_mask(int64_t size, Device device = Device());

// nn.Transformer.generate_square_subsequent_mask: (L, L) float, -inf above the
// diagonal and 0 elsewhere.
Tensor generate_square_subsequent_mask(int64_t size, TensorOptions opts = {});

// The decoder self-attention mask of 000: padding of the target OR subsequence,
// (B, L, L) bool.
Tensor decoder_self_attn_mask(const Tensor& tgt, int64_t pad_id = 0);

// Either mask may be undefined; bool masks combine with OR, float masks add, a bool and
// a float mask give a float mask with -inf where the bool one is true.
Tensor combine_masks(const Tensor& a, const Tensor& b);

}  // namespace kiln::transformer
