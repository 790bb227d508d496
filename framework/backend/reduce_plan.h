#pragma once
// How a backend reduces several dims of a contiguous tensor: one pass per maximal run of
// neighbouring reduced dims, the last run first. Each pass views its input as
// (A, R, B), R the run, and leaves a contiguous tensor of out_shape (the run set to 1).
#include <cstdint>
#include <vector>

#include "../core/shape.h"

namespace kiln {

struct ReducePass {
  int64_t A, R, B;
  Shape out_shape;
};

// dims sorted, within shape's rank.
inline std::vector<ReducePass> reduce_plan(const Shape& shape, const std::vector<int64_t>& dims) {
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, last]
  for (int64_t d : dims) {
    if (!runs.empty() && runs.back().second + 1 == d) runs.back().second = d;
    else runs.push_back({d, d});
  }
  std::vector<ReducePass> passes;
  Shape cur = shape;
  for (size_t i = runs.size(); i-- > 0;) {
    const auto [first, last] = runs[i];
    ReducePass p{1, 1, 1, cur};
    for (int64_t d = 0; d < static_cast<int64_t>(cur.size()); ++d) {
      if (d < first) p.A *= cur[d];
      else if (d <= last) p.R *= cur[d];
      else p.B *= cur[d];
    }
    for (int64_t d = first; d <= last; ++d) p.out_shape[d] = 1;
    cur = p.out_shape;
    passes.push_back(std::move(p));
  }
  return passes;
}

}  // namespace kiln
