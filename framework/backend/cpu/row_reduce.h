#pragma once
// Row kernels shared by softmax and cross-entropy, written so that GCC vectorizes them
// (eight independent lanes instead of one serial accumulator) in KILN_MULTIVERSION
// callers. Rows are contiguous.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "vec_math.h"

namespace kiln::cpu::rows {

constexpr int kLanes = 8;

// max of x (n); -inf for an empty or fully -inf row.
template <class T>
inline T max(const T* x, int64_t n) {
  T lane[kLanes];
  for (int k = 0; k < kLanes; ++k) lane[k] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] = x[i + k] > lane[k] ? x[i + k] : lane[k];
  }
  T m = -std::numeric_limits<T>::infinity();
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int k = 0; k < kLanes; ++k) m = lane[k] > m ? lane[k] : m;
  return m;
}

// Σ exp(x - shift) over x (n); also writes the exponentials to y when y is not null.
template <class T>
inline double sum_exp(const T* x, T shift, T* y, int64_t n) {
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
inline double sum(const T* x, int64_t n) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += x[i + k];
  }
  double s = 0;
  for (; i < n; ++i) s += x[i];
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

// Σ (x - mu)^2 over x (n).
template <class T>
inline double sum_sq_dev(const T* x, T mu, int64_t n) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += (x[i + k] - mu) * (x[i + k] - mu);
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(x[i] - mu) * (x[i] - mu);
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

template <class T>
inline double dot(const T* a, const T* b, int64_t n) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lane[k] += a[i + k] * b[i + k];
  }
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  for (int k = 0; k < kLanes; ++k) s += lane[k];
  return s;
}

}  // namespace kiln::cpu::rows
