// Rows of cross_entropy: reductions, ignore_index, label smoothing, (N, C, d) and (C)
// layouts, with and without class weights, against PyTorch (ops_forward.txt, made by
// make_op_fixtures.py; math_ops.txt, made by make_math_fixtures.py), and generated
// inputs in every layout for gradcheck and the CUDA backend. The targets (and class
// weights) are constants captured by the rows; they follow the logits' device and dtype.
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using RD = Reduction;

const std::vector<std::pair<std::string, RD>> kReds = {{"none", RD::None}, {"mean", RD::Mean}, {"sum", RD::Sum}};

// ops_forward.txt: (5, 4) logits, (2, 4, 3) and (4) ones.
std::vector<OpTest> unweighted_rows() {
  const std::string f = "ops_forward.txt";
  auto row = [&](const std::string& sample, Fn fn, const std::string& x, const std::string& out) {
    return OpTest{.op = "cross_entropy",
                  .sample = "fixture, " + sample,
                  .fn = std::move(fn),
                  .inputs = {"ce.{t}." + x},
                  .expected = "ce.{t}." + out,
                  .file = f,
                  .zero_size = false};  // the targets have the logits' rows
  };
  std::vector<OpTest> rows;
  for (const auto& [rn, r] : kReds) {
    const RD red = r;
    rows.push_back(row(rn, [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t", x[0]), -100, 0.0, red); },
                       "x", rn));
    rows.push_back(row(rn + ", smoothing 0.1",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t", x[0]), -100, 0.1, red); }, "x",
                       rn + ".ls"));
    rows.push_back(row(rn + ", ignore 2",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t2", x[0]), 2, 0.0, red); }, "x",
                       rn + ".ign2"));
    rows.push_back(row(rn + ", ignore 2, smoothing 0.1",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t2", x[0]), 2, 0.1, red); }, "x",
                       rn + ".ign2ls"));
    rows.push_back(row(rn + ", (N, C, d)",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t3", x[0]), -100, 0.0, red); }, "x3",
                       rn + ".nd"));
    rows.push_back(row(rn + ", (N, C, d), smoothing 0.1",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t3", x[0]), -100, 0.1, red); }, "x3",
                       rn + ".ndls"));
    rows.push_back(row(rn + ", (C)",
                       [f, red](V x) { return cross_entropy(x[0], constant_like(f, "ce.t1", x[0]), -100, 0.0, red); }, "x1",
                       rn + ".1d"));
  }
  rows.push_back(row("the defaults", [f](V x) { return cross_entropy(x[0], constant_like(f, "ce.t", x[0])); }, "x", "mean"));
  return rows;
}

// math_ops.txt: with class weights (6, 4) logits, (2, 4, 3) and (4); the float64
// gradients of the mean (or sum) loss.
std::vector<OpTest> weighted_rows() {
  const std::string f = "math_ops.txt";
  auto row = [&](const std::string& sample, Fn fn, const std::string& x, const std::string& out) {
    return OpTest{.op = "cross_entropy",
                  .sample = "weighted, " + sample,
                  .fn = std::move(fn),
                  .inputs = {"ce.{t}." + x},
                  .expected = "ce.{t}." + out,
                  .file = f,
                  .zero_size = false};  // the targets have the logits' rows
  };
  auto w = [f](const Tensor& x) { return constant_like(f, "ce.{t}.w", x); };
  auto t = [f](const std::string& name, const Tensor& x) { return constant_like(f, name, x); };
  std::vector<OpTest> rows;
  for (const auto& [rn, r] : kReds) {
    const RD red = r;
    const std::string p = rn + ".";
    rows.push_back(row(rn, [=](V x) { return cross_entropy(x[0], t("ce.t", x[0]), w(x[0]), -100, 0.0, red); }, "x",
                       p + "ce"));
    rows.push_back(row(rn + ", smoothing 0.2",
                       [=](V x) { return cross_entropy(x[0], t("ce.t", x[0]), w(x[0]), -100, 0.2, red); }, "x",
                       p + "ce.ls"));
    rows.push_back(row(rn + ", ignore 2",
                       [=](V x) { return cross_entropy(x[0], t("ce.t2", x[0]), w(x[0]), 2, 0.0, red); }, "x",
                       p + "ce.ign2"));
    rows.push_back(row(rn + ", ignore 2, smoothing 0.3",
                       [=](V x) { return cross_entropy(x[0], t("ce.t2", x[0]), w(x[0]), 2, 0.3, red); }, "x",
                       p + "ce.ign2ls"));
    rows.push_back(row(rn + ", (N, C, d)",
                       [=](V x) { return cross_entropy(x[0], t("ce.t3", x[0]), w(x[0]), -100, 0.0, red); }, "x3",
                       p + "ce.nd"));
    rows.push_back(row(rn + ", (N, C, d), smoothing 0.1",
                       [=](V x) { return cross_entropy(x[0], t("ce.t3", x[0]), w(x[0]), -100, 0.1, red); }, "x3",
                       p + "ce.ndls"));
    rows.push_back(row(rn + ", (C)",
                       [=](V x) { return cross_entropy(x[0], t("ce.t1", x[0]), w(x[0]), -100, 0.0, red); }, "x1",
                       p + "ce.1d"));
  }
  // The float64 gradients of sum(loss) against torch's.
  with_sum_grads(row_named(rows, "weighted, mean"), {"ce.{t}.grad.ce"});
  with_sum_grads(row_named(rows, "weighted, mean, smoothing 0.2"), {"ce.{t}.grad.ce.ls"});
  with_sum_grads(row_named(rows, "weighted, mean, ignore 2, smoothing 0.3"), {"ce.{t}.grad.ce.ign2ls"});
  with_sum_grads(row_named(rows, "weighted, sum, (N, C, d), smoothing 0.1"), {"ce.{t}.grad.ce.ndls"});
  return rows;
}

OpTest made(const std::string& sample, Fn fn, std::vector<In> in) {
  return {.op = "cross_entropy", .sample = sample, .fn = std::move(fn), .made = std::move(in), .zero_size = false};
}

// Generated logits: gradcheck in float64 (gradcheck's tolerances, never loosened) and
// the CUDA backend against the CPU.
std::vector<OpTest> made_rows() {
  const Shape s4{4}, s23{2, 3};
  auto t4 = [=](const Tensor& x) { return indices_like({1, 0, 4, 2}, s4, x); };
  auto t4_ign = [=](const Tensor& x) { return indices_like({1, -100, 4, 2}, s4, x); };
  auto t4_ign3 = [=](const Tensor& x) { return indices_like({3, 0, 3, 2}, s4, x); };  // ignore_index 3
  auto t0 = [](const Tensor& x) { return indices_like({2}, {}, x); };
  auto tnd = [=](const Tensor& x) { return indices_like({0, 3, 1, 2, 2, 0}, s23, x); };
  auto tnd_ign = [=](const Tensor& x) { return indices_like({0, -100, 1, 2, -100, 3}, s23, x); };
  auto tnd_ign_w = [=](const Tensor& x) { return indices_like({0, -100, 1, 2, 3, 3}, s23, x); };
  auto w5 = [](const Tensor& x) { return values_like({0.2, 1.0, 2.5, 0.7, 1.3}, {5}, x); };
  auto w4 = [](const Tensor& x) { return values_like({0.5, 2.0, 1.0, 0.3}, {4}, x); };
  auto wide = [](const Tensor& x) {
    std::vector<int64_t> t(6);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>(i * 331 % 1000);
    return indices_like(t, {6}, x);
  };
  auto wide_w = [](const Tensor& x) {
    std::vector<double> w(1000);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5 + static_cast<double>(i % 7) * 0.25;
    return values_like(w, {1000}, x);
  };
  std::vector<OpTest> rows = {
      made("mean", [=](V x) { return cross_entropy(x[0], t4(x[0])); }, {R({4, 5})}),
      made("sum", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.0, RD::Sum); }, {R({4, 5})}),
      made("none", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.0, RD::None); }, {R({4, 5})}),
      made("ignore_index -100 mean", [=](V x) { return cross_entropy(x[0], t4_ign(x[0])); }, {R({4, 5})}),
      made("ignore_index -100 none", [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), -100, 0.0, RD::None); },
           {R({4, 5})}),
      made("ignore_index 3 sum", [=](V x) { return cross_entropy(x[0], t4_ign3(x[0]), 3, 0.0, RD::Sum); }, {R({4, 5})}),
      made("ignore_index 3 mean", [=](V x) { return cross_entropy(x[0], t4_ign3(x[0]), 3); }, {R({4, 5})}),
      made("label_smoothing 0.1 mean", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.1); }, {R({4, 5})}),
      made("label_smoothing 0.1 none", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.1, RD::None); },
           {R({4, 5})}),
      made("label_smoothing 0.1 sum with ignore",
           [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), -100, 0.1, RD::Sum); }, {R({4, 5})}),
      made("label_smoothing 0.1 mean with ignore", [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), -100, 0.1); },
           {R({4, 5})}),
      made("1-D logits mean", [=](V x) { return cross_entropy(x[0], t0(x[0])); }, {R({5})}),
      made("1-D logits none smoothing", [=](V x) { return cross_entropy(x[0], t0(x[0]), -100, 0.1, RD::None); },
           {R({5})}),
      made("(N,C,d) mean", [=](V x) { return cross_entropy(x[0], tnd(x[0])); }, {R({2, 4, 3})}),
      made("(N,C,d) none", [=](V x) { return cross_entropy(x[0], tnd(x[0]), -100, 0.0, RD::None); }, {R({2, 4, 3})}),
      made("(N,C,d) ignore and smoothing sum",
           [=](V x) { return cross_entropy(x[0], tnd_ign(x[0]), -100, 0.1, RD::Sum); }, {R({2, 4, 3})}),
      made("(N,C,d) ignore mean", [=](V x) { return cross_entropy(x[0], tnd_ign(x[0])); }, {R({2, 4, 3})}),
      made("(N,C,d1,d2) mean smoothing",
           [](V x) { return cross_entropy(x[0], indices_like({0, 2, 1, 1, 2, 0, -100, 1}, {2, 2, 2}, x[0]), -100, 0.1); },
           {R({2, 3, 2, 2})}),
      made("transposed logits", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.1); }, {T({4, 5})}),
      made("stepped logits none", [=](V x) { return cross_entropy(x[0], t4(x[0]), -100, 0.0, RD::None); },
           {S({4, 5})}),
      made("stepped logits, ignore, smoothing, sum",
           [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), -100, 0.1, RD::Sum); }, {S({4, 5})}),
      made("permuted (N,C,d) logits", [=](V x) { return cross_entropy(x[0], tnd(x[0])); }, {Pm({2, 4, 3})}),
      made("permuted (N,C,d) none, smoothing 0.2",
           [=](V x) { return cross_entropy(x[0], tnd(x[0]), -100, 0.2, RD::None); }, {Pm({2, 4, 3})}),
      made("of a matmul", [=](V x) { return cross_entropy(matmul(x[0], x[1]), t4(x[0])); }, {R({4, 3}), R({3, 5})}),
      made("1000 classes", [=](V x) { return cross_entropy(x[0], wide(x[0]), 3, 0.1); }, {R({6, 1000})}),
      // class weights
      made("weight mean", [=](V x) { return cross_entropy(x[0], t4(x[0]), w5(x[0])); }, {R({4, 5})}),
      made("weight sum", [=](V x) { return cross_entropy(x[0], t4(x[0]), w5(x[0]), -100, 0.0, RD::Sum); }, {R({4, 5})}),
      made("weight none", [=](V x) { return cross_entropy(x[0], t4(x[0]), w5(x[0]), -100, 0.0, RD::None); },
           {R({4, 5})}),
      made("weight ignore -100 mean", [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), w5(x[0])); }, {R({4, 5})}),
      made("weight ignore 3 mean", [=](V x) { return cross_entropy(x[0], t4_ign3(x[0]), w5(x[0]), 3); }, {R({4, 5})}),
      made("weight smoothing mean", [=](V x) { return cross_entropy(x[0], t4(x[0]), w5(x[0]), -100, 0.2); },
           {R({4, 5})}),
      made("weight smoothing ignore mean", [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), w5(x[0]), -100, 0.3); },
           {R({4, 5})}),
      made("weight smoothing ignore, stepped", [=](V x) { return cross_entropy(x[0], t4_ign(x[0]), w5(x[0]), -100, 0.1); },
           {S({4, 5})}),
      made("weight smoothing ignore 3 none",
           [=](V x) { return cross_entropy(x[0], t4_ign3(x[0]), w5(x[0]), 3, 0.1, RD::None); }, {R({4, 5})}),
      made("weight (N,C,d) permuted smoothing",
           [=](V x) { return cross_entropy(x[0], tnd_ign_w(x[0]), w4(x[0]), -100, 0.1); }, {Pm({2, 4, 3})}),
      made("weight (N,C,d) permuted none",
           [=](V x) { return cross_entropy(x[0], tnd(x[0]), w4(x[0]), -100, 0.0, RD::None); }, {Pm({2, 4, 3})}),
      made("weight transposed", [=](V x) { return cross_entropy(x[0], t4(x[0]), w5(x[0]), -100, 0.1, RD::Sum); },
           {T({4, 5})}),
      made("weight, 1000 classes", [=](V x) { return cross_entropy(x[0], wide(x[0]), wide_w(x[0]), 3, 0.1, RD::Sum); },
           {R({6, 1000})}),
  };
  // 1000 classes are for the CUDA kernels' tiling; gradcheck's dense Jacobian of 6000
  // logits would take seconds for what the small rows check already.
  for (OpTest& t : rows)
    if (t.sample.find("1000 classes") != std::string::npos) t.gradcheck = false;
  return rows;
}

void add_errors(OpTest& t) {
  const Tensor logits = randn({4, 3}), u;
  t.errors = {
      {"targets of another length", [] { cross_entropy(ones({4, 3}), zeros({5}, kInt64)); },
       {"[cross_entropy]", "(4,)", "(5,)", "(4, 3)"}},
      {"float targets", [] { cross_entropy(ones({4, 3}), zeros({4})); }, {"[cross_entropy]", "int64", "float32"}},
      {"int64 logits", [] { cross_entropy(ones({4, 3}, kInt64), zeros({4}, kInt64)); }, {"[cross_entropy]", "int64"}},
      {"bfloat16 targets", [] { cross_entropy(ones({2, 3}, kBFloat16), tensor({0, 1}).to(kBFloat16)); },
       {"[cross_entropy]", "int64", "bfloat16"}},
      {"a target past the classes", [logits] { cross_entropy(logits, from_vector<int64_t>({0, 1, 3, 2}, {4})); },
       {"[cross_entropy]", "target 3", "3 classes"}},
      {"a negative target", [logits] { cross_entropy(logits, from_vector<int64_t>({0, -1, 1, 2}, {4})); },
       {"[cross_entropy]", "target -1", "3 classes"}},
      // The ignore index itself is fine (see the rows), any other negative is not.
      {"-100 when the ignore index is -1", [logits] { cross_entropy(logits, from_vector<int64_t>({0, -100, 1, 2}, {4}), -1); },
       {"[cross_entropy]", "target -100"}},
      {"label_smoothing past 1", [logits] { cross_entropy(logits, zeros({4}, kInt64), -100, 1.5); },
       {"[cross_entropy]", "label_smoothing", "1.5"}},
      {"undefined targets", [u] { cross_entropy(ones({2, 3}), u); }, {"[cross_entropy]", "undefined"}},
      {"batchmean", [] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), -100, 0.0, RD::BatchMean); },
       {"[cross_entropy]", "batchmean"}},
      // class weights
      {"weights for 3 classes of 4", [] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), ones({3})); },
       {"[cross_entropy]", "4 classes", "(3,)"}},
      {"weights of rank 2", [] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), ones({4, 1})); },
       {"[cross_entropy]", "(4, 1)"}},
      {"float64 weights for float32 logits",
       [] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), ones({4}, kFloat64)); },
       {"[cross_entropy]", "float64", "float32"}},
      {"an undefined weight", [u] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), u); },
       {"[cross_entropy]", "weight", "undefined"}},
      {"a weight that requires grad",
       [] { cross_entropy(ones({3, 4}), zeros({3}, kInt64), ones({4}).requires_grad_()); },
       {"[cross_entropy]", "'weight'", "requires_grad"}},
      {"a target past the classes, with weights",
       [] { cross_entropy(ones({3, 4}), from_vector<int64_t>({0, 4, 1}, {3}), ones({4})); },
       {"[cross_entropy]", "target 4"}},
  };
}

}  // namespace

std::vector<OpTest> loss_rows() {
  std::vector<OpTest> rows = rows_of({&unweighted_rows, &weighted_rows, &made_rows});
  add_errors(rows.front());
  return rows;
}

}  // namespace kiln::optable
