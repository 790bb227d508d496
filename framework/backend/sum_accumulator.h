#pragma once
// The type a sum of T accumulates in, the same on every backend so that their sums
// agree: double for float (as fast where memory-bound, and far more accurate), int64
// for bool (counting), T itself otherwise.
#include <cstdint>

namespace kiln {

template <class T> struct SumAccumulator { using type = T; };
template <> struct SumAccumulator<float> { using type = double; };
template <> struct SumAccumulator<bool> { using type = int64_t; };

template <class T>
using sum_accumulator_t = typename SumAccumulator<T>::type;

}  // namespace kiln
