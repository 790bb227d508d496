#pragma once
// What the ops see of autocast (autocast.h): whether it applies to an op's operands and
// the bfloat16 operand a product takes. Private to the library.
#include <initializer_list>
#include <utility>

#include "../core/tensor.h"

namespace kiln::detail {

// Whether autocast rules this op: it is on for this thread and every defined operand is
// float32 or bfloat16 (a float64 operand keeps the op as it is without autocast; other
// dtypes are for the op's own checks to refuse).
bool autocast_applies(std::initializer_list<const Tensor*> operands);

// t as a product's bfloat16 operand under autocast, detached (the op records its own
// node on t): t itself when already bfloat16; read from this thread's cache when it holds
// t's storage (a weight, or what autocast_share put there); for a leaf that requires grad
// (a weight) or a view of one, the weight's copy, made and cached once per version while
// the outermost guard lives; otherwise a fresh copy rounded to nearest even (a dense t
// keeps its layout, a dim broadcast with stride 0 is converted once). Outside every guard
// (backward) nothing is cached. `op` names the op in an allocation failure.
Tensor autocast_operand(const Tensor& t, const char* op);

// The bfloat16 copy of t, a float32 tensor that an op keeps for backward and a product
// reads too (relu_dropout's output, attention's output and its q, k and v): made now and
// cached, so that the product reuses it and the graph keeps one bfloat16 copy instead of
// t itself and a copy. A slice of a dense tensor at most 4 times its size (q, k and v
// of one projection) caches that tensor whole. Inside a guard only; otherwise as
// autocast_operand.
Tensor autocast_share(const Tensor& t, const char* op);

// Makes low (bfloat16, contiguous, t's shape) the cached copy of t (float32, contiguous,
// as it is now) that autocast_share would make, for an op that wrote both in one pass;
// returns low. Inside a guard only (autocast_applies); counted as a conversion.
Tensor autocast_adopt(const Tensor& t, const Tensor& low);

// The bfloat16 copy this thread's cache holds of exactly t's elements (t float32 and
// dense: what autocast_share or autocast_adopt put there for it), flat and current;
// undefined when there is none. Counts no hit: for an op that leaves a recipe on the copy
// a later product will save (utils::checkpoint's outputs).
Tensor autocast_cached_copy(const Tensor& t);

// g (R, N) float32 as autocast_operand gives it, and its column sums (N, float32, the
// bits of sum(g, {0})): a linear's output gradient, the GEMMs' operand and the bias
// gradient's input, read once by the backend where g is contiguous and not cached.
std::pair<Tensor, Tensor> autocast_operand_and_column_sums(const Tensor& g, const char* op);

}  // namespace kiln::detail
