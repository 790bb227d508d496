#pragma once
// Column reductions, x (A, R, B) -> (A, B) over R, on blocks of (kColX, kColY) threads:
// 32 neighbouring columns read coalesced along B, 8 rows of threads splitting the rows
// (reductions over dims, the layer-norm weight and bias gradients; nvcc only).
#include <algorithm>
#include <cstdint>

namespace kiln::cuda {

constexpr int kColX = 32, kColY = 8;

// Row splits for a column sum of A·⌈B/32⌉ column chunks over R rows: enough blocks to
// fill the GPU (about 1024), none shorter than 64 rows. With few columns one block per
// chunk leaves most of it idle (a bias gradient: 512 columns of 6400 rows is 16 blocks).
// Each split's sums go to a scratch tensor, and a second pass adds the splits in a fixed
// order, so the result is the same on every run.
inline int64_t col_splits(int64_t A, int64_t R, int64_t B) {
  const int64_t blocks = A * ((B + kColX - 1) / kColX);
  return std::clamp<int64_t>(std::min<int64_t>(R / 64, 1024 / std::max<int64_t>(blocks, 1)), 1, 65535);
}

}  // namespace kiln::cuda
