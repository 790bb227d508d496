// Rows of softmax, log_softmax and safe_softmax: forward values against PyTorch over
// every dim and with -inf masks (ops_forward.txt, made by make_op_fixtures.py), bfloat16
// (bf16.txt), and generated inputs in every layout for gradcheck and the CUDA backend.
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


OpTest fwd(const std::string& op, const std::string& sample, Fn fn, const std::string& in,
           const std::string& expected) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = {in},
          .expected = expected,
          .file = "ops_forward.txt"};
}

std::vector<OpTest> fixture_rows() {
  std::vector<OpTest> rows;
  for (const int64_t d : {0, 1, 2, -1}) {  // (2, 3, 5)
    const std::string ds = std::to_string(d);
    rows.push_back(fwd("softmax", "(2, 3, 5) dim " + ds, [d](V x) { return softmax(x[0], d); }, "sm.{t}.x",
                       "sm.{t}.softmax." + ds));
    rows.push_back(fwd("log_softmax", "(2, 3, 5) dim " + ds, [d](V x) { return log_softmax(x[0], d); }, "sm.{t}.x",
                       "sm.{t}.log_softmax." + ds));
  }
  rows.push_back(fwd("softmax", "the method", [](V x) { return x[0].softmax(-1); }, "sm.{t}.x", "sm.{t}.softmax.-1"));
  rows.push_back(
      fwd("log_softmax", "the method", [](V x) { return x[0].log_softmax(1); }, "sm.{t}.x", "sm.{t}.log_softmax.1"));
  // -inf entries as attention masks make: probability 0 (log -inf); a fully masked row
  // gives NaN and a row with one survivor gives 1, as in torch. No finite differences
  // across -inf and NaN.
  for (const std::string op : {"softmax", "log_softmax"}) {
    OpTest t = fwd(op, "-inf masks", [op](V x) { return op == "softmax" ? softmax(x[0], -1) : log_softmax(x[0], -1); },
                   "smmask.{t}.x", "smmask.{t}." + op);
    t.gradcheck = false;
    rows.push_back(std::move(t));
  }
  return rows;
}

std::vector<OpTest> made_rows() {
  return {
      made("softmax", "dim 0", [](V x) { return softmax(x[0], 0); }, {R({2, 3, 4})}),
      made("softmax", "dim 1", [](V x) { return softmax(x[0], 1); }, {R({2, 3, 4})}),
      made("softmax", "dim -1", [](V x) { return softmax(x[0], -1); }, {R({2, 3, 4})}),
      made("softmax", "1-D", [](V x) { return softmax(x[0], 0); }, {R({5})}),
      made("softmax", "transposed", [](V x) { return softmax(x[0], 1); }, {T({3, 4})}),
      made("softmax", "permuted dim 1", [](V x) { return x[0].softmax(1); }, {Pm({2, 3, 4})}),
      made("softmax", "weighted sum", [](V x) { return softmax(x[0], -1).mul(x[1]).sum({-1}); }, {R({3, 4}), R({3, 4})}),
      made("softmax", "last dim, 300 wide", [](V x) { return softmax(x[0], -1); }, {R({3, 300})}),
      made("softmax", "middle dim", [](V x) { return softmax(x[0], 1); }, {R({2, 5, 3})}),
      // 150 lines side by side: two full blocks of neighbouring lines and a partial one.
      made("softmax", "middle dim, 150 lines", [](V x) { return softmax(x[0], 1); }, {R({2, 5, 150})}),
      made("softmax", "masked lines, dim 0", [](V x) { return x[0].t().contiguous().softmax(0); }, {M({4, 6})}),
      made("softmax", "masked rows", [](V x) { return softmax(x[0], -1); }, {M({4, 6})}),
      made("softmax", "transposed, dim 0", [](V x) { return x[0].softmax(0); }, {T({4, 6})}),
      made("log_softmax", "dim 0", [](V x) { return log_softmax(x[0], 0); }, {R({2, 3, 4})}),
      made("log_softmax", "dim 1", [](V x) { return log_softmax(x[0], 1); }, {R({2, 3, 4})}),
      made("log_softmax", "dim -1", [](V x) { return log_softmax(x[0], -1); }, {R({2, 3, 4})}),
      made("log_softmax", "stepped", [](V x) { return log_softmax(x[0], -1); }, {S({3, 4})}),
      made("log_softmax", "large values", [](V x) { return log_softmax(x[0] * 50.0, 1); }, {R({2, 3})}),
      made("log_softmax", "of 50 x, last dim", [](V x) { return log_softmax(x[0] * 50.0, -1); }, {R({3, 7})}),
      made("log_softmax", "dim 0 of (6, 2, 3)", [](V x) { return log_softmax(x[0], 0); }, {R({6, 2, 3})}),
      made("log_softmax", "middle dim, 150 lines", [](V x) { return log_softmax(x[0], 1); }, {R({2, 5, 150})}),
      made("safe_softmax", "(3, 4)", [](V x) { return safe_softmax(x[0]); }, {R({3, 4})}),
      made("safe_softmax", "masked rows", [](V x) { return safe_softmax(x[0]); }, {M({4, 6})}),
      made("safe_softmax", "permuted", [](V x) { return safe_softmax(x[0]); }, {Pm({2, 3, 4})}),
  };
}

// bfloat16: the same float32 math as torch up to the order of the sums, within 1 ulp.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  auto row = [&](const std::string& op, const std::string& sample, Fn fn, const std::string& out) {
    rows.push_back({.op = op,
                    .sample = "bfloat16 " + sample,
                    .fn = std::move(fn),
                    .tags = {"bf16"},
                    .gradcheck = false,  // a bfloat16 sample: see the generated rows
                    .zero_size = false,
                    .cuda = false,
                    .bf16_inputs = {"sm.x"},
                    .bf16_expected = out,
                    .bf16_ulps = 1});
  };
  row("softmax", "dim 1", [](V x) { return softmax(x[0], 1); }, "sm.softmax1");
  row("softmax", "dim 0", [](V x) { return softmax(x[0], 0); }, "sm.softmax0");
  row("log_softmax", "dim 0", [](V x) { return log_softmax(x[0], 0); }, "sm.log_softmax0");
  return rows;
}

void add_errors(std::vector<OpTest>& rows) {
  const Tensor x = ones({2, 3}), u;
  for (OpTest& t : rows) {
    if (t.op == "softmax" && t.errors.empty() && t.sample == "(2, 3, 5) dim 0")
      t.errors = {{"dim 2 of 2", [x] { softmax(x, 2); }, {"[softmax]", "dim 2", "2 dimensions"}},
                  {"int64", [] { softmax(ones({3}, kInt64), 0); }, {"[softmax]", "int64"}},
                  {"int64, naming the dtypes it takes", [] { softmax(ones({2}, kInt64), 0); },
                   {"[softmax]", "(float32, float64 or bfloat16)", "int64"}},
                  {"undefined", [u] { softmax(u, 0); }, {"[softmax]", "undefined"}}};
    if (t.op == "log_softmax" && t.errors.empty() && t.sample == "(2, 3, 5) dim 0")
      t.errors = {{"dim -3 of 2", [x] { log_softmax(x, -3); }, {"[log_softmax]", "dim -3"}}};
  }
}

}  // namespace

std::vector<OpTest> softmax_rows() {
  std::vector<OpTest> rows = rows_of({&fixture_rows, &made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
