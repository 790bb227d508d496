// repeat (tiling) and repeat_interleave (each element repeated in place). Both insert a
// size-1 dim, expand it and merge it with its neighbour, so the gradient is expand's
// (a sum over the copies); the per-element-count form picks rows with index_select.
#include <algorithm>
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

// count · size, checked against int64 overflow.
int64_t times(const char* op, int64_t count, int64_t size) {
  KILN_CHECK(size == 0 || count <= std::numeric_limits<int64_t>::max() / size, op, "repeating a dim of size ",
             size, " ", count, " times overflows int64");
  return count * size;
}

// repeat and repeat_interleave return new memory, as torch does, even when every count is 1.
Tensor fresh(const Tensor& y, const Tensor& x) { return y.same_storage(x) ? clone(y) : y; }

// x (…, N, …) -> (…, N·count, …): element i of dim d repeated count times in a row.
Tensor interleave_dim(const Tensor& x, int64_t d, int64_t count) {
  Shape expanded = x.shape(), merged = x.shape();
  expanded.insert(expanded.begin() + d + 1, count);
  merged[d] = times("repeat_interleave", count, x.size(d));
  checked_numel("repeat_interleave", merged);  // before expand, which would name itself
  return fresh(x.unsqueeze(d + 1).expand(expanded).reshape(merged), x);
}

// The flattened x (dim absent) or x with `dim` wrapped; sets *d to the dim to repeat along.
Tensor interleave_input(const Tensor& x, std::optional<int64_t> dim, int64_t* d) {
  const char* op = "repeat_interleave";
  if (!dim) {
    *d = 0;
    return x.reshape({-1});
  }
  KILN_CHECK(x.dim() > 0, op, "dim ", *dim, " given for a 0-d tensor (use no dim to repeat its element)");
  *d = wrap_dim(op, *dim, x.dim());
  return x;
}

}  // namespace

// x (s0, …, sk) with repeats (r0, …, rn), n >= k -> (r0·1, …, rn·sk) (x gets leading 1-dims)
Tensor repeat(const Tensor& x, const Shape& repeats) {
  const char* op = "repeat";
  detail::check_defined(op, x);
  KILN_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), op, "number of repeat dims (", repeats.size(),
             ") can not be smaller than the number of dimensions of the tensor (", x.dim(), "); repeats ",
             shape_str(repeats), ", shape ", shape_str(x.shape()));
  for (int64_t r : repeats) KILN_CHECK(r >= 0, op, "repeats can not be negative, got ", shape_str(repeats));
  Shape padded(repeats.size() - x.shape().size(), 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  // View as (1, s0, 1, s1, …), expand to (r0, s0, r1, s1, …), merge to (r0·s0, …).
  Shape split, expanded, out;
  for (size_t i = 0; i < repeats.size(); ++i) {
    split.insert(split.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    out.push_back(times(op, repeats[i], padded[i]));
  }
  checked_numel(op, out);  // each size fits, the product may not
  return fresh(x.reshape(split).expand(expanded).reshape(out), x);
}

// x (…, N, …) -> (…, N·repeats, …), or (numel·repeats) without dim
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  const char* op = "repeat_interleave";
  detail::check_defined(op, x);
  KILN_CHECK(repeats >= 0, op, "repeats can not be negative, got ", repeats);
  int64_t d = 0;
  Tensor in = interleave_input(x, dim, &d);
  return interleave_dim(in, d, repeats);
}

// x (…, N, …), repeats (N) or (1) or () -> (…, sum(repeats), …), or over the flattened x
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim) {
  const char* op = "repeat_interleave";
  detail::check_defined(op, x);
  detail::check_defined(op, repeats, "repeats");
  KILN_CHECK(repeats.dtype() == kInt64, op, "repeats must be an int64 tensor, got ", dtype_name(repeats.dtype()));
  KILN_CHECK(repeats.dim() <= 1, op, "repeats must be a 0-D or 1-D tensor, got shape ", shape_str(repeats.shape()));
  int64_t d = 0;
  Tensor in = interleave_input(x, dim, &d);
  const int64_t n = in.size(d);
  if (repeats.numel() == 1) {
    const int64_t count = repeats.reshape({}).item<int64_t>();
    KILN_CHECK(count >= 0, op, "repeats can not be negative, got ", count);
    return interleave_dim(in, d, count);
  }
  KILN_CHECK(repeats.numel() == n, op, "repeats must have the same size as the input along dim ", d,
             ", got ", repeats.numel(), " repeats for size ", n, " (input shape ", shape_str(in.shape()), ")");
  if (n == 0) return clone(in);  // no elements along dim, no counts: nothing to repeat
  return index_select(in, d, repeat_interleave(repeats));
}

// repeats (N) int64 -> (sum(repeats)) int64: 0 repeated repeats[0] times, then 1, …
Tensor repeat_interleave(const Tensor& repeats) {
  const char* op = "repeat_interleave";
  detail::check_defined(op, repeats, "repeats");
  KILN_CHECK(repeats.dtype() == kInt64, op, "repeats must be an int64 tensor, got ", dtype_name(repeats.dtype()));
  KILN_CHECK(repeats.dim() <= 1, op, "repeats must be a 0-D or 1-D tensor, got shape ", shape_str(repeats.shape()));
  std::vector<int64_t> counts = repeats.reshape({-1}).to_vector<int64_t>();
  int64_t total = 0;
  for (int64_t c : counts) {
    KILN_CHECK(c >= 0, op, "repeats can not be negative, got ", c);
    KILN_CHECK(c <= std::numeric_limits<int64_t>::max() - total, op, "the repeats sum past int64");
    total += c;
  }
  // Written straight into the result, which reports a total too large for memory as
  // "[repeat_interleave] …" (a std::vector of it would throw std::bad_alloc).
  Tensor index = detail::empty_for(op, {total}, TensorOptions(kInt64));
  int64_t* p = index.data<int64_t>();
  for (size_t i = 0; i < counts.size(); ++i) p = std::fill_n(p, counts[i], static_cast<int64_t>(i));
  return index.to(repeats.device());
}

}  // namespace kiln
