#pragma once
// Row kernels shared by softmax and cross-entropy, written so that GCC vectorizes them
// (eight independent lanes instead of one serial accumulator) in KILN_MULTIVERSION
// callers. Rows are contiguous.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/multiversion.h"
#include "vec_math.h"

namespace kiln::cpu::rows {

constexpr int kLanes = 8;

// kLanes values of T as one vector. Lane k takes elements k, k + kLanes, ... as an array
// of kLanes accumulators would, so the sums have the same bits, but GCC keeps the vector
// in a register: the arrays were left scalar (max) or shuffled lane by lane (sum in
// add_layer_norm, layer_norm's backward). Loads go through memcpy (rows need not be
// aligned), and no function takes or returns one (that would change the ABI between
// the multiversioned clones).
template <class T>
using Lanes __attribute__((vector_size(kLanes * sizeof(T)))) = T;

// max of x (n); -inf for an empty or fully -inf row.
template <class T>
KILN_INLINE_IN_CLONES T max(const T* x, int64_t n) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  Lanes<T> lane;
  for (int k = 0; k < kLanes; ++k) lane[k] = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes<T> v;
    std::memcpy(&v, x + i, sizeof v);
    lane = v > lane ? v : lane;
  }
  T m = kNegInf;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int k = 0; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

// Σ exp(x - shift) over x (n); also writes the exponentials to y when y is not null.
template <class T>
KILN_INLINE_IN_CLONES double sum_exp(const T* x, T shift, T* y, int64_t n) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      T e = vec::exp(x[i + k] - shift);
      if (y) y[i + k] = e;
      lane[k] += e;
    }
  }
  double s = 0;
  for (; i < n; ++i) {
    T e = vec::exp(x[i] - shift);
    if (y) y[i] = e;
    s += e;
  }
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// Σ x (n), and Σ a·b (n).
template <class T>
KILN_INLINE_IN_CLONES double sum(const T* x, int64_t n) {
  Lanes<T> lane = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes<T> v;
    std::memcpy(&v, x + i, sizeof v);
    lane += v;
  }
  double s = 0;
  for (; i < n; ++i) s += x[i];
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// Σ (x - mu)^2 over x (n).
template <class T>
KILN_INLINE_IN_CLONES double sum_sq_dev(const T* x, T mu, int64_t n) {
  Lanes<T> lane = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes<T> v;
    std::memcpy(&v, x + i, sizeof v);
    const Lanes<T> d = v - mu;
    lane += d * d;
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(x[i] - mu) * (x[i] - mu);
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

template <class T>
KILN_INLINE_IN_CLONES double dot(const T* a, const T* b, int64_t n) {
  Lanes<T> lane = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes<T> va, vb;
    std::memcpy(&va, a + i, sizeof va);
    std::memcpy(&vb, b + i, sizeof vb);
    lane += va * vb;
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

}  // namespace kiln::cpu::rows
