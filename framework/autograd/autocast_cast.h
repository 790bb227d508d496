#pragma once
// What the ops see of autocast (autocast.h): whether it applies to an op's operands and
// the bfloat16 operand a product takes. Private to the library.
#include <initializer_list>

#include "../core/tensor.h"

namespace kiln::detail {

// Whether autocast rules this op: it is on for this thread and every defined operand is
// float32 or bfloat16 (a float64 operand keeps the op as it is without autocast; other
// dtypes are for the op's own checks to refuse).
bool autocast_applies(std::initializer_list<const Tensor*> operands);

// t as a product's bfloat16 operand under autocast, detached (the op records its own
// node on t): t itself when already bfloat16; for a leaf that requires grad (a weight),
// its copy from this thread's cache, made once per version while the outermost guard
// lives; otherwise a fresh copy rounded to nearest even. A dim broadcast with stride 0
// is converted once and stays stride 0. `op` names the op in an allocation failure.
Tensor autocast_operand(const Tensor& t, const char* op);

}  // namespace kiln::detail
