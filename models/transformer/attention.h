#pragma once
// Scaled dot-product attention and torch.nn.MultiheadAttention (same options, forward
// arguments, parameter names and initialisation), plus cached keys and values for
// decoding one token at a time.
#include <memory>

#include <kiln/kiln.h>

namespace kiln::transformer {

struct AttentionOutput {
  Tensor output;   // the attended values
  Tensor weights;  // the attention probabilities (undefined when not asked for)
};

// The seeds' attention(): softmax(q k^T / sqrt(E) + mask) v, with dropout on the weights
// when training, returning the weights too (kiln::scaled_dot_product_attention is the
// fused op for when they are not wanted).
// q (…, L, E), k (…, S, E), v (…, S, Ev); mask broadcastable to (…, L, S): bool (true =
// may not attend) or float (added to the scores). -> output (…, L, Ev), weights (…, L, S).
// A row whose keys are all masked gives zeros (output, weights and gradients), as current
// PyTorch's scaled_dot_product_attention (its _safe_softmax), not NaN.
AttentionOutput attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                          double dropout_p = 0.0, bool training = false, Generator* gen = nullptr);

struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  int64_t kdim = -1;  // -1: embed_dim
  int64_t vdim = -1;  // -1: embed_dim
  bool batch_first = false;
};

// The projected keys and values of the positions seen so far, batch-first (N, S, E).
// They live in buffers with room for more positions, so a decoding step copies only its
// new positions: the room doubles when it runs out (amortised O(1) per position, not the
// O(length) of concatenating onto the whole cache each step).
class KVCache {
 public:
  bool empty() const { return !k_.defined(); }
  int64_t length() const { return length_; }
  // Positions the buffers hold before they must grow.
  int64_t capacity() const { return k_.defined() ? k_.size(1) : 0; }
  int64_t batch() const { return k_.defined() ? k_.size(0) : 0; }
  // The filled part, (N, length, E): views of the buffers, valid while they live (a
  // later append writes only past them).
  Tensor k() const;
  Tensor v() const;
  // Replaces the contents with k and v (N, S, E): keys and values computed once (a
  // cross-attention's memory). Kept as given, with no room to append.
  void assign(const Tensor& k, const Tensor& v);
  // Appends k_new and v_new (N, L, E) after the cached positions, growing the buffers
  // when full. Where the new positions need a gradient (grad mode, inputs requiring
  // grad) the cache is concatenated instead, as differentiable ops.
  void append(const Tensor& k_new, const Tensor& v_new);
  // Keeps the rows of `index` (N' int64; negative counts from the end), for reordering
  // beams; the room is kept. An index out of range is "[KVCache::select_batch] …".
  void select_batch(const Tensor& index);

 private:
  Tensor k_, v_;  // (N, capacity, E); positions from length_ on are not yet written
  int64_t length_ = 0;
};

// mha(query, key, value, …) calls forward (nn::Cloneable); clone() deep-copies.
class MultiheadAttention : public nn::Cloneable<MultiheadAttention> {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions opts = {});

  // query (L, N, E) or (N, L, E) with batch_first, or (L, E) unbatched; key (S, N, kdim),
  // value (S, N, vdim) likewise. key_padding_mask (N, S): bool (true = ignore) or float
  // (added). attn_mask (L, S) or (N·num_heads, L, S), bool or float.
  // -> output like query; weights (N, L, S) averaged over heads, or (N, num_heads, L, S)
  // when !average_attn_weights; undefined when !need_weights.
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                          const Tensor& attn_mask = Tensor(), bool average_attn_weights = true);

  // Attention for new query positions with cached keys and values. static_kv: the keys
  // come from `kv_input` once and stay (cross-attention over the encoder's memory);
  // otherwise the projections of kv_input are appended to the cache (self-attention)
  // and the new queries see every cached position and those before them.
  AttentionOutput forward_cached(const Tensor& query, const Tensor& kv_input, KVCache& cache, bool static_kv,
                                 const Tensor& key_padding_mask = Tensor(), bool need_weights = false,
                                 bool average_attn_weights = true);

  void reset_parameters();
  // The options this module was built with.
  MultiheadAttentionOptions options() const;
  std::shared_ptr<nn::Module> make_fresh() const override;  // clone(): same configuration

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  bool batch_first, add_zero_attn, qkv_same_embed_dim;
  Tensor in_proj_weight;                              // (3E, E) when kdim == vdim == E
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // (E, E), (E, kdim), (E, vdim) otherwise
  Tensor in_proj_bias;                                 // (3E) when bias
  Tensor bias_k, bias_v;                               // (1, 1, E) when add_bias_kv
  std::shared_ptr<nn::Linear> out_proj;

 private:
  // x (N, L, in) -> (N, L, E) with the q (0), k (1) or v (2) projection.
  Tensor project(const Tensor& x, int which) const;
  // Keys and values from one input (cross-attention, where key is value): one GEMM
  // against the stacked k and v rows of in_proj_weight when there is one.
  std::pair<Tensor, Tensor> project_kv(const Tensor& kv) const;
  // q (N, L, E), k and v (N, S, E) already projected; mask broadcastable to (N, H, L, S).
  AttentionOutput attend(Tensor q, Tensor k, Tensor v, Tensor mask, bool need_weights, bool average);
};

}  // namespace kiln::transformer
