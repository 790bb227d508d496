#pragma once
// Helpers shared by the indexing, scatter, scan and sort ops (gather, scatter, index_add,
// cumsum, sort, topk): torch's rank rule that a 0-D tensor counts as 1-D of size 1 there.
#include "ops/op_helpers.h"

namespace kiln::detail {

// The rank and sizes a tensor has under that rule.
inline int64_t rank_at_least_1(const Tensor& t) { return std::max<int64_t>(1, t.dim()); }
inline int64_t size_at_least_1d(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }

// t itself, or a 0-D t viewed as (1) (same storage, no history): what kernels are given.
inline Tensor as_1d_view(const Tensor& t) { return t.dim() == 0 ? make_view(t, {1}, {1}, t.offset()) : t; }

}  // namespace kiln::detail
