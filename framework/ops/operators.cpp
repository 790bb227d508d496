// == and !=, comparisons with a scalar on either side, and the
// scalar forms of the comparison methods. All are elementwise and give bool tensors.
#include "ops/op_helpers.h"

namespace kiln {

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
Tensor operator==(double a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(double a, const Tensor& b) { return ne(b, a); }
// a < b is b > a, and so on.
Tensor operator<(double a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(double a, const Tensor& b) { return ge(b, a); }
Tensor operator>(double a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(double a, const Tensor& b) { return le(b, a); }

}  // namespace kiln
