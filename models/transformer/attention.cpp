#include "transformer/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "transformer/masks.h"

namespace kiln::transformer {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string shape_or_undefined(const Tensor& t) { return t.defined() ? shape_str(t.shape()) : "undefined"; }

void check_mask_dtype(const char* op, const Tensor& mask, const char* what, DType dtype) {
  KILN_CHECK(mask.dtype() == kBool || mask.dtype() == dtype, op, what, " must be bool or ",
             dtype_name(dtype), " (the dtype of the query), got ", dtype_name(mask.dtype()));
}

// Appends `n` columns that mask nothing to the last dim of a mask.
Tensor pad_mask(const Tensor& mask, int64_t n) {
  if (!mask.defined() || n == 0) return mask;
  Shape s = mask.shape();
  s.back() = n;
  return cat({mask, zeros(s, TensorOptions(mask.dtype()).device(mask.device()))}, -1);
}

}  // namespace

AttentionOutput attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                          bool training, Generator* gen) {
  const char* op = "attention";
  KILN_CHECK(q.defined() && k.defined() && v.defined(), op, "query, key and value must be defined");
  KILN_CHECK(q.dim() >= 2 && q.dim() == k.dim() && k.dim() == v.dim(), op,
             "query, key and value must have the same rank >= 2, got shapes ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), " and ", shape_str(v.shape()));
  KILN_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), op, "shapes ", shape_str(q.shape()), ", ",
             shape_str(k.shape()), " and ", shape_str(v.shape()),
             " do not match: need q (…, L, E), k (…, S, E), v (…, S, Ev)");
  // Scaling q (L·E values) is cheaper than scaling the scores (L·S values).
  Tensor scores = matmul(mul(q, 1.0 / std::sqrt(static_cast<double>(q.size(-1)))), k.transpose(-2, -1));
  if (mask.defined()) {
    check_mask_dtype(op, mask, "mask", q.dtype());
    scores = mask.dtype() == kBool ? masked_fill(scores, mask, -kInf) : add(scores, mask);
  }
  Tensor weights = safe_softmax(scores);  // (…, L, S)
  if (training && dropout_p > 0.0) weights = kiln::dropout(weights, dropout_p, true, gen);
  return {matmul(weights, v), weights};
}

Tensor KVCache::k() const { return k_.defined() ? k_.narrow(1, 0, length_) : Tensor(); }
Tensor KVCache::v() const { return v_.defined() ? v_.narrow(1, 0, length_) : Tensor(); }

void KVCache::assign(const Tensor& k, const Tensor& v) {
  k_ = k;
  v_ = v;
  length_ = k.size(1);
}

void KVCache::append(const Tensor& k_new, const Tensor& v_new) {
  const char* op = "KVCache::append";
  KILN_CHECK(k_new.defined() && v_new.defined() && k_new.dim() == 3 && v_new.dim() == 3 &&
                 v_new.size(0) == k_new.size(0) && v_new.size(1) == k_new.size(1),
             op, "expected new keys (N, L, E) and values (N, L, Ev), got ", shape_or_undefined(k_new), " and ",
             shape_or_undefined(v_new));
  if (empty()) {
    assign(k_new, v_new);
    return;
  }
  const int64_t L = k_new.size(1);
  KILN_CHECK(k_new.size(0) == batch() && k_new.size(2) == k_.size(2) && v_new.size(2) == v_.size(2) &&
                 k_new.dtype() == k_.dtype() && v_new.dtype() == v_.dtype(),
             op, "new keys ", shape_str(k_new.shape()), " and values ", shape_str(v_new.shape()),
             " do not fit the cache's ", shape_str(k().shape()), " and ", shape_str(v().shape()));
  if (any_requires_grad({&k_new, &v_new}) || k_.requires_grad() || v_.requires_grad()) {
    // Writing into the buffers would be an in-place op on tensors the graph saved.
    assign(cat({k(), k_new}, 1), cat({v(), v_new}, 1));
    return;
  }
  NoGradGuard no_grad;
  if (length_ + L > capacity()) {
    // Doubling keeps the copies of old positions at O(1) per position over a sequence.
    const int64_t cap = std::max({2 * capacity(), length_ + L, int64_t{16}});
    auto grown = [&](const Tensor& buf) {
      Tensor b = kiln::empty({buf.size(0), cap, buf.size(2)}, TensorOptions(buf.dtype()).device(buf.device()));
      b.narrow(1, 0, length_).copy_(buf.narrow(1, 0, length_));
      return b;
    };
    k_ = grown(k_);
    v_ = grown(v_);
  }
  k_.narrow(1, length_, L).copy_(k_new);
  v_.narrow(1, length_, L).copy_(v_new);
  length_ += L;
}

void KVCache::select_batch(const Tensor& index) {
  if (empty()) return;
  NoGradGuard no_grad;
  if (capacity() == length_) {  // no room to keep (a cross-attention's memory)
    k_ = index_select(k_, 0, index);
    v_ = index_select(v_, 0, index);
    return;
  }
  const char* op = "KVCache::select_batch";
  KILN_CHECK(index.defined() && index.dtype() == kInt64 && index.dim() == 1, op,
             "expected a 1-D int64 index of rows, got ",
             index.defined() ? dtype_name(index.dtype()) + std::string(" ") + shape_str(index.shape())
                             : std::string("undefined"));
  const int64_t n = batch();
  std::vector<int64_t> rows = index.to_vector<int64_t>();
  for (int64_t& r : rows) {
    KILN_CHECK(r >= -n && r < n, op, "index ", r, " is out of range for a cache of ", n, " rows");
    if (r < 0) r += n;
  }
  // Row by row into buffers of the same room: one copy of the filled part (index_select
  // and then a copy into the room would be two), and the next append does not grow.
  auto select = [&](const Tensor& buf) {
    Tensor b = kiln::empty({static_cast<int64_t>(rows.size()), capacity(), buf.size(2)},
                           TensorOptions(buf.dtype()).device(buf.device()));
    for (size_t i = 0; i < rows.size(); ++i)
      b.select(0, static_cast<int64_t>(i)).narrow(0, 0, length_).copy_(buf.select(0, rows[i]).narrow(0, 0, length_));
    return b;
  };
  k_ = select(k_);
  v_ = select(v_);
}

MultiheadAttention::MultiheadAttention(int64_t e, int64_t h, MultiheadAttentionOptions o)
    : Cloneable("MultiheadAttention"),
      embed_dim(e),
      num_heads(h),
      head_dim(h > 0 ? e / h : 0),
      kdim(o.kdim < 0 ? e : o.kdim),
      vdim(o.vdim < 0 ? e : o.vdim),
      dropout(o.dropout),
      batch_first(o.batch_first),
      add_zero_attn(o.add_zero_attn) {
  const char* op = "MultiheadAttention";
  KILN_CHECK(e > 0 && h > 0, op, "embed_dim and num_heads must be positive, got ", e, " and ", h);
  KILN_CHECK(e % h == 0, op, "embed_dim must be divisible by num_heads, got ", e, " and ", h);
  KILN_CHECK(kdim > 0 && vdim > 0, op, "kdim and vdim must be positive, got ", kdim, " and ", vdim);
  KILN_CHECK(dropout >= 0 && dropout <= 1, op, "dropout must be between 0 and 1, got ", dropout);
  qkv_same_embed_dim = kdim == e && vdim == e;
  if (qkv_same_embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({e, e}));
    k_proj_weight = register_parameter("k_proj_weight", empty({e, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({e, vdim}));
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * e}));
  if (o.add_bias_kv) {
    bias_k = register_parameter("bias_k", empty({1, 1, e}));
    bias_v = register_parameter("bias_v", empty({1, 1, e}));
  }
  out_proj = register_module("out_proj", std::make_shared<nn::Linear>(e, e, o.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  // PyTorch's choice: Xavier-uniform projections, zero biases, Xavier-normal bias_k/v;
  // out_proj keeps Linear's weight init but a zero bias.
  NoGradGuard no_grad;
  if (qkv_same_embed_dim) {
    nn::init::xavier_uniform_(in_proj_weight);
  } else {
    nn::init::xavier_uniform_(q_proj_weight);
    nn::init::xavier_uniform_(k_proj_weight);
    nn::init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    nn::init::zeros_(in_proj_bias);
    nn::init::zeros_(out_proj->bias);
  }
  if (bias_k.defined()) {
    nn::init::xavier_normal_(bias_k);
    nn::init::xavier_normal_(bias_v);
  }
}

MultiheadAttentionOptions MultiheadAttention::options() const {
  MultiheadAttentionOptions o;
  o.dropout = dropout;
  o.bias = in_proj_bias.defined();
  o.add_bias_kv = bias_k.defined();
  o.add_zero_attn = add_zero_attn;
  o.kdim = kdim;
  o.vdim = vdim;
  o.batch_first = batch_first;
  return o;
}

std::shared_ptr<nn::Module> MultiheadAttention::make_fresh() const {
  return std::make_shared<MultiheadAttention>(embed_dim, num_heads, options());
}

Tensor MultiheadAttention::project(const Tensor& x, int which) const {
  const Tensor& w = qkv_same_embed_dim ? in_proj_weight.narrow(0, which * embed_dim, embed_dim)
                                       : (which == 0 ? q_proj_weight : which == 1 ? k_proj_weight : v_proj_weight);
  Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, which * embed_dim, embed_dim) : Tensor();
  return linear(x, w, b);
}

std::pair<Tensor, Tensor> MultiheadAttention::project_kv(const Tensor& kv) const {
  if (!qkv_same_embed_dim) return {project(kv, 1), project(kv, 2)};
  Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, embed_dim, 2 * embed_dim) : Tensor();
  std::vector<Tensor> k_v = chunk(linear(kv, in_proj_weight.narrow(0, embed_dim, 2 * embed_dim), b), 2, -1);
  return {k_v[0], k_v[1]};
}

AttentionOutput MultiheadAttention::attend(Tensor q, Tensor k, Tensor v, Tensor mask, bool need_weights,
                                           bool average) {
  const int64_t N = q.size(0), L = q.size(1), E = embed_dim, H = num_heads, D = head_dim;
  if (bias_k.defined()) {
    // One more key and value, learned, that every query may attend to.
    k = cat({k, bias_k.expand({N, 1, E})}, 1);
    v = cat({v, bias_v.expand({N, 1, E})}, 1);
    mask = pad_mask(mask, 1);
  }
  const int64_t S = k.size(1);
  // (N, len, E) -> (N, H, len, D)
  q = q.reshape({N, L, H, D}).transpose(1, 2);
  k = k.reshape({N, S, H, D}).transpose(1, 2);
  v = v.reshape({N, S, H, D}).transpose(1, 2);
  if (add_zero_attn) {
    // A zero key and value: lets a query attend to "nothing".
    k = cat({k, zeros({N, H, 1, D}, TensorOptions(k.dtype()).device(k.device()))}, 2);
    v = cat({v, zeros({N, H, 1, D}, TensorOptions(v.dtype()).device(v.device()))}, 2);
    mask = pad_mask(mask, 1);
  }
  AttentionOutput a;
  if (need_weights) {
    a = attention(q, k, v, mask, dropout, training_effective());
  } else {
    // Fused: nothing of size (L, S) is kept for backward. Its bool masks say who may attend.
    Tensor allowed = mask.defined() && mask.dtype() == kBool ? logical_not(mask) : mask;
    a.output = kiln::scaled_dot_product_attention(q, k, v, allowed, training_effective() ? dropout : 0.0);
  }
  // (N, H, L, D) -> (N, L, E)
  Tensor out = out_proj->forward(a.output.transpose(1, 2).reshape({N, L, E}));
  Tensor weights;
  if (need_weights) weights = average ? mean(a.weights, {1}) : a.weights;
  return {out, weights};
}

AttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const Tensor& key_padding_mask, bool need_weights,
                                            const Tensor& attn_mask, bool average_attn_weights) {
  const char* op = "MultiheadAttention";
  KILN_CHECK(query.defined() && key.defined() && value.defined(), op, "query, key and value must be defined");
  const bool batched = query.dim() == 3;
  KILN_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(), op,
             "query, key and value must all be 3-D (batched) or 2-D (unbatched), got shapes ",
             shape_str(query.shape()), ", ", shape_str(key.shape()), " and ", shape_str(value.shape()));
  KILN_CHECK(is_floating(query.dtype()) && key.dtype() == query.dtype() && value.dtype() == query.dtype(), op,
             "query, key and value must share one floating dtype, got ", dtype_name(query.dtype()), ", ",
             dtype_name(key.dtype()), " and ", dtype_name(value.dtype()));
  // Batch-first views: (N, L, E).
  auto to_bf = [&](const Tensor& t) { return !batched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1); };
  Tensor q = to_bf(query), k = to_bf(key), v = to_bf(value);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1), H = num_heads;
  KILN_CHECK(q.size(2) == embed_dim && k.size(2) == kdim && v.size(2) == vdim, op,
             "expected feature sizes query ", embed_dim, ", key ", kdim, ", value ", vdim, ", got shapes ",
             shape_str(query.shape()), ", ", shape_str(key.shape()), " and ", shape_str(value.shape()));
  KILN_CHECK(k.size(0) == N && v.size(0) == N && v.size(1) == S, op,
             "query, key and value disagree on batch or key length: shapes ", shape_str(query.shape()), ", ",
             shape_str(key.shape()), " and ", shape_str(value.shape()));

  // Masks, as shapes broadcastable to (N, H, L, S).
  Tensor mask;
  if (attn_mask.defined()) {
    check_mask_dtype(op, attn_mask, "attn_mask", q.dtype());
    if (attn_mask.dim() == 2) {
      KILN_CHECK(attn_mask.size(0) == L && attn_mask.size(1) == S, op, "the 2-D attn_mask should be (", L, ", ",
                 S, "), got ", shape_str(attn_mask.shape()));
      mask = attn_mask;
    } else {
      int64_t batch_heads = batched ? N * H : H;
      KILN_CHECK(attn_mask.dim() == 3 && attn_mask.size(0) == batch_heads && attn_mask.size(1) == L &&
                     attn_mask.size(2) == S,
                 op, "the 3-D attn_mask should be (", batch_heads, ", ", L, ", ", S, "), got ",
                 shape_str(attn_mask.shape()));
      mask = attn_mask.reshape({N, H, L, S});
    }
  }
  if (key_padding_mask.defined()) {
    check_mask_dtype(op, key_padding_mask, "key_padding_mask", q.dtype());
    Shape want = batched ? Shape{N, S} : Shape{S};
    KILN_CHECK(key_padding_mask.shape() == want, op, "key_padding_mask should be ", shape_str(want), ", got ",
               shape_str(key_padding_mask.shape()));
    mask = combine_masks(mask, key_padding_mask.reshape({N, 1, 1, S}));
  }

  Tensor qp, kp, vp;
  if (qkv_same_embed_dim && query.same_storage(key) && key.same_storage(value) &&
      query.impl() == key.impl() && key.impl() == value.impl()) {
    // Self-attention: one GEMM against the stacked (3E, E) weight.
    std::vector<Tensor> qkv = chunk(linear(q, in_proj_weight, in_proj_bias), 3, -1);
    qp = qkv[0], kp = qkv[1], vp = qkv[2];
  } else if (key.impl() == value.impl()) {
    qp = project(q, 0);
    std::tie(kp, vp) = project_kv(k);
  } else {
    qp = project(q, 0), kp = project(k, 1), vp = project(v, 2);
  }
  AttentionOutput a = attend(qp, kp, vp, mask, need_weights, average_attn_weights);
  if (!batched) {
    a.output = a.output.squeeze(0);
    if (a.weights.defined()) a.weights = a.weights.squeeze(0);
  } else if (!batch_first) {
    a.output = a.output.transpose(0, 1);
  }
  return a;
}

AttentionOutput MultiheadAttention::forward_cached(const Tensor& query, const Tensor& kv_input, KVCache& cache,
                                                   bool static_kv, const Tensor& key_padding_mask,
                                                   bool need_weights, bool average_attn_weights) {
  const char* op = "MultiheadAttention::forward_cached";
  KILN_CHECK(query.defined() && query.dim() == 3 && query.size(2) == embed_dim, op,
             "expected a 3-D query with ", embed_dim, " features, got ", shape_or_undefined(query));
  auto to_bf = [&](const Tensor& t) { return batch_first ? t : t.transpose(0, 1); };
  Tensor q = to_bf(query);
  const int64_t N = q.size(0), L = q.size(1);
  if (!static_kv || cache.empty()) {
    KILN_CHECK(kv_input.defined() && kv_input.dim() == 3, op, "expected a 3-D key/value input, got ",
               shape_or_undefined(kv_input));
    Tensor kv = to_bf(kv_input);
    KILN_CHECK(kv.size(0) == N && kv.size(2) == kdim && kdim == vdim, op, "key/value input ",
               shape_str(kv_input.shape()), " does not match query ", shape_str(query.shape()));
    auto [k_new, v_new] = project_kv(kv);
    if (static_kv) {
      cache.assign(k_new, v_new);
    } else {
      cache.append(k_new, v_new);
    }
  }
  KILN_CHECK(cache.batch() == N, op, "the cache holds a batch of ", cache.batch(), ", the query ", N);
  const int64_t S = cache.length();
  Tensor mask;
  if (!static_kv && L > 1) {
    // New query i sits at position S - L + i and may see keys up to there.
    Tensor qi = arange(static_cast<double>(S - L), static_cast<double>(S), 1.0, TensorOptions(kInt64).device(q.device()));
    Tensor kj = arange(static_cast<double>(S), TensorOptions(kInt64).device(q.device()));
    mask = gt(kj.unsqueeze(0), qi.unsqueeze(1));  // (L, S)
  }
  if (key_padding_mask.defined()) {
    KILN_CHECK(key_padding_mask.shape() == Shape({N, S}), op, "key_padding_mask should be (", N, ", ", S,
               "), got ", shape_str(key_padding_mask.shape()));
    mask = combine_masks(mask, key_padding_mask.reshape({N, 1, 1, S}));
  }
  AttentionOutput a = attend(project(q, 0), cache.k(), cache.v(), mask, need_weights, average_attn_weights);
  if (!batch_first) a.output = a.output.transpose(0, 1);
  return a;
}

}  // namespace kiln::transformer
