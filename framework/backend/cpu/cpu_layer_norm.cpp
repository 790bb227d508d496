// LayerNorm over rows: x (rows, n) -> y (rows, n), mean (rows), rstd (rows); the same
// after a residual add (add_layer_norm), and the backward.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/bfloat16_convert.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/multiversion.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/row_reduce.h"

namespace kiln::cpu {
namespace {

// The most row chunks a backward cuts the rows into (each keeps a partial dw and db).
constexpr int64_t kMaxChunks = 64;

// One row: x (n) -> y (n), its mean and 1/std, given Σ x (`total`). Two passes (mean,
// then centred squares): no cancellation for large means.
template <class T>
inline void layer_norm_row_from_sum(const T* xr, double total, const T* pw, const T* pb, T* yr, int64_t n,
                                    double eps, T* mean, T* rstd) {
  const T mu = static_cast<T>(total / static_cast<double>(n));
  const double v = rows::sum_sq_dev(xr, mu, n);
  const T rs = static_cast<T>(1.0 / std::sqrt(v / static_cast<double>(n) + eps));
  *mean = mu;
  *rstd = rs;
  if (pw && pb) {
    for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rs * pw[j] + pb[j];
  } else {
    for (int64_t j = 0; j < n; ++j) {
      T h = (xr[j] - mu) * rs;
      if (pw) h *= pw[j];
      if (pb) h += pb[j];
      yr[j] = h;
    }
  }
}

// The factor rsqrt(mean(x²) + eps) of one row x (n). Float32 follows ggml's rms_norm to
// the bit (each square rounded to float, summed in order in double, the mean rounded to
// float, the rest in float): a 4-bit model quantises every normalised activation to 8
// bits, and one rounding that lands differently there moves every later layer, so only
// the same bits let a GGUF model pick llama.cpp's tokens. It is as accurate as a sum in
// float lanes; double rows keep double throughout.
inline float rms_factor(const float* x, int64_t n, double eps) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += static_cast<double>(x[j] * x[j]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + static_cast<float>(eps));
}
inline double rms_factor(const double* x, int64_t n, double eps) {
  return 1.0 / std::sqrt(rows::dot(x, x, n) / static_cast<double>(n) + eps);
}

// One row: x (n) -> y (n) = x · rsqrt(mean(x²) + eps) · w (w null: 1).
template <class T>
KILN_MULTIVERSION void rms_norm_row(const T* xr, const T* pw, T* yr, int64_t n, double eps) {
  const T r = rms_factor(xr, n, eps);
  if (pw) {
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * r * pw[j];
  } else {
    for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * r;
  }
}

template <class T>
KILN_MULTIVERSION void layer_norm_row(const T* xr, const T* pw, const T* pb, T* yr, int64_t n, double eps, T* mean,
                                      T* rstd) {
  layer_norm_row_from_sum(xr, rows::sum(xr, n), pw, pb, yr, n, eps, mean, rstd);
}

// One row of add_layer_norm: s = x + r (n) into sr, then s normalised into yr, with the
// bits of layer_norm_row(s). The row of s is still in L1 when it is summed and
// normalised. (Summing s as it is written, in the same lanes, gave the same bits but
// made GCC interleave the lanes with permutes: 1.5x slower than add then layer_norm.)
template <class T>
KILN_MULTIVERSION void add_layer_norm_row(const T* xr, const T* rr, const T* pw, const T* pb, T* sr, T* yr,
                                          int64_t n, double eps, T* mean, T* rstd) {
  for (int64_t j = 0; j < n; ++j) sr[j] = xr[j] + rr[j];
  layer_norm_row_from_sum(sr, rows::sum(sr, n), pw, pb, yr, n, eps, mean, rstd);
}

// One row of the backward: accumulates dw (n) and db (n) when given, writes gx (n) when given.
template <class T>
KILN_MULTIVERSION void layer_norm_backward_row(const T* gr, const T* xr, const T* pw, T mu, T rs, int64_t n, T* dw,
                                               T* db, T* gxr) {
  rows::Lanes<T> lane_gw = {}, lane_gwx = {};
  int64_t i = 0;
  for (; i + rows::kLanes <= n; i += rows::kLanes) {
    rows::Lanes<T> x, gw;
    std::memcpy(&x, xr + i, sizeof x);
    std::memcpy(&gw, gr + i, sizeof gw);
    if (pw) {
      rows::Lanes<T> w;
      std::memcpy(&w, pw + i, sizeof w);
      gw *= w;
    }
    const rows::Lanes<T> xh = (x - mu) * rs;
    lane_gw += gw;
    lane_gwx += gw * xh;
  }
  double s_gw = 0, s_gwx = 0;
  for (; i < n; ++i) {
    T xh = (xr[i] - mu) * rs;
    T gw = pw ? gr[i] * pw[i] : gr[i];
    s_gw += gw;
    s_gwx += static_cast<double>(gw) * xh;
  }
  for (int k = 0; k < rows::kLanes; ++k) {
    s_gw += lane_gw[k];
    s_gwx += lane_gwx[k];
  }
  if (dw) {
    for (int64_t j = 0; j < n; ++j) {
      dw[j] += gr[j] * ((xr[j] - mu) * rs);
      db[j] += gr[j];
    }
  }
  if (!gxr) return;
  const T m_gw = static_cast<T>(s_gw / static_cast<double>(n));
  const T m_gwx = static_cast<T>(s_gwx / static_cast<double>(n));
  for (int64_t j = 0; j < n; ++j) {
    T xh = (xr[j] - mu) * rs;
    T gw = pw ? gr[j] * pw[j] : gr[j];
    gxr[j] = rs * (gw - m_gw - xh * m_gwx);
  }
}

}  // namespace

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
        layer_norm_row(px + r * n, pw, pb, py + r * n, n, eps, pm + r, pr + r);
      }
    });
  });
}

// x, y (rows, n) contiguous; weight (n) or undefined.
void CpuBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  if (rows == 0) return;
  visit_floating("rms_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    T* py = y.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n * 4, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) rms_norm_row(px + r * n, pw, py + r * n, n, eps);
    });
  });
}

// add_layer_norm, with each row of y also rounded into low (when defined, float32 only)
// right after it is written, while it is in L1.
void CpuBackend::add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                                double eps, const Tensor& sum, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& low) {
  if (low.defined() && (x.dtype() != kFloat32 || low.dtype() != kBFloat16 || !low.is_contiguous() ||
                        low.shape() != y.shape())) {
    return Backend::add_layer_norm(x, residual, weight, bias, eps, sum, y, mean, rstd, low);
  }
  uint16_t* pl = low.defined() ? reinterpret_cast<uint16_t*>(low.data<bfloat16>()) : nullptr;
  const int64_t rows = mean.numel();
  const int64_t n = rows ? x.numel() / rows : 0;
  visit_floating("add_layer_norm", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pres = residual.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = y.data<T>();
    T* ps = sum.defined() ? sum.data<T>() : nullptr;
    T* pm = mean.data<T>();
    T* pr = rstd.data<T>();
    parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n * 4, 1)),
                 [&](int64_t r0, int64_t r1) {
      // Without a sum to keep, each row's sum lives in one row of scratch per task.
      std::vector<T> scratch(ps ? 0 : static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        T* sr = ps ? ps + r * n : scratch.data();
        add_layer_norm_row(px + r * n, pres + r * n, pw, pb, sr, py + r * n, n, eps, pm + r, pr + r);
        if constexpr (std::is_same_v<T, float>) {
          if (pl) float_to_bf16(py + r * n, pl + r * n, n);
        }
      }
    });
  });
}

// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w, xhat = (x - mean) * rstd;
// dw = sum_rows g * xhat; db = sum_rows g. Rows are split into chunks, each with its own
// partial dw/db, summed at the end in chunk order.
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
    // Rows in chunks fixed by the shape (not the thread count: dw and db add the chunks'
    // partial sums, so the cut decides their rounding), about a parallel task's work each.
    const FixedChunks chunks = fixed_chunks(rows, kGrainElements / std::max<int64_t>(n * 4, 1), kMaxChunks);
    // Per-chunk partial sums in T: each chunk adds at most rows/chunks terms per column.
    std::vector<T> part_w(want_wb ? chunks.count * n : 0, T(0)), part_b(want_wb ? chunks.count * n : 0, T(0));
    parallel_for_fixed(rows, chunks, [&](int64_t c, int64_t r0, int64_t r1) {
      T* dw = want_wb ? part_w.data() + c * n : nullptr;
      T* db = want_wb ? part_b.data() + c * n : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        layer_norm_backward_row(pg + r * n, px + r * n, pw, pm[r], pr[r], n, dw, db, pgx ? pgx + r * n : nullptr);
      }
    });
    if (!want_wb) return;
    T* gwp = grad_weight.defined() ? grad_weight.data<T>() : nullptr;
    T* gbp = grad_bias.defined() ? grad_bias.data<T>() : nullptr;
    // Columns are independent; each adds its chunks in chunk order.
    parallel_for(n, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(chunks.count, 1)),
                 [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        double sw = 0, sb = 0;
        for (int64_t c = 0; c < chunks.count; ++c) {
          sw += part_w[c * n + i];
          sb += part_b[c * n + i];
        }
        if (gwp) gwp[i] = static_cast<T>(sw);
        if (gbp) gbp[i] = static_cast<T>(sb);
      }
    });
  });
}

}  // namespace kiln::cpu
