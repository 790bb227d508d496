// Rotary position embeddings (RoFormer, Su et al. 2021): each pair of features of a
// query or key at position p turned by the angle p * base^(-2i/d). The pairs are
// (x[2i], x[2i+1]) in the interleaved layout (llama.cpp's "normal" rope, GPT-J) and
// (x[i], x[i + d/2]) in the half-split one (Hugging Face's rotate_half, GPT-NeoX).
// Composed from the differentiable ops, so it runs and differentiates on every backend.
#include <cmath>

#include "ops/op_helpers.h"

namespace kiln {

// positions int64 (S) -> cos, sin (S, head_dim / 2), frequencies computed in float64.
RotaryTables rotary_tables(const Tensor& positions, int64_t head_dim, double base, TensorOptions opts) {
  KILN_CHECK(positions.defined() && positions.dtype() == kInt64 && positions.dim() == 1, "rotary_tables",
             "positions must be a 1-D int64 tensor, got ",
             positions.defined() ? dtype_name(positions.dtype()) + std::string(" of shape ") + shape_str(positions.shape())
                                 : std::string("an undefined tensor"));
  KILN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary_tables", "head_dim must be positive and even, got ", head_dim);
  KILN_CHECK(base > 0 && std::isfinite(base), "rotary_tables", "base must be positive and finite, got ", base);
  KILN_CHECK(is_floating(opts.dtype_), "rotary_tables", "the tables' dtype must be floating, got ",
             dtype_name(opts.dtype_));
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * static_cast<double>(i) / head_dim);
  Tensor angles = mul(positions.to(kCPU).to(kFloat64).unsqueeze(1), from_vector(inv_freq, {1, half}));
  return {cos(angles).to(opts.dtype_).to(opts.device_), sin(angles).to(opts.dtype_).to(opts.device_)};
}

// x (..., S, D), cos and sin broadcastable to (..., S, D/2) -> x's shape.
Tensor apply_rotary_emb(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  KILN_CHECK(x.defined() && cos.defined() && sin.defined(), "apply_rotary_emb", "x, cos and sin must be defined");
  detail::check_floating("apply_rotary_emb", x);
  KILN_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "apply_rotary_emb",
             "x's last dim must be even (pairs of features), got shape ", shape_str(x.shape()));
  KILN_CHECK(cos.shape() == sin.shape(), "apply_rotary_emb", "cos of shape ", shape_str(cos.shape()),
             " and sin of shape ", shape_str(sin.shape()), " differ");
  KILN_CHECK(cos.dim() >= 1 && cos.size(-1) * 2 == x.size(-1), "apply_rotary_emb", "cos and sin of shape ",
             shape_str(cos.shape()), " need a last dim of ", x.size(-1) / 2, " (half of x's ", x.size(-1), ")");
  KILN_CHECK(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), "apply_rotary_emb", "cos and sin have dtype ",
             dtype_name(cos.dtype()), ", x has ", dtype_name(x.dtype()));
  const int64_t half = x.size(-1) / 2;
  Shape half_shape = x.shape();
  half_shape.back() = half;
  KILN_CHECK(can_broadcast(cos.shape(), half_shape) && broadcast_shapes("apply_rotary_emb", cos.shape(), half_shape) == half_shape,
             "apply_rotary_emb", "cos and sin of shape ", shape_str(cos.shape()), " do not broadcast to x's pairs ",
             shape_str(half_shape));
  // Inference (nothing needs a gradient): the backend's one-pass kernel, the tables read
  // through their broadcast. Otherwise the composition below, which autograd differentiates.
  if (!any_requires_grad({&x, &cos, &sin}) && (x.dtype() == kFloat32 || x.dtype() == kFloat64)) {
    Backend& be = backend_of("apply_rotary_emb", {&x, &cos, &sin});
    const Tensor y = Tensor::empty(x.shape(), TensorOptions(x.dtype()).device(x.device()));
    be.rotary(x.contiguous().detach(), cos.detach().expand(half_shape), sin.detach().expand(half_shape), interleaved, y);
    return y;
  }
  if (interleaved) {
    Shape pairs = half_shape;
    pairs.push_back(2);
    const Tensor xp = x.reshape(pairs);
    const Tensor even = xp.select(-1, 0), odd = xp.select(-1, 1);
    return stack({sub(mul(even, cos), mul(odd, sin)), add(mul(odd, cos), mul(even, sin))}, -1).flatten(-2);
  }
  const Tensor first = x.narrow(-1, 0, half), second = x.narrow(-1, half, half);
  return cat({sub(mul(first, cos), mul(second, sin)), add(mul(second, cos), mul(first, sin))}, -1);
}

}  // namespace kiln
