#include "transformer/masks.h"

#include <limits>

namespace kiln::transformer {
namespace {

void check_ids(const char* op, const Tensor& seq, const char* what) {
  KILN_CHECK(seq.defined(), op, what, " is undefined");
  KILN_CHECK(seq.dtype() == kInt64, op, what, " must be int64 token ids, got ", dtype_name(seq.dtype()));
  KILN_CHECK(seq.dim() == 2, op, what, " must be 2-D (batch, length), got shape ", shape_str(seq.shape()));
}

}  // namespace

Tensor attn_pad_mask(const Tensor& seq_q, const Tensor& seq_k, int64_t pad_id) {
  check_ids("attn_pad_mask", seq_q, "seq_q");
  check_ids("attn_pad_mask", seq_k, "seq_k");
  KILN_CHECK(seq_q.size(0) == seq_k.size(0), "attn_pad_mask", "batch sizes differ: seq_q ",
             shape_str(seq_q.shape()), ", seq_k ", shape_str(seq_k.shape()));
  // (B, 1, Lk) expanded over the queries, as the seed does (a view, no copy).
  return eq(seq_k, static_cast<double>(pad_id)).unsqueeze(1).expand({seq_q.size(0), seq_q.size(1), seq_k.size(1)});
}

Tensor causal_mask(int64_t size, Device device) {
  KILN_CHECK(size >= 0, "causal_mask", "size must be non-negative, got ", size);
  Tensor i = arange(static_cast<double>(size), TensorOptions(kInt64).device(device));
  return gt(i.unsqueeze(0), i.unsqueeze(1));  // [q, k] = k > q
}

Tensor attn_subsequence_mask(const Tensor& seq) {
  check_ids("attn_subsequence_mask", seq, "seq");
  return causal_mask(seq.size(1), seq.device()).unsqueeze(0).expand({seq.size(0), seq.size(1), seq.size(1)});
}

Tensor key_padding_mask(const Tensor& seq, int64_t pad_id) {
  check_ids("key_padding_mask", seq, "seq");
  return eq(seq, static_cast<double>(pad_id));
}

Tensor generate_square_subsequent_mask(int64_t size, TensorOptions opts) {
  KILN_CHECK(size >= 0, "generate_square_subsequent_mask", "size must be non-negative, got ", size);
  KILN_CHECK(is_floating(opts.dtype_), "generate_square_subsequent_mask", "dtype must be floating, got ",
             dtype_name(opts.dtype_));
  return masked_fill(zeros({size, size}, opts), causal_mask(size, opts.device_),
                     -std::numeric_limits<double>::infinity());
}

Tensor decoder_self_attn_mask(const Tensor& tgt, int64_t pad_id) {
  return logical_or(attn_pad_mask(tgt, tgt, pad_id), attn_subsequence_mask(tgt));
}

Tensor combine_masks(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  const double inf = std::numeric_limits<double>::infinity();
  bool ab = a.dtype() == kBool, bb = b.dtype() == kBool;
  if (ab && bb) return logical_or(a, b);
  // -inf where the bool mask is true, in the broadcast shape of the two: a (L, S) causal
  // mask with an (N, 1, 1, S) padding mask gives (N, 1, L, S). (masked_fill keeps the
  // float mask's shape and cannot do this.)
  auto fill = [&](const Tensor& bool_mask, const Tensor& float_mask) {
    return where(bool_mask, full({}, -inf, TensorOptions(float_mask.dtype()).device(float_mask.device())),
                 float_mask);
  };
  if (ab) return fill(a, b);
  if (bb) return fill(b, a);
  return add(a, b);
}

}  // namespace kiln::transformer
