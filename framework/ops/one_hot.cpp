// one_hot (torch.nn.functional.one_hot): int64 class indices to rows of 0/1.
#include <limits>

#include "ops/op_helpers.h"

namespace kiln {
namespace {

// The single int64 value of a one-element tensor, read exactly (item() goes through a
// double, which cannot hold every int64).
int64_t int64_value(const Tensor& t) { return t.to(kCPU).to_vector<int64_t>().at(0); }

}  // namespace

// indices (*) int64 -> (*, num_classes) int64
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  const char* op = "one_hot";
  detail::check_defined(op, indices, "indices");
  KILN_CHECK(indices.dtype() == kInt64, op, "one_hot is only applicable to index tensors (int64), got ",
             dtype_name(indices.dtype()));
  if (indices.numel() == 0) {
    KILN_CHECK(num_classes > 0, op, "can not infer the total number of classes from an empty tensor (shape ",
               shape_str(indices.shape()), ", num_classes = ", num_classes, ")");
  } else {
    const int64_t lo = int64_value(min(indices)), hi = int64_value(max(indices));
    KILN_CHECK(lo >= 0, op, "class values must be non-negative, got ", lo);
    if (num_classes == -1) {
      KILN_CHECK(hi < std::numeric_limits<int64_t>::max(), op, "class value ", hi, " is too large");
      num_classes = hi + 1;
    } else {
      KILN_CHECK(hi < num_classes, op, "class values must be smaller than num_classes (", num_classes, "), got ", hi);
    }
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = detail::new_tensor(shape, kInt64, indices, op);  // (2^32) indices and 2^32 classes overflow
  backend_for(out.device()).fill(out, 0.0);
  if (indices.numel() > 0) out.scatter_(-1, indices.detach().unsqueeze(-1), 1.0);
  return out;
}

}  // namespace kiln
