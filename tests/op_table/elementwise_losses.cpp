// Rows of the elementwise losses, mse_loss, l1_loss, smooth_l1_loss,
// binary_cross_entropy_with_logits and kl_div: every reduction, broadcast targets, both
// inputs' gradients, against PyTorch (math_ops.txt, made by make_math_fixtures.py), and
// generated inputs in other layouts for gradcheck and the CUDA backend. Weights are
// constants captured by the rows; they follow the input's device and dtype.
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using RD = Reduction;
const std::string kFile = "math_ops.txt";

const std::vector<std::pair<std::string, RD>> kReds = {{"none", RD::None}, {"mean", RD::Mean}, {"sum", RD::Sum}};

// A fixture row of two inputs. Only Reduction::None keeps an empty input empty (the mean
// of nothing is NaN, the sum 0).
OpTest fixture_row(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
                   const std::string& out, RD red) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(in),
          .expected = out,
          .file = kFile,
          .zero_size = red == RD::None,
          .bf16_rtol = red == RD::None ? 0.02 : 0.0};
}

OpTest made_row(const std::string& op, const std::string& sample, Fn fn, std::vector<In> in, RD red) {
  return {.op = op, .sample = sample, .fn = std::move(fn), .made = std::move(in), .zero_size = red == RD::None};
}

// ---------------------------------------------------------------- mse, l1, smooth_l1
// math_ops.txt: a and b (3, 4), with d = a - b 0 at [0, 0] (l1's kink), 0.25 and -0.75
// elsewhere (smooth_l1's quadratic part); row (4) broadcasts over a's rows.
struct Regression {
  std::string name, op;
  std::function<Tensor(const Tensor&, const Tensor&, RD)> f;
};

std::vector<OpTest> regression_rows() {
  const std::vector<Regression> losses = {
      {"mse", "mse_loss", [](const Tensor& a, const Tensor& b, RD r) { return mse_loss(a, b, r); }},
      {"l1", "l1_loss", [](const Tensor& a, const Tensor& b, RD r) { return l1_loss(a, b, r); }},
      {"sl1", "smooth_l1_loss", [](const Tensor& a, const Tensor& b, RD r) { return smooth_l1_loss(a, b, r); }},
      {"sl1_b05", "smooth_l1_loss",
       [](const Tensor& a, const Tensor& b, RD r) { return smooth_l1_loss(a, b, r, 0.5); }},
      {"sl1_b0", "smooth_l1_loss", [](const Tensor& a, const Tensor& b, RD r) { return smooth_l1_loss(a, b, r, 0.0); }},
  };
  std::vector<OpTest> rows;
  for (const Regression& l : losses) {
    const std::string p = "reg.{t}." + l.name + ".";
    const auto f = l.f;
    for (const auto& [rn, r] : kReds) {
      const RD red = r;
      OpTest same = fixture_row(l.op, l.name + " " + rn, [=](V x) { return f(x[0], x[1], red); },
                                {"reg.{t}.a", "reg.{t}.b"}, p + rn, red);
      OpTest bc = fixture_row(l.op, l.name + " " + rn + ", target (4)", [=](V x) { return f(x[0], x[1], red); },
                              {"reg.{t}.a", "reg.{t}.row"}, p + "bc." + rn, red);
      // Both sides get a gradient; a broadcast target's is summed over the rows. (torch's
      // smooth_l1 backward with beta = 0 gives -1 to both sides at d = 0, Kiln l1's
      // subgradient 0: that one is compared away from the kink, below.)
      if (red == RD::Mean && l.name != "sl1_b0") with_sum_grads(same, {p + "ga", p + "gb"});
      if (red == RD::Sum) with_sum_grads(bc, {p + "bc.ga", p + "bc.grow"});
      rows.push_back(same);
      rows.push_back(bc);
    }
  }
  OpTest nokink = {.op = "smooth_l1_loss",
                   .sample = "sl1_b0 mean, away from the kink",
                   .fn = [](V x) { return smooth_l1_loss(x[0], x[1], RD::Mean, 0.0); },
                   .inputs = {"reg.{t}.a", "reg.{t}.b_nokink"},
                   .file = kFile,
                   .zero_size = false};
  rows.push_back(with_sum_grads(nokink, {"reg.{t}.sl1_b0.ga", "reg.{t}.sl1_b0.gb"}));
  rows.front().errors = {
      {"shapes that do not broadcast", [] { mse_loss(ones({3, 4}), ones({4, 3})); }, {"[mse_loss]", "(3, 4)", "(4, 3)"}},
      {"an undefined target", [] { mse_loss(ones({3, 4}), Tensor()); }, {"[mse_loss]", "target", "undefined"}},
      {"batchmean", [] { mse_loss(ones({3}), ones({3}), RD::BatchMean); }, {"[mse_loss]", "batchmean", "kl_div"}},
      {"two int64 tensors", [] { mse_loss(ones({2}, kInt64), ones({2}, kInt64)); }, {"[mse_loss]", "int64"}},
  };
  return rows;
}

std::vector<OpTest> regression_made_rows() {
  std::vector<OpTest> rows = {
      made_row("mse_loss", "generated, mean", [](V x) { return mse_loss(x[0], x[1]); }, {R({3, 4}), R({3, 4})},
               RD::Mean),
      made_row("mse_loss", "generated, none, target (4)", [](V x) { return mse_loss(x[0], x[1], RD::None); },
               {R({3, 4}), R({4})}, RD::None),
      made_row("mse_loss", "transposed input", [](V x) { return mse_loss(x[0], x[1], RD::Sum); },
               {T({3, 4}), R({3, 4})}, RD::Sum),
      made_row("l1_loss", "generated, mean", [](V x) { return l1_loss(x[0], x[1]); }, {R({3, 4}), R({3, 4})}, RD::Mean),
      made_row("l1_loss", "none, target (3, 1)", [](V x) { return l1_loss(x[0], x[1], RD::None); },
               {R({3, 4}), R({3, 1})}, RD::None),
      made_row("l1_loss", "stepped input, sum", [](V x) { return l1_loss(x[0], x[1], RD::Sum); },
               {S({3, 4}), R({3, 4})}, RD::Sum),
      made_row("smooth_l1_loss", "generated, mean", [](V x) { return smooth_l1_loss(x[0], x[1]); },
               {R({3, 4}), R({3, 4})}, RD::Mean),
      made_row("smooth_l1_loss", "sum, beta 0.5", [](V x) { return smooth_l1_loss(x[0], x[1], RD::Sum, 0.5); },
               {R({3, 4}), R({3, 4})}, RD::Sum),
      made_row("smooth_l1_loss", "none, beta 2, target (4)",
               [](V x) { return smooth_l1_loss(x[0], x[1], RD::None, 2.0); }, {R({3, 4}), R({4})}, RD::None),
      made_row("smooth_l1_loss", "beta 0 (l1)", [](V x) { return smooth_l1_loss(x[0], x[1], RD::Mean, 0.0); },
               {R({3, 4}), R({3, 4})}, RD::Mean),
      made_row("smooth_l1_loss", "stepped input", [](V x) { return smooth_l1_loss(x[0], x[1]); },
               {S({3, 4}), R({3, 4})}, RD::Mean),
  };
  rows[3].errors = {
      {"a target that does not broadcast", [] { l1_loss(ones({3, 4}), ones({5})); }, {"[l1_loss]", "(3, 4)", "(5,)"}},
      {"two int64 tensors", [] { l1_loss(ones({2}, kInt64), ones({2}, kInt64)); }, {"[l1_loss]", "int64"}},
  };
  rows[6].errors = {
      {"shapes that do not broadcast", [] { smooth_l1_loss(ones({3, 4}), ones({4, 3})); },
       {"[smooth_l1_loss]", "(3, 4)", "(4, 3)"}},
      {"a negative beta", [] { smooth_l1_loss(ones({3}), ones({3}), RD::Mean, -1.0); },
       {"[smooth_l1_loss]", "beta", "-1"}},
  };
  return rows;
}

// ---------------------------------------------------------------- binary_cross_entropy_with_logits
// math_ops.txt: logits x (3, 4) up to +-100 (exp would overflow in float32), targets t in
// [0, 1] with 0s and 1s; weight (4) per class, wrow (3, 1) per row, pos_weight (4).
std::vector<OpTest> bce_rows() {
  const std::string op = "binary_cross_entropy_with_logits";
  auto c = [](const std::string& name) {
    return [name](const Tensor& x) { return name.empty() ? Tensor() : constant_like(kFile, "bce.{t}." + name, x); };
  };
  struct Weights {
    std::string name, weight, pos_weight;
  };
  const std::vector<Weights> cases = {
      {"plain", "", ""}, {"w", "weight", ""}, {"wrow", "wrow", ""}, {"pw", "", "pos_weight"}, {"wpw", "weight", "pos_weight"}};
  std::vector<OpTest> rows;
  for (const Weights& k : cases) {
    const auto w = c(k.weight), pw = c(k.pos_weight);
    for (const auto& [rn, r] : kReds) {
      const RD red = r;
      OpTest row = fixture_row(op, k.name + " " + rn,
                               [=](V x) { return binary_cross_entropy_with_logits(x[0], x[1], w(x[0]), red, pw(x[0])); },
                               {"bce.{t}.x", "bce.{t}.t"}, "bce.{t}." + k.name + "." + rn, red);
      if (k.name == "wrow") row.zero_size = false;  // a weight per row of the (3, 4) input
      if (red == RD::Mean) with_sum_grads(row, {"bce.{t}." + k.name + ".gx", "bce.{t}." + k.name + ".gt"});
      rows.push_back(row);
    }
  }
  auto w4 = [](const Tensor& x) { return values_like({0.5, 1.5, 2.0, 0.25}, {4}, x); };
  auto wrow = [](const Tensor& x) { return values_like({1.2, 0.3, 0.8}, {3, 1}, x); };
  auto pw = [](const Tensor& x) { return values_like({0.5, 1.0, 2.0, 3.0}, {4}, x); };
  const Tensor u;
  auto bce = [](const Tensor& x, const Tensor& t, const Tensor& w, RD r, const Tensor& p) {
    return binary_cross_entropy_with_logits(x, t, w, r, p);
  };
  const std::vector<OpTest> made = {
      made_row(op, "generated, mean", [=](V x) { return bce(x[0], x[1], u, RD::Mean, u); }, {R({3, 4}), R({3, 4})},
               RD::Mean),
      made_row(op, "generated, none", [=](V x) { return bce(x[0], x[1], u, RD::None, u); }, {R({3, 4}), R({3, 4})},
               RD::None),
      made_row(op, "logits times 20", [=](V x) { return bce(x[0] * 20.0, x[1], u, RD::Sum, u); },
               {R({3, 4}), R({3, 4})}, RD::Sum),
      made_row(op, "weight (4)", [=](V x) { return bce(x[0], x[1], w4(x[0]), RD::Mean, u); }, {R({3, 4}), R({3, 4})},
               RD::Mean),
      made_row(op, "pos_weight", [=](V x) { return bce(x[0], x[1], u, RD::Mean, pw(x[0])); }, {R({3, 4}), R({3, 4})},
               RD::Mean),
      made_row(op, "weight and pos_weight, sum", [=](V x) { return bce(x[0], x[1], wrow(x[0]), RD::Sum, pw(x[0])); },
               {R({3, 4}), R({3, 4})}, RD::Sum),
      made_row(op, "transposed input", [=](V x) { return bce(x[0], x[1], w4(x[0]), RD::Mean, pw(x[0])); },
               {T({3, 4}), R({3, 4})}, RD::Mean),
  };
  rows.insert(rows.end(), made.begin(), made.end());
  OpTest per_row = made_row(op, "weight (3, 1), none", [=](V x) { return bce(x[0], x[1], wrow(x[0]), RD::None, u); },
                            {R({3, 4}), R({3, 4})}, RD::None);
  per_row.zero_size = false;  // a weight per row of the (3, 4) input
  rows.push_back(per_row);
  const std::string e = "[" + op + "]";
  const Tensor a = ones({3, 4});
  rows.front().errors = {
      {"a target of another shape", [] { binary_cross_entropy_with_logits(ones({3}), ones({2, 3})); },
       {e, "(2, 3)", "(3,)"}},
      {"int64 targets", [a] { binary_cross_entropy_with_logits(a, ones({3, 4}, kInt64)); }, {e, "target", "int64"}},
      {"int64 input", [a] { binary_cross_entropy_with_logits(ones({3, 4}, kInt64), a); }, {e, "input", "int64"}},
      {"a weight that does not broadcast", [a] { binary_cross_entropy_with_logits(a, a, ones({2, 3, 4})); },
       {e, "weight", "(2, 3, 4)", "(3, 4)"}},
      {"a pos_weight that does not broadcast",
       [a] { binary_cross_entropy_with_logits(a, a, Tensor(), RD::Mean, ones({5})); }, {e, "(5,)", "(3, 4)"}},
      {"a weight that requires grad", [a] { binary_cross_entropy_with_logits(a, a, ones({4}).requires_grad_()); },
       {e, "'weight'", "requires_grad"}},
      {"a pos_weight that requires grad",
       [a] { binary_cross_entropy_with_logits(a, a, Tensor(), RD::Mean, ones({4}).requires_grad_()); },
       {e, "'pos_weight'"}},
      {"batchmean", [a] { binary_cross_entropy_with_logits(a, a, Tensor(), RD::BatchMean); }, {e, "batchmean"}},
  };
  return rows;
}

// ---------------------------------------------------------------- kl_div
// math_ops.txt: input i (3, 4) log-probabilities; targets t with a 0 (0 log 0 = 0), tp
// without, lt log-probabilities; row (4) a distribution; odd (4): 0.3, 0, -0.5, NaN.
std::vector<OpTest> kl_rows() {
  std::vector<std::pair<std::string, RD>> reds = kReds;
  reds.push_back({"batchmean", RD::BatchMean});
  std::vector<OpTest> rows;
  for (const auto& [rn, r] : reds) {
    const RD red = r;
    OpTest plain = fixture_row("kl_div", rn, [=](V x) { return kl_div(x[0], x[1], red); }, {"kl.{t}.i", "kl.{t}.t"},
                               "kl.{t}." + rn, red);
    OpTest log_target = fixture_row("kl_div", "log target, " + rn, [=](V x) { return kl_div(x[0], x[1], red, true); },
                                    {"kl.{t}.i", "kl.{t}.lt"}, "kl.{t}.log." + rn, red);
    OpTest bc = fixture_row("kl_div", rn + ", target (4)", [=](V x) { return kl_div(x[0], x[1], red); },
                            {"kl.{t}.i", "kl.{t}.row"}, "kl.{t}.bc." + rn, red);
    OpTest bcin = fixture_row("kl_div", rn + ", input (4)", [=](V x) { return kl_div(log(x[0]), x[1], red); },
                              {"kl.{t}.row", "kl.{t}.t"}, "kl.{t}.bcin." + rn, red);
    // t's 0 is where p log p has no two-sided derivative (p < 0 is NaN): central
    // differences cannot be taken there. The generated rows gradcheck positive targets.
    plain.gradcheck = bcin.gradcheck = false;
    if (red == RD::Sum) with_sum_grads(log_target, {"kl.{t}.log.gi", "kl.{t}.log.gt"});
    for (OpTest* t : {&plain, &log_target, &bc, &bcin}) rows.push_back(*t);
  }
  OpTest grads = {.op = "kl_div",
                  .sample = "batchmean, a target without zeros",
                  .fn = [](V x) { return kl_div(x[0], x[1], RD::BatchMean); },
                  .inputs = {"kl.{t}.i", "kl.{t}.tp"},
                  .file = kFile,
                  .zero_size = false};
  rows.push_back(with_sum_grads(grads, {"kl.{t}.gi", "kl.{t}.gt"}));
  OpTest odd = fixture_row("kl_div", "targets 0.3, 0, -0.5, NaN",
                           [](V x) { return kl_div(full_like(x[0], -1.0), x[0], RD::None); }, {"kl.{t}.odd"},
                           "kl.{t}.odd.out", RD::None);
  odd.gradcheck = false;  // NaN where the target is negative or NaN, as torch
  odd.bf16_rtol = 0;      // (and NaN in the bfloat16 comparison's scale)
  rows.push_back(odd);
  OpTest scalar = fixture_row(
      "kl_div", "0-d, batchmean (the sum)",
      [](V x) { return kl_div(x[0].select(0, 0).select(0, 0), x[1].select(0, 0).select(0, 0), RD::BatchMean); },
      {"kl.{t}.i", "kl.{t}.t"}, "kl.{t}.scalar.batchmean", RD::BatchMean);
  rows.push_back(scalar);
  const std::vector<OpTest> made = {
      made_row("kl_div", "generated, mean", [](V x) { return kl_div(x[0], x[1]); }, {R({3, 4}), P({3, 4})}, RD::Mean),
      made_row("kl_div", "generated, none", [](V x) { return kl_div(x[0], x[1], RD::None); }, {R({3, 4}), P({3, 4})},
               RD::None),
      made_row("kl_div", "generated, batchmean, target (4)", [](V x) { return kl_div(x[0], x[1], RD::BatchMean); },
               {R({3, 4}), P({4})}, RD::BatchMean),
      made_row("kl_div", "log target, none, transposed input", [](V x) { return kl_div(x[0], x[1], RD::None, true); },
               {T({3, 4}), R({3, 4})}, RD::None),
      made_row("kl_div", "of log_softmax and softmax",
               [](V x) { return kl_div(log_softmax(x[0], 1), softmax(x[1], 1), RD::BatchMean); },
               {R({3, 4}), S({3, 4})}, RD::BatchMean),
  };
  rows.insert(rows.end(), made.begin(), made.end());
  rows.front().errors = {
      {"int64 input", [] { kl_div(ones({3}, kInt64), ones({3})); }, {"[kl_div]", "input", "int64"}},
      {"int64 target", [] { kl_div(ones({3}), ones({3}, kInt64)); }, {"[kl_div]", "target", "int64"}},
      {"shapes that do not broadcast", [] { kl_div(ones({3}), ones({4})); }, {"[kl_div]", "(3,)", "(4,)"}},
  };
  return rows;
}

}  // namespace

std::vector<OpTest> elementwise_loss_rows() {
  return rows_of({&regression_rows, &regression_made_rows, &bce_rows, &kl_rows});
}

}  // namespace kiln::optable
