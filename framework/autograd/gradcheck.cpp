#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "ops/ops.h"

namespace kiln {
namespace {

// Unravels a flat row-major index into a multi-index of `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// f's output flattened to doubles, evaluated without recording.
std::vector<double> eval(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  return f(inputs).to_vector<double>();
}

}  // namespace

GradcheckResult gradcheck_result(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    KILN_CHECK(inputs[i].dtype() == kFloat64, "gradcheck", "input ", i,
               " requires grad but is ", dtype_name(inputs[i].dtype()),
               "; gradcheck needs float64 inputs for precision");
    KILN_CHECK(inputs[i].is_leaf(), "gradcheck", "input ", i, " must be a leaf tensor");
  }
  // Analytic Jacobian, one backward per output element: rows = outputs.
  Tensor out;
  {
    EnableGradGuard grad_on;
    out = f(inputs);
  }
  KILN_CHECK(out.dtype() == kFloat64, "gradcheck", "the function must return float64, got ", dtype_name(out.dtype()));
  const int64_t n_out = out.numel();
  std::vector<std::vector<std::vector<double>>> analytic(inputs.size());  // [input][out][elem]
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad())
      analytic[i].assign(n_out, std::vector<double>(inputs[i].numel(), 0.0));
  if (out.requires_grad()) {
    for (int64_t o = 0; o < n_out; ++o) {
      for (const Tensor& in : inputs)
        if (in.defined()) in.zero_grad();
      Tensor seed = zeros(out.shape(), TensorOptions(kFloat64).device(out.device()));
      seed.set(unravel(o, out.shape()), 1.0);
      out.backward(seed, /*retain_graph=*/true);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (analytic[i].empty()) continue;
        Tensor g = inputs[i].grad();
        if (g.defined()) analytic[i][o] = g.to_vector<double>();
      }
    }
  }
  for (const Tensor& in : inputs)
    if (in.defined()) in.zero_grad();

  // Numeric Jacobian by central differences, perturbing one element at a time.
  GradcheckResult result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (analytic[i].empty()) continue;
    Tensor x = inputs[i].detach();  // shares storage: writes perturb the real input
    for (int64_t e = 0; e < x.numel(); ++e) {
      std::vector<int64_t> at = unravel(e, x.shape());
      double orig = x.at(at);
      x.set(at, orig + opts.eps);
      std::vector<double> plus = eval(f, inputs);
      x.set(at, orig - opts.eps);
      std::vector<double> minus = eval(f, inputs);
      x.set(at, orig);
      for (int64_t o = 0; o < n_out; ++o) {
        double numeric = (plus[o] - minus[o]) / (2 * opts.eps);
        double a = analytic[i][o][e];
        if (std::abs(a - numeric) <= opts.atol + opts.rtol * std::abs(numeric) && !std::isnan(a)) continue;
        std::ostringstream os;
        os << "[gradcheck] Jacobian mismatch for output element " << o << " with respect to input " << i
           << ", element " << e << " (index " << shape_str(at) << "): numerical " << numeric << ", analytical " << a;
        result = {false, os.str()};
        if (opts.raise_exception) throw Error(result.message);
        return result;
      }
    }
  }
  return result;
}

bool gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  return gradcheck_result(f, inputs, opts).ok;
}

}  // namespace kiln
