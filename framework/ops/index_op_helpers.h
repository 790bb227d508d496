#pragma once
// Helpers shared by the indexing, scatter, scan and sort ops (gather, scatter, index_add,
// cumsum, sort, topk): torch's rank rule that a 0-D tensor counts as 1-D of size 1 there.
#include <cmath>
#include <utility>

#include "op_helpers.h"

namespace kiln::detail {

// The rank and sizes a tensor has under that rule.
inline int64_t rank_at_least_1(const Tensor& t) { return std::max<int64_t>(1, t.dim()); }
inline int64_t size_at_least_1d(const Tensor& t, int64_t d) { return t.dim() == 0 ? 1 : t.size(d); }

// t itself, or a 0-D t viewed as (1) (same storage, no history): what kernels are given.
inline Tensor as_1d_view(const Tensor& t) { return t.dim() == 0 ? make_view(t, {1}, {1}, t.offset()) : t; }

// Throws "[op] <what> v cannot be converted to int64 without overflow" when the scalar v,
// headed for an int64 tensor, has no int64 value (NaN, inf, or outside [-2^63, 2^63):
// converting it would be undefined behaviour).
inline void check_int64_scalar(const char* op, const char* what, double v) {
  constexpr double kTwo63 = 9223372036854775808.0;
  KILN_CHECK(std::isfinite(v) && v >= -kTwo63 && v < kTwo63, op, what, " ", v,
             " cannot be converted to int64 without overflow");
}

// The element offsets [lo, hi] that t spans in its storage (t non-empty).
inline std::pair<int64_t, int64_t> storage_span(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = t.stride(d) * (t.size(d) - 1);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

// What torch asserts before an in-place scatter or index_add: self's elements are
// distinct in memory (no broadcast, stride-0 dim) and apart from the tensors the op
// reads. Otherwise one thread's writes could race with another's reads or writes.
inline void check_inplace_no_overlap(const char* op, const Tensor& self, std::initializer_list<const Tensor*> reads) {
  if (self.numel() == 0) return;
  for (int64_t d = 0; d < self.dim(); ++d) {
    KILN_CHECK(self.stride(d) != 0 || self.size(d) == 1, op, "self of shape ", shape_str(self.shape()),
               " has several elements at one memory location (stride 0 at dim ", d,
               ", an expanded tensor); clone() it before writing into it");
  }
  const auto [lo, hi] = storage_span(self);
  for (const Tensor* t : reads) {
    if (t->numel() == 0 || !t->same_storage(self)) continue;
    const auto [tlo, thi] = storage_span(*t);
    KILN_CHECK(thi < lo || tlo > hi, op, "an input and self (the written-to tensor) refer to the same memory; "
               "clone() the input first");
  }
}

}  // namespace kiln::detail
