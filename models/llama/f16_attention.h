#pragma once
// Attention over a float16 KV cache as llama.cpp's CPU backend computes it (its default
// cache, flash attention off): queries rounded to float16 and dotted with the float16
// keys, scaled by 1/sqrt(head_dim), softmax with ggml's exp and its sums, the weights
// rounded to float16 and dotted with the transposed float16 values. The dots run in
// float32 fused multiply-adds in one of ggml's two orders: its tiled matrix product's
// (prompts: more than one new position) or its vector dot's (one new position). So with
// the rest of the block (ggml_math.h) a quantized GGUF model gives llama.cpp's bits.
// Inference only; host float32.
#include <cstdint>

#include <kiln/kiln.h>

#include "kv_cache.h"

namespace kiln::llama {

// q (B, kv_heads, group * T, head_dim) float32: each kv head's group of query heads, the
// T newest positions of one head after another. The cache holds those T positions after
// its length() (append_float16 done, advance not yet), and query row r, at position
// length() + r % T, sees the keys up to its own. -> (B, kv_heads, group * T, head_dim).
Tensor f16_attention(const Tensor& q, const KVCache& cache, int64_t layer, int64_t T);

// The two dot orders over float16 a, b (n), for tests: kBlocked8 sums lane i % 8 in one
// fused chain per lane, then the lanes pairwise ((0+4)+(2+6))+((1+5)+(3+7)) (n a multiple
// of 8); kStrided32 keeps four such 8-lane chains over blocks of 32, adds them (0+2)+(1+3),
// its lanes ((0+4)+(1+5))+((2+6)+(3+7)), and the last n % 32 products in double.
// `simd` false takes the portable loop (same bits).
enum class F16DotOrder { kBlocked8, kStrided32 };
float f16_dot(const uint16_t* a, const uint16_t* b, int64_t n, F16DotOrder order, bool simd = true);

}  // namespace kiln::llama
