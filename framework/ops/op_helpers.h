#pragma once
// Internal helpers shared by the op files (not part of the public API).
#include "../autograd/node.h"
#include "../backend/backend.h"
#include "ops.h"

namespace kiln::detail {

// A fresh contiguous tensor like `ref` (same device) with the given shape and dtype;
// a shape too large or memory refused is "[op] …".
inline Tensor new_tensor(const Shape& shape, DType dtype, const Tensor& ref, const char* op = "empty") {
  return empty_for(op, shape, TensorOptions(dtype).device(ref.device()));
}

// Throws "[op] expected a floating-point tensor, got int64" for non-float inputs.
inline void check_floating(const char* op, const Tensor& t, const char* what = "input") {
  KILN_CHECK(t.defined(), op, what, " is an undefined tensor");
  KILN_CHECK(is_floating(t.dtype()), op, "expected a floating-point ", what,
             " (float32, float64 or bfloat16), got ", dtype_name(t.dtype()));
}

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  KILN_CHECK(t.defined(), op, what, " is an undefined tensor");
}

// Gradient g cast back to the dtype of the input it belongs to.
inline Tensor grad_for(const Tensor& g, const Tensor& input) {
  return g.dtype() == input.dtype() ? g : g.to(input.dtype());
}

// The scalar of a scalar-operand kernel (UnaryOp) on a `t` tensor, as torch's bfloat16
// kernels take it: add, sub and rsub round it to bfloat16 first; mul, div and the rest
// use it in float32. Other dtypes: as given.
inline double kernel_scalar(UnaryOp kind, DType t, double v) {
  if (t == kBFloat16 && (kind == UnaryOp::AddScalar || kind == UnaryOp::RsubScalar))
    return static_cast<double>(static_cast<float>(bfloat16(v)));
  return v;
}

// Whether `t`, a tensor its caller gave up (an rvalue argument), is this call's alone:
// the only handle to it, no view (a view's history is its base's), and no leaf that
// requires grad (its gradient accumulates into it).
inline bool sole_handle(const Tensor& t) {
  if (!t.defined() || t.impl_ptr().use_count() != 1) return false;
  const TensorImpl& impl = *t.impl();
  return !impl.view_base && (impl.grad_fn || !impl.requires_grad);
}

// Whether an op may write its result over given-up `t`: besides sole_handle, nothing else
// can reach its memory (no view or saved tensor shares the storage, no recipe rebuilds
// it: autograd/recompute.h) and it fills its storage densely. What keeps the storage
// weakly (autocast's cast cache) sees the write as a new version.
inline bool reusable(const Tensor& t) {
  if (!sole_handle(t)) return false;
  const TensorImpl& impl = *t.impl();
  return impl.storage.use_count() == 1 && !impl.storage->recompute() && impl.offset == 0 && t.is_contiguous() &&
         impl.storage->nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
}

// A new tensor over reusable t's storage, at a new version, for a result written over it.
inline Tensor take_over(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = t.shape();
  impl->strides = t.impl()->strides;
  impl->dtype = t.dtype();
  impl->storage->bump_version();
  return Tensor(std::move(impl));
}

// Whether input i of a node needs a gradient.
inline bool needs_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

// The shape of x reduced over sorted `dims` with keepdim.
inline Shape keepdim_shape(const Shape& s, const std::vector<int64_t>& dims) {
  Shape out = s;
  for (int64_t d : dims) out[d] = 1;
  return out;
}

// A new view of x's storage with the given geometry (no history).
Tensor make_view(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset);

// ---------------------------------------------------------------- in-place ops
// Every in-place op (add_, mul_, copy_, masked_fill_, …; scatter_ and friends too) runs
// through apply_inplace, which applies torch's rules in one place:
//   1. self is defined and no two of its elements share memory (an expanded view);
//   2. the op is recorded when grad mode is on and self or an operand requires grad;
//      then self must not be a leaf that requires grad ("[add_] a leaf tensor that
//      requires grad is being used in an in-place operation"), nor a view of one, nor a
//      view made under NoGradGuard. Optimizers and initialisers run under NoGradGuard:
//      there nothing is checked beyond 1, nothing is allocated, nothing is recorded;
//   3. when recorded, make_backward() runs BEFORE the write, so it can save what its
//      backward needs (SavedTensor of an operand, a clone of self's old value). It
//      returns g -> {gradient of self's old value, then one per operand, in order}
//      (undefined where none: the old value's is then zero);
//   4. write() computes the new values into self (under NoGradGuard when recording);
//   5. the storage's version is bumped: a backward that saved the old values throws;
//   6. when recorded, self's grad_fn becomes a node named `op` with edges to self's old
//      history and the operands'; when self is a view, its base's history is rebased
//      instead (torch's CopySlices, autograd/views.h).
// Validate the operands before calling it. A whole op:
//   Tensor& Tensor::mul_(double v) {
//     Tensor& self = *this;
//     return detail::apply_inplace("mul_", self, {},
//         [&] { backend_for(self.device()).unary(UnaryOp::MulScalar, self, self, v, 0); },
//         [&]() -> BackwardFn { return [v](const Tensor& g) -> TensorList { return {mul(g, v)}; }; });
//   }
// An op whose derivative is not written yet omits make_backward: recording it throws
// "[op] the derivative for op is not implemented" before anything is written.
bool inplace_prologue(const char* op, const Tensor& self, std::initializer_list<const Tensor*> operands);
struct InplaceEdges {
  std::shared_ptr<Node> self_edge;  // self's old history (its base's, for a view)
  std::vector<std::shared_ptr<Node>> operands;
};
InplaceEdges inplace_edges(const Tensor& self, std::initializer_list<const Tensor*> operands);
void inplace_record(const char* op, const Tensor& self, InplaceEdges edges, BackwardFn fn);

template <class Write, class MakeBackward>
Tensor& apply_inplace(const char* op, Tensor& self, std::initializer_list<const Tensor*> operands, Write&& write,
                      MakeBackward&& make_backward) {
  if (!inplace_prologue(op, self, operands)) {
    write();
    self.bump_version();
    return self;
  }
  InplaceEdges edges = inplace_edges(self, operands);  // before the write changes anything
  BackwardFn fn = make_backward();
  {
    NoGradGuard no_grad;
    write();
  }
  self.bump_version();
  inplace_record(op, self, std::move(edges), std::move(fn));
  return self;
}

template <class Write>
Tensor& apply_inplace(const char* op, Tensor& self, std::initializer_list<const Tensor*> operands, Write&& write) {
  return apply_inplace(op, self, operands, std::forward<Write>(write), [op]() -> BackwardFn {
    KILN_FAIL(op, "the derivative for ", op, " is not implemented (self or an operand requires grad)");
  });
}

// The check of in-place ops not yet converted to apply_inplace: self defined, and not
// requiring grad under grad mode (they record nothing).
void check_inplace(const char* op, const Tensor& self);

// The layout of the class-index losses (cross_entropy, nll_loss): input (N, C, d1, …)
// or (C), target (N, d1, …) or (). Checks the target's shape against the input and
// brings the class dim last, flattened: rows (N·d1·…, C), a view when it can be.
// target_shape is also the shape of a reduction='none' result.
struct ClassRows {
  Tensor rows;
  Shape target_shape;
};
inline ClassRows class_rows(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.dim() >= 1, op, "input must have at least 1 dimension, got shape ", shape_str(input.shape()));
  ClassRows r;
  if (input.dim() == 1) {
    r.rows = input.unsqueeze(0);
  } else {
    r.target_shape = input.shape();
    r.target_shape.erase(r.target_shape.begin() + 1);
  }
  KILN_CHECK(target.shape() == r.target_shape, op, "expected target of shape ", shape_str(r.target_shape),
             " for input of shape ", shape_str(input.shape()), ", got ", shape_str(target.shape()));
  const int64_t C = input.dim() == 1 ? input.size(0) : input.size(1);
  KILN_CHECK(C > 0, op, "input has no classes (shape ", shape_str(input.shape()), ")");
  if (input.dim() > 1) {
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < input.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    r.rows = input.permute(perm).reshape({-1, C});
  }
  return r;
}

// Losses: Reduction::BatchMean belongs to kl_div only; the others call this.
inline void check_reduction(const char* op, Reduction r) {
  KILN_CHECK(r != Reduction::BatchMean, op, "reduction 'batchmean' is only supported by kl_div; use none, mean or sum");
}

// A class-weight tensor for `C` classes (cross_entropy, nll_loss): defined, 1-D of C
// elements, the input's dtype and device, not requiring grad (torch has no gradient for it).
inline void check_class_weight(const char* op, const Tensor& weight, const Tensor& input, int64_t C) {
  KILN_CHECK(weight.defined(), op, "weight is an undefined tensor");
  KILN_CHECK(weight.dim() == 1 && weight.size(0) == C, op, "weight tensor should be defined either for all ", C,
             " classes or no classes but got weight tensor of shape ", shape_str(weight.shape()));
  KILN_CHECK(weight.dtype() == input.dtype(), op, "weight has dtype ", dtype_name(weight.dtype()),
             ", expected the input's ", dtype_name(input.dtype()));
  KILN_CHECK(weight.device() == input.device(), op, "weight is on ", weight.device().str(), ", the input on ",
             input.device().str());
  KILN_CHECK(!any_requires_grad({&weight}), op,
             "not differentiable with respect to argument 'weight'; this input cannot have requires_grad=True "
             "(detach it)");
}

}  // namespace kiln::detail
