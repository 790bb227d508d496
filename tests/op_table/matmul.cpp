// Rows of matmul, mm, bmm and linear: every torch.matmul shape case against PyTorch
// (ops_forward.txt, made by make_op_fixtures.py), bfloat16 (bf16.txt), and generated
// inputs in every layout for gradcheck and the CUDA backend.
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


std::vector<OpTest> fixture_rows() {
  auto fwd = [](const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
                const std::string& out) {
    return OpTest{.op = op,
                  .sample = sample,
                  .fn = std::move(fn),
                  .inputs = std::move(in),
                  .expected = out,
                  .file = "ops_forward.txt"};
  };
  std::vector<OpTest> rows;
  // vector, matrix and batch operands in every pairing, broadcast batches
  for (const std::string k : {"vv", "mv", "vm", "mm", "bm", "mb", "vb", "bv", "bb", "bcast", "bcast1"})
    rows.push_back(fwd("matmul", k, [](V x) { return matmul(x[0], x[1]); },
                       {"mm." + k + ".{t}.a", "mm." + k + ".{t}.b"}, "mm." + k + ".{t}.out"));
  // Transposed (non-contiguous) operands: a (4, 3) and b (5, 4) used as a^T @ b^T.
  const std::vector<std::string> t = {"mm.t.{t}.a", "mm.t.{t}.b"};
  rows.push_back(fwd("matmul", "a^T @ b^T", [](V x) { return matmul(x[0].t(), x[1].t()); }, t, "mm.t.{t}.out"));
  rows.push_back(fwd("mm", "a^T @ b^T", [](V x) { return mm(x[0].t(), x[1].t()); }, t, "mm.t.{t}.out"));
  rows.push_back(fwd("matmul", "a^T @ b^T (method)", [](V x) { return x[0].t().matmul(x[1].t()); }, t, "mm.t.{t}.out"));
  rows.push_back(fwd("bmm", "(batch, n, k) @ (batch, k, m)", [](V x) { return bmm(x[0], x[1]); },
                     {"mm.bb.{t}.a", "mm.bb.{t}.b"}, "mm.bb.{t}.out"));
  // The first input cannot lose its rows alone: it is transposed, or its batch of 1
  // broadcasts against the other's.
  for (OpTest& r : rows)
    if (r.sample == "bcast1" || r.sample.rfind("a^T", 0) == 0) r.zero_size = false;
  return rows;
}

std::vector<OpTest> made_rows() {
  const Fn mat = [](V x) { return matmul(x[0], x[1]); };
  std::vector<OpTest> rows = {
      made("matmul", "1-D . 1-D", mat, {R({4}), R({4})}),
      made("matmul", "1-D . 1-D, 7", mat, {R({7}), R({7})}),
      made("matmul", "2-D @ 2-D", mat, {R({2, 3}), R({3, 4})}),
      made("matmul", "2-D @ 2-D, (5, 3) @ (3, 4)", mat, {R({5, 3}), R({3, 4})}),
      made("matmul", "1-D @ 2-D", mat, {R({3}), R({3, 4})}),
      made("matmul", "2-D @ 1-D", mat, {R({2, 3}), R({3})}),
      made("matmul", "1-D @ 3-D", mat, {R({3}), R({2, 3, 2})}),
      made("matmul", "3-D @ 1-D", mat, {R({2, 2, 3}), R({3})}),
      made("matmul", "batched 3-D @ 3-D", mat, {R({2, 2, 3}), R({2, 3, 2})}),
      made("matmul", "batched (3,4,5) @ (3,5,6)", mat, {R({3, 4, 5}), R({3, 5, 6})}),
      made("matmul", "broadcast batch (2,1,3,4)@(5,4,2)", mat, {R({2, 1, 3, 4}), R({5, 4, 2})}),
      made("matmul", "broadcast batch (1,2,3)@(3,3,2)", mat, {R({1, 2, 3}), R({3, 3, 2})}),
      made("matmul", "(1,3) @ (3,1)", mat, {R({1, 3}), R({3, 1})}),
      made("matmul", "(3,1) @ (1,4) K=1", mat, {R({3, 1}), R({1, 4})}),
      made("matmul", "(3,1).t() @ (3,4) transposed", [](V x) { return matmul(x[0].t(), x[1]); }, {R({3, 1}), T({3, 4})}),
      made("matmul", "(2,3) @ (1,3).t()", [](V x) { return matmul(x[0], x[1].t()); }, {S({2, 3}), R({1, 3})}),
      made("matmul", "2-D @ 4-D", mat, {R({2, 3}), R({2, 2, 3, 2})}),
      made("matmul", "batched with stride-0 batch operand", [](V x) { return matmul(x[0].expand({3, 2, 3}), x[1]); },
           {R({1, 2, 3}), R({3, 3, 2})}),
      made("matmul", "2-D @ 3-D", mat, {R({2, 3}), R({2, 3, 2})}),
      made("matmul", "3-D @ 2-D folded", mat, {R({2, 3, 4}), R({4, 2})}),
      made("matmul", "3-D @ 2-D folded, (2,3,4) @ (4,6)", mat, {R({2, 3, 4}), R({4, 6})}),
      made("matmul", "4-D @ 2-D folded", mat, {R({2, 2, 1, 3}), R({3, 2})}),
      made("matmul", "a.t() @ b", [](V x) { return matmul(x[0].t(), x[1]); }, {R({3, 2}), R({3, 4})}),
      made("matmul", "a @ b.t()", [](V x) { return matmul(x[0], x[1].t()); }, {R({2, 3}), R({4, 3})}),
      made("matmul", "a.t() @ b.t()", [](V x) { return matmul(x[0].t(), x[1].t()); }, {R({3, 2}), R({4, 3})}),
      made("matmul", "transposed leaves", mat, {T({2, 3}), T({3, 4})}),
      made("matmul", "transposed and stepped leaves", mat, {T({2, 3}), S({3, 4})}),
      made("matmul", "stepped leaves", mat, {S({2, 3}), S({3, 2})}),
      made("matmul", "batched transposed leaves", mat, {T({2, 2, 3}), T({2, 3, 2})}),
      made("matmul", "batched transposed leaves, (2,4,3) @ (2,3,5)", mat, {T({2, 4, 3}), T({2, 3, 5})}),
      made("matmul", "batched permuted leaf", mat, {Pm({2, 2, 3}), R({2, 3, 2})}),
      made("matmul", "batched permuted (not a gemm layout)", mat, {Pm({2, 3, 4}), R({2, 4, 3})}),
      made("matmul", "permuted batch dims (copied)", [](V x) { return matmul(x[0].permute({1, 0, 2, 3}), x[1]); },
           {R({3, 2, 4, 5}), R({2, 3, 5, 2})}),
      made("matmul", "3-D transposed @ 2-D folded", mat, {T({2, 3, 4}), R({4, 2})}),
      made("matmul", "3-D @ 2-D transposed operand", [](V x) { return matmul(x[0], x[1].t()); },
           {R({2, 3, 4}), R({2, 4})}),
      made("matmul", "x @ x.t() (same input twice)", [](V x) { return matmul(x[0], x[0].t()); }, {R({2, 3})}),
      made("matmul", "attention shapes",
           [](V x) { return matmul(softmax(matmul(x[0], x[1].transpose(-1, -2)), -1), x[2]); },
           {R({2, 4, 7, 8}), R({2, 4, 9, 8}), R({2, 4, 9, 8})}),
      made("linear", "(2,3,4) W(5,4) b(5)", [](V x) { return linear(x[0], x[1], x[2]); },
           {R({2, 3, 4}), R({5, 4}), R({5})}),
      made("linear", "(2,3,16) W(24,16) b(24)", [](V x) { return linear(x[0], x[1], x[2]); },
           {R({2, 3, 16}), R({24, 16}), R({24})}),
      made("linear", "without bias", [](V x) { return linear(x[0], x[1]); }, {R({3, 4}), T({5, 4})}),
      made("linear", "1-D input, stepped weight", [](V x) { return linear(x[0], x[1], x[2]); },
           {R({4}), S({5, 4}), R({5})}),
      made("linear", "1-D input, no bias, transposed weight", [](V x) { return linear(x[0], x[1]); },
           {R({16}), T({24, 16})}),
      made("linear", "transposed input", [](V x) { return linear(x[0], x[1], x[2]); }, {T({3, 4}), R({2, 4}), R({2})}),
      // The input's gradient already has a buffer (the other branch's) when linear's
      // backward runs, which then accumulates into it; likewise a weight used twice.
      made("linear", "into a residual",
           [](V x) {
             Tensor h = mul(x[0], 2.0);
             return add(linear(h, x[1], x[2]), mul(h, 3.0));
           },
           {R({2, 3, 4}), R({4, 4}), R({4})}),
      made("linear", "weight used twice", [](V x) { return linear(linear(x[0], x[1]), x[1], x[2]); },
           {R({3, 4}), R({4, 4}), R({4})}),
      made("mm", "(2,3) @ (3,4)", [](V x) { return mm(x[0], x[1]); }, {R({2, 3}), R({3, 4})}),
      made("mm", "transposed operand", [](V x) { return mm(x[0], x[1].t()); }, {R({2, 3}), R({4, 3})}),
      made("bmm", "(2,2,3) @ (2,3,4)", [](V x) { return bmm(x[0], x[1]); }, {R({2, 2, 3}), R({2, 3, 4})}),
      made("bmm", "transposed operand", [](V x) { return bmm(x[0], x[1].transpose(1, 2)); },
           {R({2, 2, 3}), R({2, 4, 3})}),
  };
  // A (70, 65) @ (65, 80) has a dense Jacobian of 5600 x 9750: the CUDA check only.
  OpTest big = made("matmul", "bigger square", mat, {R({70, 65}), R({65, 80})});
  big.gradcheck = false;
  rows.push_back(std::move(big));
  // The first input cannot lose its rows alone: it is transposed, expanded or broadcast
  // against the other's batch.
  const std::set<std::string> no_zero_size = {"(3,1).t() @ (3,4) transposed", "a.t() @ b", "a.t() @ b.t()",
                                              "batched with stride-0 batch operand", "broadcast batch (1,2,3)@(3,3,2)",
                                              "permuted batch dims (copied)"};
  for (OpTest& r : rows)
    if (no_zero_size.count(r.sample)) r.zero_size = false;
  return rows;
}

// bfloat16: float32 accumulation rounded once, within 1 ulp of torch.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  rows.push_back(bf16_row("matmul", "mm.ab", [](V x) { return matmul(x[0], x[1]); }, {"mm.a", "mm.b"}, 1));
  rows.push_back(bf16_row("matmul", "mm.cb", [](V x) { return matmul(x[0], x[1]); }, {"mm.c", "mm.b"}, 1));
  rows.push_back(bf16_row("matmul", "mm.bt", [](V x) { return matmul(x[1].t(), x[0].t()); }, {"mm.a", "mm.b"}, 1));
  rows.push_back(bf16_row("linear", "mm.linear", [](V x) { return linear(x[0], x[1].t(), x[2]); }, {"mm.a", "mm.b", "mm.lin_b"}, 1));
  return rows;
}

void add_errors(std::vector<OpTest>& rows) {
  const Tensor u, bf = ones({2, 3}, kBFloat16);
  for (OpTest& t : rows) {
    if (t.op == "matmul" && t.sample == "vv")
      t.errors = {
          {"(2, 3) @ (4, 5)", [] { matmul(ones({2, 3}), ones({4, 5})); },
           {"[matmul] shapes (2, 3) and (4, 5) cannot be multiplied"}},
          {"1-D of other lengths", [] { matmul(ones({3}), ones({4})); }, {"[matmul]", "(3,)", "(4,)"}},
          {"2-D @ 1-D", [] { matmul(ones({2, 3}), ones({4})); }, {"[matmul]", "(2, 3)", "(4,)"}},
          {"3-D @ 2-D", [] { matmul(ones({5, 2, 3}), ones({4, 5})); }, {"[matmul]", "(5, 2, 3)", "(4, 5)"}},
          {"batches that do not broadcast", [] { matmul(ones({2, 2, 3}), ones({3, 3, 4})); },
           {"[matmul]", "(2,)", "(3,)", "broadcast"}},
          {"4-D batches that do not broadcast", [] { matmul(ones({2, 2, 3, 4}), ones({3, 4, 5})); },
           {"[matmul]", "(2, 2, 3, 4)", "(3, 4, 5)", "batch"}},
          {"3-D batches that do not broadcast", [] { matmul(ones({2, 3, 4}), ones({5, 4, 6})); },
           {"[matmul]", "(2, 3, 4)", "(5, 4, 6)"}},
          {"0-d", [] { matmul(scalar_tensor(1.0), ones({3})); }, {"[matmul]", "()", "(3,)"}},
          {"bool", [] { matmul(ones({2, 2}, kBool), ones({2, 2})); }, {"[matmul]", "bool", "float32"}},
          {"int64", [] { matmul(ones({2, 2}, kInt64), ones({2, 2}, kInt64)); }, {"[matmul]", "int64"}},
          {"float32 with float64", [] { matmul(ones({2, 2}), ones({2, 2}, kFloat64)); },
           {"[matmul]", "float32", "float64"}},
          {"bfloat16 with float32", [bf] { matmul(bf, ones({3, 2})); }, {"[matmul]", "bfloat16", "float32"}},
          {"undefined", [u] { matmul(ones({2, 2}), u); }, {"[matmul]", "undefined"}}};
    if (t.op == "mm" && t.errors.empty())
      t.errors = {{"3-D", [] { mm(ones({2, 3, 4}), ones({4, 2})); }, {"[mm]", "(2, 3, 4)", "(4, 2)"}},
                  {"(2, 3) @ (4, 5)", [] { mm(ones({2, 3}), ones({4, 5})); }, {"[mm]", "(2, 3)", "(4, 5)"}}};
    if (t.op == "bmm" && t.errors.empty())
      t.errors = {{"batches differ", [] { bmm(ones({2, 3, 4}), ones({3, 4, 2})); }, {"[bmm]", "(2, 3, 4)", "(3, 4, 2)"}},
                  {"inner dims differ", [] { bmm(ones({2, 2, 3}), ones({2, 4, 5})); },
                   {"[bmm]", "(2, 2, 3)", "(2, 4, 5)"}}};
    if (t.op == "linear" && t.errors.empty())
      t.errors = {
          {"1-D weight", [] { linear(ones({2, 3}), ones({3})); }, {"[linear]", "weight", "2-D", "(3,)"}},
          {"in_features differ", [] { linear(ones({2, 3}), ones({4, 5})); }, {"[linear]", "(2, 3)", "in_features = 5"}},
          {"float32 with float64", [] { linear(ones({2, 3}), ones({4, 3}, kFloat64)); },
           {"[linear]", "float32", "float64"}},
          {"bias of the wrong shape", [] { linear(ones({2, 3}), ones({4, 3}), ones({5})); },
           {"[linear]", "bias", "(4)", "(5,)"}},
          {"int64", [] { linear(ones({2, 3}, kInt64), ones({4, 3})); }, {"[linear]", "int64"}},
          {"bfloat16 with float32", [bf] { linear(bf, ones({4, 3})); }, {"[linear]", "bfloat16", "float32"}}};
  }
}

}  // namespace

std::vector<OpTest> matmul_rows() {
  std::vector<OpTest> rows = rows_of({&fixture_rows, &made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
