// Autocast's per-thread state and cast cache (autocast.h, autocast_cast.h).
#include "autograd/autocast.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>
#include <unordered_map>

#include "autograd/autocast_cast.h"
#include "backend/backend.h"
#include "ops/ops.h"

namespace kiln {
namespace {

// A weight's bfloat16 copy, valid while the weight is the same tensor (`source` alive
// and at the cache key's address) at the same version.
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  uint64_t version = 0;
  Tensor low;
};

struct AutocastState {
  bool enabled = false;
  DType dtype = kBFloat16;
  int64_t depth = 0;  // guards alive, enabled or not: the cache lives while one does
  std::unordered_map<const TensorImpl*, CachedCast> cache;
  int64_t conversions = 0, hits = 0;
};

// Per thread, as grad mode: one thread's autocast never changes another's products.
AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

// Whether t's elements fill one block of memory without gaps (contiguous, or a
// permutation of that: a transpose, the heads of attention), with no dim of stride 0.
bool dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// A tensor over t's storage with the given geometry and dtype (no history).
Tensor view_of(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

// t (float32) rounded to bfloat16, detached. A dense t keeps its layout (a transposed
// weight stays a transpose, attention's heads stay inside their rows), converted in one
// straight pass; a dim broadcast with stride 0 is converted once and stays stride 0;
// anything else becomes contiguous.
Tensor to_bfloat16(const Tensor& t, const char* op) {
  Tensor src = t.detach();
  bool expanded = false;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (src.stride(d) == 0 && src.size(d) > 1) {
      src = src.narrow(d, 0, 1);
      expanded = true;
    }
  }
  Backend& be = backend_for(t.device());
  Tensor low;
  if (dense(src) && !src.is_contiguous()) {
    const int64_t n = src.numel();
    Tensor flat = detail::empty_for(op, {n}, TensorOptions(kBFloat16).device(t.device()));
    be.copy(view_of(src, {n}, {1}, src.offset()), flat);
    low = view_of(flat, src.shape(), src.strides(), 0);
  } else {
    low = detail::empty_for(op, src.shape(), TensorOptions(kBFloat16).device(t.device()));
    if (low.numel() > 0) be.copy(src, low);
  }
  return expanded ? low.expand(t.shape()) : low;
}

}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(state().enabled), prev_dtype_(state().dtype) {
  KILN_CHECK(dtype == kBFloat16, "autocast", "only bfloat16 is supported as the autocast dtype, got ",
             dtype_name(dtype));
  AutocastState& s = state();
  s.enabled = enabled;
  s.dtype = dtype;
  ++s.depth;
}

AutocastGuard::~AutocastGuard() {
  AutocastState& s = state();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  if (--s.depth == 0) s.cache.clear();
}

bool is_autocast_enabled() { return state().enabled; }

DType get_autocast_dtype() { return state().dtype; }

AutocastCacheStats autocast_cache_stats() {
  const AutocastState& s = state();
  return {static_cast<int64_t>(s.cache.size()), s.conversions, s.hits};
}

namespace detail {

bool autocast_applies(std::initializer_list<const Tensor*> operands) {
  if (!state().enabled) return false;
  for (const Tensor* t : operands) {
    if (t && t->defined() && t->dtype() != kFloat32 && t->dtype() != kBFloat16) return false;
  }
  return true;
}

Tensor autocast_operand(const Tensor& t, const char* op) {
  if (t.dtype() == kBFloat16) return t.detach();
  // torch caches leaves that require grad, the weights: activations change every step.
  if (!t.requires_grad() || !t.is_leaf()) return to_bfloat16(t, op);
  AutocastState& s = state();
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.source.lock() == t.impl_ptr() && it->second.version == t.version()) {
    ++s.hits;
    return it->second.low;
  }
  // A new weight, or one written since (an optimizer step bumps the version), or another
  // tensor now at the address of a freed one.
  CachedCast c{t.impl_ptr(), t.version(), to_bfloat16(t, op)};
  ++s.conversions;
  return (s.cache[t.impl()] = std::move(c)).low;
}

}  // namespace detail
}  // namespace kiln
