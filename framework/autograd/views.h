#pragma once
// Views in the graph, with torch's semantics.
//
// A view op (view, reshape, squeeze, unsqueeze, permute, transpose, expand, slice,
// narrow, select, split, chunk) marks its result as a view of its input's base: the
// tensor that owns the storage's history (TensorImpl::view_base). Two things follow.
//
//  - An in-place op recorded on a view rebases the base's history (torch's CopySlices):
//    the base's grad_fn becomes a node that passes the base's gradient through unchanged
//    outside the view's window and through the in-place op's backward inside it; the
//    view's grad_fn becomes that window of the base's new history.
//  - A view whose storage was written in place since its grad_fn was set (through the
//    base or another view) gets, when its grad_fn is next asked for, a fresh one: the
//    window of its base's current history (torch's AsStridedBackward).
#include <memory>

#include "node.h"

namespace kiln {

// Marks `view`, just made by a view op from `of`, as a view of of's base.
void mark_view(const Tensor& view, const Tensor& of);

// Gives `view` a fresh grad_fn if its storage was written in place since its grad_fn was
// set and its base requires grad. Cheap when nothing changed.
void refresh_view_slow(TensorImpl& view);
inline void refresh_view(TensorImpl& view) {
  if (view.view_base && view.storage->version() != view.view_version) refresh_view_slow(view);
}

// Records in-place op `fn` on `view`: `base_edge` is the base's old history (taken before
// the write), `operand_edges` the operands'; fn maps the gradient of the view's new value
// to {the gradient of its old value, the operands' gradients}.
void rebase_view(const char* op, const Tensor& view, std::shared_ptr<Node> base_edge,
                 std::vector<std::shared_ptr<Node>> operand_edges, BackwardFn fn);

}  // namespace kiln
