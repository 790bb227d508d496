#pragma once
// bfloat16 mixed precision, like torch.autocast("cpu", dtype=torch.bfloat16): while a
// guard lives on a thread, the products (matmul, mm, bmm, linear, einsum's products and
// scaled_dot_product_attention's two GEMMs) take their float32 operands rounded to
// bfloat16 and compute with float32 accumulation into a float32 OUTPUT. (torch's CPU
// autocast returns bfloat16 from them; Kiln keeps float32, so everything downstream is
// float32 without a cast.)
// Everything else (softmax, layer_norm, the losses, reductions, the optimizer) computes
// in float32 as without the guard; weights and gradients stay float32; backward runs
// the same products in bfloat16 (on the bfloat16 operands saved by forward).
//
//   {
//     kiln::AutocastGuard autocast(kiln::kBFloat16);
//     loss = cross_entropy(model.forward(x), y);
//   }
//   loss.backward();  // outside the guard, as in torch
//   optimizer.step();
//
// The state is per thread (as grad mode): another thread is unaffected. Guards nest and
// restore what was there; AutocastGuard(kBFloat16, false) turns autocast off inside one.
// float64 operands are never cast. The bfloat16 copy of a leaf that requires grad (a
// weight) is made once per version of it while the outermost guard lives (a cache, as
// torch's), so a weight used by many products (or many time steps) is rounded once;
// the cache is dropped when that guard ends. Other tensors (activations) are rounded at
// each use. Where saved outputs are recipes (set_recompute_saved; on for GPU tensors by
// default) and grad mode is on, a product saves the recipe of its weight's copy rather
// than the copy, which then goes when the product returns; backward rounds the weight
// again, and refuses a weight changed in place since forward (autograd/recompute.h).
#include <cstdint>

#include "../core/dtype.h"

namespace kiln {

class AutocastGuard {
 public:
  // Throws "[autocast] …" naming the dtype for any dtype but kBFloat16 (the only lower
  // precision Kiln computes in).
  explicit AutocastGuard(DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

// Whether an enabled guard rules this thread now.
bool is_autocast_enabled();
// The dtype products take under autocast (kBFloat16).
DType get_autocast_dtype();

// This thread's cast cache: entries held now, and since the thread started the weight
// conversions made and the uses served from the cache (for tests and benchmarks).
struct AutocastCacheStats {
  int64_t entries = 0, conversions = 0, hits = 0;
};
AutocastCacheStats autocast_cache_stats();

}  // namespace kiln
