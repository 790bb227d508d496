// LayerNorm over rows: x (rows, n) -> y (rows, n), mean (rows), rstd (rows).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/parallel.h"

namespace kiln::cpu {

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  visit_floating("layer_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = y.data<T>();
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n * 4, 1)),
                 [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = px + r * n;
        T* yr = py + r * n;
        // Two passes (mean, then centred squares): no cancellation for large means.
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += xr[i];
        const T mu = static_cast<T>(s / static_cast<double>(n));
        double v = 0;
        for (int64_t i = 0; i < n; ++i) {
          double c = static_cast<double>(xr[i]) - mu;
          v += c * c;
        }
        const T rs = static_cast<T>(1.0 / std::sqrt(v / static_cast<double>(n) + eps));
        pm[r] = mu;
        pr[r] = rs;
        for (int64_t i = 0; i < n; ++i) {
          T h = (xr[i] - mu) * rs;
          if (pw) h *= pw[i];
          if (pb) h += pb[i];
          yr[i] = h;
        }
      }
    });
  });
}

// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w, xhat = (x - mean) * rstd;
// dw = sum_rows g * xhat; db = sum_rows g. Rows are split into chunks, each with its own
// partial dw/db, summed at the end.
void CpuBackend::layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  visit_floating("layer_norm_backward", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pg = g.data<T>();
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    T* pgx = grad_x.defined() ? grad_x.data<T>() : nullptr;
    const bool want_wb = grad_weight.defined() || grad_bias.defined();
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, 4 * get_num_threads()));
    std::vector<double> part_w(want_wb ? chunks * n : 0, 0.0), part_b(want_wb ? chunks * n : 0, 0.0);
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        int64_t r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
        double* dw = want_wb ? part_w.data() + c * n : nullptr;
        double* db = want_wb ? part_b.data() + c * n : nullptr;
        for (int64_t r = r0; r < r1; ++r) {
          const T* gr = pg + r * n;
          const T* xr = px + r * n;
          const T mu = pm[r], rs = pr[r];
          double s_gw = 0, s_gwx = 0;
          for (int64_t i = 0; i < n; ++i) {
            T xh = (xr[i] - mu) * rs;
            T gw = pw ? gr[i] * pw[i] : gr[i];
            s_gw += gw;
            s_gwx += static_cast<double>(gw) * xh;
            if (dw) {
              dw[i] += static_cast<double>(gr[i]) * xh;
              db[i] += gr[i];
            }
          }
          if (!pgx) continue;
          const T m_gw = static_cast<T>(s_gw / static_cast<double>(n));
          const T m_gwx = static_cast<T>(s_gwx / static_cast<double>(n));
          T* gxr = pgx + r * n;
          for (int64_t i = 0; i < n; ++i) {
            T xh = (xr[i] - mu) * rs;
            T gw = pw ? gr[i] * pw[i] : gr[i];
            gxr[i] = rs * (gw - m_gw - xh * m_gwx);
          }
        }
      }
    });
    if (!want_wb) return;
    T* gwp = grad_weight.defined() ? grad_weight.data<T>() : nullptr;
    T* gbp = grad_bias.defined() ? grad_bias.data<T>() : nullptr;
    for (int64_t i = 0; i < n; ++i) {
      double sw = 0, sb = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        sw += part_w[c * n + i];
        sb += part_b[c * n + i];
      }
      if (gwp) gwp[i] = static_cast<T>(sw);
      if (gbp) gbp[i] = static_cast<T>(sb);
    }
  });
}

}  // namespace kiln::cpu
