#pragma once
// Numerical gradient checking with torch.autograd.gradcheck's semantics: for each input
// that requires grad, compare the analytic Jacobian (from backward) with central
// differences, element by element: |analytic - numeric| <= atol + rtol * |numeric|.
#include <functional>
#include <string>
#include <vector>

#include "../core/tensor.h"

namespace kiln {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_exception = true;  // throw kiln::Error on failure, else return false
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // names the input, the element, the numeric and analytic values
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs must be float64; those that require grad are checked. f may return any shape.
bool gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});
GradcheckResult gradcheck_result(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                 GradcheckOptions opts = {});

}  // namespace kiln
