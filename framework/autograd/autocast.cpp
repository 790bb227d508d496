// Autocast's per-thread state and cast cache (autocast.h, autocast_cast.h).
#include "autograd/autocast.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/autocast_cast.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/recompute.h"
#include "backend/backend.h"
#include "ops/ops.h"

namespace kiln {
namespace {

// The cache holds bfloat16 copies of stretches of float32 storage (a weight's, or an
// activation's that an op shared: autocast_share), not of tensors: every view of that
// storage (a weight's transpose, the q, k, v slices of one projection, attention's
// output seen as (N, L, E)) reads its elements from the one copy, with its own strides.
struct Shadow {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;    // the storage's, when copied: a write since makes it stale
  int64_t start = 0, end = 0;  // the elements [start, end) of the storage it holds
  Tensor low;              // (end - start) bfloat16; undefined when kept by recipe
  // A weight's copy kept by recipe (keep_by_recipe): its storage while a product holds
  // it, and the recipe, which this entry owns until the products' SavedTensors take it.
  std::weak_ptr<Storage> low_storage;
  std::shared_ptr<const Recompute> recipe;
};

struct AutocastState {
  bool enabled = false;
  DType dtype = kBFloat16;
  int64_t depth = 0;  // guards alive, enabled or not: the cache lives while one does
  std::unordered_map<const Storage*, Shadow> cache;
  int64_t conversions = 0, hits = 0;
};

// Per thread, as grad mode: one thread's autocast never changes another's products.
AutocastState& state() {
  thread_local AutocastState s;
  return s;
}

// A tensor over t's storage with the given geometry and t's dtype (no history).
Tensor view_of(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

// The elements [lo, hi) of its storage that t spans; false for a negative stride.
bool span_of(const Tensor& t, int64_t& lo, int64_t& hi) {
  lo = hi = t.offset();
  if (t.numel() == 0) return true;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return false;
    hi += (t.size(d) - 1) * t.stride(d);
  }
  ++hi;
  return true;
}

// Whether t's elements fill one block of memory without gaps (contiguous, or a
// permutation of that: a transpose, attention's heads inside the rows), no stride 0.
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

// sh's bfloat16 copy, flat: undefined when it was kept by recipe and no product holds it now.
Tensor low_of(const Shadow& sh) {
  if (sh.low.defined()) return sh.low;
  std::shared_ptr<Storage> storage = sh.low_storage.lock();
  if (!storage) return Tensor();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = {sh.end - sh.start};
  impl->strides = {1};
  impl->dtype = kBFloat16;
  return Tensor(std::move(impl));
}

// t (a view of the storage whose elements from `start` on `low` holds) as bfloat16.
Tensor shadowed(const Tensor& low, int64_t start, const Tensor& t) {
  return view_of(low, t.shape(), t.strides(), t.offset() - start);
}

// The shadow of t's storage, if the cache has one that is current, its copy (`low`) and
// the elements [lo, hi) of the storage that t spans; null otherwise (or for a negative
// stride, or a copy kept by recipe that is gone).
const Shadow* current_shadow(AutocastState& s, const Tensor& t, int64_t& lo, int64_t& hi, Tensor& low) {
  auto it = s.cache.find(t.impl()->storage.get());
  if (it == s.cache.end()) return nullptr;
  const Shadow& sh = it->second;
  // A freed storage's address may be another's now; a write since makes the copy stale.
  if (sh.storage.lock() != t.impl()->storage || sh.version != t.version() || !span_of(t, lo, hi)) return nullptr;
  low = low_of(sh);
  return low.defined() ? &sh : nullptr;
}

// t from its storage's shadow, if the cache has one that is current and covers it.
Tensor from_cache(AutocastState& s, const Tensor& t) {
  int64_t lo = 0, hi = 0;
  Tensor low;
  const Shadow* sh = current_shadow(s, t, lo, hi, low);
  if (!sh || lo < sh->start || hi > sh->end) return Tensor();
  ++s.hits;
  return shadowed(low, sh->start, t);
}

// Copies dense `whole` (float32) into the cache as its storage's shadow and returns t (a
// view of whole's storage within whole) from there; undefined when `whole` is not dense.
// Caches flat (bfloat16, hi - lo) as the copy of elements [lo, hi) of whole's storage as
// it is now; counted as a conversion.
Shadow& remember(AutocastState& s, const Tensor& whole, int64_t lo, int64_t hi, const Tensor& flat) {
  ++s.conversions;
  // The copies of storages freed since go now, not when the guard ends: an activation's
  // copy is then kept only by the products that saved it (which may keep it as a recipe
  // instead, autograd/recompute.h), not through the whole forward pass.
  std::erase_if(s.cache, [](const auto& entry) { return entry.second.storage.expired(); });
  return s.cache[whole.impl()->storage.get()] = Shadow{whole.impl()->storage, whole.version(), lo, hi, flat, {}, nullptr};
}

// The elements [lo, hi) of w's storage (float32) rounded to bfloat16, flat.
Tensor round_span(const Tensor& w, int64_t lo, int64_t hi, const char* op) {
  Tensor flat = detail::empty_for(op, {hi - lo}, TensorOptions(kBFloat16).device(w.device()));
  backend_for(w.device()).copy(view_of(w, {hi - lo}, {1}, lo), flat);
  return flat;
}

// Leaves on sh's copy of the weight w a recipe that rounds w again (autograd/recompute.h)
// and keeps the copy weakly from now on, when the op records a graph and recipes are
// wanted on w's device: the products save the recipe, so the copy is freed as soon as the
// product that made it returns, not held to the end of the forward pass with every other
// weight's (a tenth of the base step's bf16 peak), and backward rounds each
// weight again (a pass over the parameters, cheap where recipes are on by default). A
// weight changed in place before backward is refused, as a saved tensor is: the recipe
// cannot give back the values forward read.
void keep_by_recipe(Shadow& sh, const Tensor& w, const char* op) {
  if (!is_grad_enabled() || !detail::recipes_wanted(w.device())) return;
  const SavedTensor weight(w.detach(), op);  // its get() refuses a weight written since
  const int64_t lo = sh.start, hi = sh.end;
  auto r = detail::leave_recompute(sh.low, [weight, lo, hi, op]() { return round_span(weight.get(), lo, hi, op); });
  if (!r) return;
  sh.recipe = std::move(r);
  sh.low_storage = sh.low.impl()->storage;
  sh.low = Tensor();
}

// Whether the cache's copy of w (as it is now) was kept by recipe and is gone: w is used
// again in this pass.
bool kept_by_recipe_before(const AutocastState& s, const Tensor& w) {
  auto it = s.cache.find(w.impl()->storage.get());
  return it != s.cache.end() && it->second.recipe && it->second.storage.lock() == w.impl()->storage &&
         it->second.version == w.version();
}

// t (a view of whole's storage) from a new copy of whole cached as its storage's shadow;
// undefined when whole is not dense. by_recipe: a weight's copy, which keep_by_recipe may
// keep weakly.
Tensor shadow(AutocastState& s, const Tensor& whole, const Tensor& t, const char* op, bool by_recipe = false) {
  int64_t lo = 0, hi = 0;
  if (!dense(whole) || !span_of(whole, lo, hi) || whole.numel() == 0) return Tensor();
  Tensor flat = round_span(whole, lo, hi, op);
  Shadow& sh = remember(s, whole, lo, hi, flat);
  if (by_recipe) keep_by_recipe(sh, whole, op);
  return shadowed(flat, lo, t);
}

// The weight t is, or is a view of: a leaf that requires grad (torch caches these).
Tensor weight_of(const Tensor& t) {
  if (t.requires_grad() && t.is_leaf()) return t;
  const std::shared_ptr<TensorImpl>& base = t.impl()->view_base;
  if (base && base->requires_grad && !base->grad_fn && base->dtype == kFloat32) return Tensor(base);
  return Tensor();
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
  AutocastState& s = state();
  if (s.depth == 0) return to_bfloat16(t, op);  // no guard, no cache (backward outside it)
  if (Tensor low = from_cache(s, t); low.defined()) return low;
  // A weight is copied whole, once per version, for all its uses and views: kept by
  // recipe after its first use, and held for the rest after a second (an RNN's weights).
  if (const Tensor w = weight_of(t); w.defined()) {
    if (Tensor low = shadow(s, w, t, op, /*by_recipe=*/!kept_by_recipe_before(s, w)); low.defined()) return low;
  }
  return to_bfloat16(t, op);  // an activation: rounded at each use
}

Tensor autocast_share(const Tensor& t, const char* op) {
  AutocastState& s = state();
  if (t.dtype() != kFloat32 || s.depth == 0) return autocast_operand(t, op);
  if (Tensor low = from_cache(s, t); low.defined()) return low;
  if (Tensor low = shadow(s, t, t, op); low.defined()) return low;
  // A slice of a dense tensor not much larger (attention's q, k and v, chunks of one
  // projection): the whole converted in one straight pass, the other slices then read it.
  const std::shared_ptr<TensorImpl>& base = t.impl()->view_base;
  if (base && base->dtype == kFloat32 && shape_numel(base->shape) <= 4 * t.numel()) {
    if (Tensor low = shadow(s, Tensor(base), t, op); low.defined()) return low;
  }
  return to_bfloat16(t, op);
}

Tensor autocast_adopt(const Tensor& t, const Tensor& low) {
  AutocastState& s = state();
  KILN_CHECK(s.depth > 0 && t.dtype() == kFloat32 && t.is_contiguous() && low.dtype() == kBFloat16 &&
                 low.is_contiguous() && low.shape() == t.shape(),
             "autocast", "internal: autocast_adopt takes a contiguous float32 tensor and its bfloat16 copy inside a guard");
  remember(s, t, t.offset(), t.offset() + t.numel(), low.reshape({t.numel()}));
  return low;
}

Tensor autocast_cached_copy(const Tensor& t) {
  AutocastState& s = state();
  if (s.depth == 0 || t.dtype() != kFloat32) return Tensor();
  int64_t lo = 0, hi = 0;
  Tensor low;
  const Shadow* sh = current_shadow(s, t, lo, hi, low);
  return sh && lo == sh->start && hi == sh->end ? low : Tensor();
}

std::pair<Tensor, Tensor> autocast_operand_and_column_sums(const Tensor& g, const char* op) {
  KILN_CHECK(g.dim() == 2, op, "expected a 2-D gradient, got shape ", shape_str(g.shape()));
  if (g.dtype() != kFloat32 || !g.is_contiguous()) return {autocast_operand(g, op), sum(g, {0})};
  if (state().depth > 0) {
    if (Tensor low = from_cache(state(), g); low.defined()) return {low, sum(g, {0})};
  }
  Tensor low = detail::empty_for(op, g.shape(), TensorOptions(kBFloat16).device(g.device()));
  Tensor sums = detail::empty_for(op, {g.size(1)}, TensorOptions(kFloat32).device(g.device()));
  backend_for(g.device()).round_bf16_and_column_sums(g.detach(), low, sums);
  return {low, sums};
}

}  // namespace detail
}  // namespace kiln
