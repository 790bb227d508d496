// Rows of nll_loss: reductions, ignore_index, (N, C, d) and (C) layouts, with and without
// class weights, against PyTorch (nn_modules.txt, made by make_nn_fixtures.py;
// math_ops.txt, made by make_math_fixtures.py), and generated log-probabilities in other
// layouts for gradcheck and the CUDA backend. The targets and class weights are
// constants captured by the rows; they follow the input's device and dtype.
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using RD = Reduction;

const std::vector<std::pair<std::string, RD>> kReds = {{"none", RD::None}, {"mean", RD::Mean}, {"sum", RD::Sum}};

// A fixture row: the log-probabilities `x` of `file`, the output `out`.
OpTest fixture_row(const std::string& file, const std::string& sample, Fn fn, const std::string& x,
                   const std::string& out) {
  return {.op = "nll_loss",
          .sample = sample,
          .fn = std::move(fn),
          .inputs = {x},
          .expected = out,
          .file = file,
          .zero_size = false};  // the targets have the input's rows
}

// nn_modules.txt: (5, 4) log-probabilities, (2, 4, 3) and (4) ones, no class weights.
std::vector<OpTest> unweighted_rows() {
  const std::string f = "nn_modules.txt";
  auto t = [f](const std::string& name, const Tensor& x) { return constant_like(f, name, x); };
  std::vector<OpTest> rows;
  for (const auto& [rn, r] : kReds) {
    const RD red = r;
    const std::string p = "loss.{t}." + rn + ".";
    rows.push_back(fixture_row(f, rn, [=](V x) { return nll_loss(x[0], t("loss.t", x[0]), -100, red); },
                               "loss.{t}.lp", p + "nll"));
    rows.push_back(fixture_row(f, rn + ", ignore 2", [=](V x) { return nll_loss(x[0], t("loss.t2", x[0]), 2, red); },
                               "loss.{t}.lp", p + "nll.ign2"));
    rows.push_back(fixture_row(f, rn + ", (N, C, d)",
                               [=](V x) { return nll_loss(x[0], t("loss.t3", x[0]), -100, red); }, "loss.{t}.lp3",
                               p + "nll.nd"));
    rows.push_back(fixture_row(f, rn + ", (C)", [=](V x) { return nll_loss(x[0], t("loss.t1", x[0]), -100, red); },
                               "loss.{t}.lp1", p + "nll.1d"));
  }
  rows.push_back(fixture_row(f, "the defaults", [=](V x) { return nll_loss(x[0], t("loss.t", x[0])); }, "loss.{t}.lp",
                             "loss.{t}.mean.nll"));
  // Every target ignored: the mean is 0 / 0 = NaN, as torch.
  OpTest none_counted = fixture_row(
      f, "every target ignored", [](V x) { return nll_loss(x[0], indices_like({-100, -100, -100, -100, -100}, {5}, x[0])); },
      "loss.{t}.lp", "loss.f64.all_ignored.nll");
  none_counted.tags = {"f64"};
  none_counted.gradcheck = false;  // a NaN loss: no differences to compare
  rows.push_back(none_counted);
  with_sum_grads(row_named(rows, "mean, ignore 2"), {"loss.{t}.grad.nll.ign2"}, {"f64", "f32"});
  with_sum_grads(row_named(rows, "mean, (N, C, d)"), {"loss.{t}.grad.nll.nd"}, {"f64", "f32"});
  return rows;
}

// math_ops.txt: with class weights (6, 4) log-probabilities, (2, 4, 3) and (4).
std::vector<OpTest> weighted_rows() {
  const std::string f = "math_ops.txt";
  auto t = [f](const std::string& name, const Tensor& x) { return constant_like(f, name, x); };
  auto w = [f](const Tensor& x) { return constant_like(f, "ce.{t}.w", x); };
  std::vector<OpTest> rows;
  for (const auto& [rn, r] : kReds) {
    const RD red = r;
    const std::string p = "ce.{t}." + rn + ".";
    rows.push_back(fixture_row(f, "weighted, " + rn,
                               [=](V x) { return nll_loss(x[0], t("ce.t", x[0]), w(x[0]), -100, red); }, "ce.{t}.lp",
                               p + "nll"));
    rows.push_back(fixture_row(f, "weighted, " + rn + ", ignore 2",
                               [=](V x) { return nll_loss(x[0], t("ce.t2", x[0]), w(x[0]), 2, red); }, "ce.{t}.lp",
                               p + "nll.ign2"));
    rows.push_back(fixture_row(f, "weighted, " + rn + ", (N, C, d)",
                               [=](V x) { return nll_loss(x[0], t("ce.t3", x[0]), w(x[0]), -100, red); },
                               "ce.{t}.lp3", p + "nll.nd"));
    rows.push_back(fixture_row(f, "weighted, " + rn + ", (C)",
                               [=](V x) { return nll_loss(x[0], t("ce.t1", x[0]), w(x[0]), -100, red); },
                               "ce.{t}.lp1", p + "nll.1d"));
  }
  with_sum_grads(row_named(rows, "weighted, mean, ignore 2"), {"ce.{t}.grad.nll.ign2"}, {"f64"});
  with_sum_grads(row_named(rows, "weighted, mean, (N, C, d)"), {"ce.{t}.grad.nll.nd"}, {"f64"});
  return rows;
}

OpTest made_row(const std::string& sample, Fn fn, std::vector<In> in) {
  return {.op = "nll_loss", .sample = sample, .fn = std::move(fn), .made = std::move(in), .zero_size = false};
}

// Generated inputs, other layouts: gradcheck in float64 and the CUDA backend.
std::vector<OpTest> made_rows() {
  auto t4 = [](const Tensor& x) { return indices_like({1, 0, 4, 2}, {4}, x); };
  auto t4_ign = [](const Tensor& x) { return indices_like({1, -100, 4, 2}, {4}, x); };
  auto t4_ign3 = [](const Tensor& x) { return indices_like({3, 0, 3, 2}, {4}, x); };  // ignore_index 3
  auto tnd_ign = [](const Tensor& x) { return indices_like({0, -100, 1, 2, 3, 3}, {2, 3}, x); };
  auto w5 = [](const Tensor& x) { return values_like({0.2, 1.0, 2.5, 0.7, 1.3}, {5}, x); };
  auto w4 = [](const Tensor& x) { return values_like({0.5, 2.0, 1.0, 0.3}, {4}, x); };
  return {
      made_row("generated, mean", [=](V x) { return nll_loss(x[0], t4(x[0])); }, {R({4, 5})}),
      made_row("generated, none, ignore -100", [=](V x) { return nll_loss(x[0], t4_ign(x[0]), -100, RD::None); },
               {R({4, 5})}),
      made_row("transposed", [=](V x) { return nll_loss(x[0], t4(x[0]), -100, RD::Sum); }, {T({4, 5})}),
      made_row("stepped, ignore 3", [=](V x) { return nll_loss(x[0], t4_ign3(x[0]), 3); }, {S({4, 5})}),
      made_row("permuted (N, C, d) of log_softmax", [=](V x) { return nll_loss(log_softmax(x[0], 1), tnd_ign(x[0])); },
               {Pm({2, 4, 3})}),
      made_row("weight, mean", [=](V x) { return nll_loss(x[0], t4(x[0]), w5(x[0])); }, {R({4, 5})}),
      made_row("weight, ignore -100, mean", [=](V x) { return nll_loss(x[0], t4_ign(x[0]), w5(x[0])); }, {R({4, 5})}),
      made_row("weight, ignore 3, sum", [=](V x) { return nll_loss(x[0], t4_ign3(x[0]), w5(x[0]), 3, RD::Sum); },
               {R({4, 5})}),
      made_row("weight, none", [=](V x) { return nll_loss(x[0], t4_ign(x[0]), w5(x[0]), -100, RD::None); },
               {R({4, 5})}),
      made_row("weight, stepped", [=](V x) { return nll_loss(x[0], t4(x[0]), w5(x[0])); }, {S({4, 5})}),
      made_row("weight, (N, C, d) of log_softmax",
               [=](V x) { return nll_loss(log_softmax(x[0], 1), tnd_ign(x[0]), w4(x[0])); }, {R({2, 4, 3})}),
  };
}

void add_errors(OpTest& row) {
  const Tensor a = ones({3, 4}), t = zeros({3}, kInt64), u;
  row.errors = {
      {"float targets", [a] { nll_loss(a, zeros({3})); }, {"[nll_loss]", "int64", "float32"}},
      {"int64 input", [t] { nll_loss(ones({3, 4}, kInt64), t); }, {"[nll_loss]", "input", "int64"}},
      {"undefined targets", [a, u] { nll_loss(a, u); }, {"[nll_loss]", "undefined"}},
      {"targets of another shape", [a] { nll_loss(a, zeros({2, 2}, kInt64)); }, {"[nll_loss]", "(2, 2)"}},
      {"a target past the classes", [a] { nll_loss(a, from_vector<int64_t>({0, 4, 1}, {3})); },
       {"[nll_loss]", "target 4", "4 classes"}},
      {"a negative target", [a] { nll_loss(a, from_vector<int64_t>({0, -1, 1}, {3})); }, {"[nll_loss]", "target -1"}},
      {"no classes", [t] { nll_loss(ones({3, 0}), t); }, {"[nll_loss]", "no classes"}},
      {"a 0-d input", [] { nll_loss(ones({}), scalar_tensor(0, kInt64)); }, {"[nll_loss]", "()"}},
      {"batchmean", [a, t] { nll_loss(a, t, -100, RD::BatchMean); }, {"[nll_loss]", "batchmean"}},
      {"weights for 2 classes of 4", [a, t] { nll_loss(a, t, ones({2})); }, {"[nll_loss]", "4 classes", "(2,)"}},
      {"int64 weights", [a, t] { nll_loss(a, t, ones({4}, kInt64)); }, {"[nll_loss]", "int64", "float32"}},
      {"an undefined weight", [a, t, u] { nll_loss(a, t, u); }, {"[nll_loss]", "weight", "undefined"}},
      {"a weight that requires grad", [a, t] { nll_loss(a, t, ones({4}).requires_grad_()); },
       {"[nll_loss]", "requires_grad"}},
  };
}

}  // namespace

std::vector<OpTest> nll_loss_rows() {
  std::vector<OpTest> rows = rows_of({&unweighted_rows, &weighted_rows, &made_rows});
  add_errors(rows.front());
  return rows;
}

}  // namespace kiln::optable
