// Running sums along one dim, one line per thread at a time (dim_lines.h): each sum runs
// in element order, so results do not depend on the thread count.
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/dim_lines.h"
#include "backend/cpu/wrapping_sum.h"

namespace kiln::cpu {

// x (.., N, ..) -> out (.., N, ..): out[.., j, ..] = sum of x[.., i, ..] over i <= j, or over
// i >= j when reverse. float32 accumulates in double (torch's CPU accumulate type).
void CpuBackend::cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  KILN_CHECK(x.dtype() != kBool, "cumsum", "the kernel takes no bool tensors (convert to int64 first)");
  if (x.numel() == 0) return;
  const int64_t n = x.size(dim);
  const int64_t so = out.stride(dim), sx = x.stride(dim);
  const int64_t x_along = sx * static_cast<int64_t>(x.element_size());  // bytes
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
    for_each_line<2>({&out, &x}, dim, n,
                     [&](std::array<char*, 2> p, const std::array<int64_t, 2>& step, int64_t count) {
                       auto o = [&](int64_t l) { return reinterpret_cast<T*>(p[0] + l * step[0]); };
                       auto xi = [&](int64_t l) { return reinterpret_cast<const T*>(p[1] + l * step[1]); };
                       // Walk x in its memory order: along each line first when x's neighbours
                       // along a line are nearest (dim innermost), else across the lines, with
                       // one running sum per line. Each sum adds in line order either way.
                       if (std::abs(step[1]) >= std::abs(x_along)) {
                         for (int64_t l = 0; l < count; ++l) {
                           Acc acc = Acc(0);
                           for (int64_t k = 0; k < n; ++k) {
                             const int64_t j = reverse ? n - 1 - k : k;
                             acc = wrapping_add(acc, static_cast<Acc>(xi(l)[j * sx]));
                             o(l)[j * so] = static_cast<T>(acc);
                           }
                         }
                       } else {
                         auto acc = std::make_unique<Acc[]>(static_cast<size_t>(count));  // zeros
                         for (int64_t k = 0; k < n; ++k) {
                           const int64_t j = reverse ? n - 1 - k : k;
                           for (int64_t l = 0; l < count; ++l) {
                             acc[l] = wrapping_add(acc[l], static_cast<Acc>(xi(l)[j * sx]));
                             o(l)[j * so] = static_cast<T>(acc[l]);
                           }
                         }
                       }
                     });
  });
}

}  // namespace kiln::cpu
