// The Backend base class's default kernels for indexing, scatter, cumsum, sort, topk and
// multinomial: each stages through host memory. The inputs are copied to fresh CPU
// tensors, the CPU backend's kernel runs on them, and what it wrote is copied back into
// the device tensors. A backend with no kernels of its own for these (CUDA today) thus
// gives the CPU's results, index errors included, at the price of the copies.
// KILN_LOG_HOST_STAGED=1 prints each such op's name on stderr the first time it stages
// through the host, for finding which ones a workload calls on a GPU.
#include <atomic>
#include <cstdio>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/env_flag.h"

namespace kiln {
namespace {

// A contiguous CPU copy of t (a device tensor of `be`, or already on the CPU).
Tensor to_host(Backend& be, const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
  if (t.numel() > 0) be.copy(t, h);
  return h;
}

// An uninitialised CPU tensor to receive a result meant for t.
Tensor host_like(const Tensor& t) { return Tensor::empty(t.shape(), TensorOptions(t.dtype())); }

// t (on be's device) = h (on the CPU).
void from_host(Backend& be, const Tensor& h, const Tensor& t) {
  if (t.numel() > 0) be.copy(h, t);
}

cpu::CpuBackend& host() { return cpu::cpu_backend(); }

// Under KILN_LOG_HOST_STAGED, "[host-staged] <op> on <device>" once per op (`seen`: that
// op's flag).
void log_staged(std::atomic<bool>& seen, const char* op, const Tensor& t) {
  static const bool on = env_flag("KILN_LOG_HOST_STAGED");
  if (on && !seen.exchange(true)) std::fprintf(stderr, "[host-staged] %s on %s\n", op, t.device().str().c_str());
}

}  // namespace

void Backend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "gather", x);
  Tensor h = host_like(out);
  host().gather(to_host(*this, x), dim, to_host(*this, index), h);
  from_host(*this, h, out);
}

void Backend::scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, bool accumulate) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "scatter", self);
  Tensor h = to_host(*this, self);
  host().scatter(h, dim, to_host(*this, index), to_host(*this, src), accumulate);
  from_host(*this, h, self);
}

void Backend::index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                        double alpha) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "index_add", self);
  Tensor h = to_host(*this, self);
  host().index_add(h, dim, to_host(*this, index), to_host(*this, source), alpha);
  from_host(*this, h, self);
}

void Backend::cumsum(const Tensor& x, int64_t dim, bool reverse, const Tensor& out) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "cumsum", x);
  Tensor h = host_like(out);
  host().cumsum(to_host(*this, x), dim, reverse, h);
  from_host(*this, h, out);
}

void Backend::sort(const Tensor& x, int64_t dim, bool descending, const Tensor& values, const Tensor& indices) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "sort", x);
  Tensor hv = host_like(values), hi = host_like(indices);
  host().sort(to_host(*this, x), dim, descending, hv, hi);
  from_host(*this, hv, values);
  from_host(*this, hi, indices);
}

void Backend::topk(const Tensor& x, int64_t k, int64_t dim, bool largest, const Tensor& values,
                   const Tensor& indices) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "topk", x);
  Tensor hv = host_like(values), hi = host_like(indices);
  host().topk(to_host(*this, x), k, dim, largest, hv, hi);
  from_host(*this, hv, values);
  from_host(*this, hi, indices);
}

void Backend::multinomial(const Tensor& probs, int64_t num_samples, bool replacement, uint64_t seed,
                          uint64_t block, const Tensor& out) {
  static std::atomic<bool> seen{false};
  log_staged(seen, "multinomial", probs);
  Tensor h = host_like(out);
  host().multinomial(to_host(*this, probs), num_samples, replacement, seed, block, h);
  from_host(*this, h, out);
}

}  // namespace kiln
