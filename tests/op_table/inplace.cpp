// Rows of the in-place methods (add_, sub_, mul_, div_, copy_, fill_, zero_, clamp_,
// masked_fill_): on a non-leaf copy of the input (x * 1), on views of it and on tensors
// outside the graph, for gradcheck and the CUDA backend, and bfloat16 against torch
// (bf16.txt, made by make_bf16_fixtures.py). (In-place autograd rules, such as a leaf
// that requires grad, are in test_autograd.cpp and test_errors.cpp.)
#include <map>
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


Tensor copy_of(const Tensor& x) { return x * 1.0; }  // a non-leaf with x's values
Tensor mask_of(const std::vector<double>& v, const Shape& s, const Tensor& like) {
  return ne(from_vector<double>(v, s), 0.0).to(like.device());
}

std::vector<OpTest> made_rows() {
  auto mask = [](const Tensor& x) { return mask_of({1, 0, 0, 1, 1, 0}, {2, 3}, x); };
  auto row_mask = [](const Tensor& x) { return mask_of({0, 1, 1}, {3}, x); };
  auto f64 = [](const Tensor& like) { return TensorOptions(like.dtype()).device(like.device()); };
  std::vector<OpTest> rows = {
      made("add_", "(2, 3)", [](V x) { Tensor y = copy_of(x[0]); y.add_(x[1]); return y; }, {R({2, 3}), R({2, 3})}),
      made("add_", "alpha, broadcast (3)", [](V x) { Tensor y = copy_of(x[0]); y.add_(x[1], -1.5); return y; },
           {R({2, 3}), R({3})}),
      made("add_", "scalar", [](V x) { Tensor y = copy_of(x[0]); y.add_(2.5); return y * x[0]; }, {R({2, 3})}),
      made("sub_", "(2, 3)", [](V x) { Tensor y = copy_of(x[0]); y.sub_(x[1]); return y; }, {R({2, 3}), R({2, 3})}),
      made("sub_", "alpha, broadcast (2,1)", [](V x) { Tensor y = copy_of(x[0]); y.sub_(x[1], 0.5); return y * y; },
           {R({2, 3}), R({2, 1})}),
      made("sub_", "scalar", [](V x) { Tensor y = copy_of(x[0]); y.sub_(0.75); return y * y; }, {R({2, 3})}),
      made("mul_", "(2, 3)", [](V x) { Tensor y = copy_of(x[0]); y.mul_(x[1]); return y; }, {R({2, 3}), R({2, 3})}),
      made("mul_", "broadcast (3,1)", [](V x) { Tensor y = copy_of(x[0]); y.mul_(x[1]); return y * x[1]; },
           {R({2, 3, 4}), R({3, 1})}),
      made("mul_", "scalar", [](V x) { Tensor y = copy_of(x[0]); y.mul_(-3.0); return y * y; }, {R({2, 3})}),
      made("div_", "(2, 3)", [](V x) { Tensor y = copy_of(x[0]); y.div_(x[1]); return y; }, {R({2, 3}), Z({2, 3})}),
      made("div_", "broadcast (3)", [](V x) { Tensor y = copy_of(x[0]); y.div_(x[1]); return y * x[0]; },
           {R({2, 3}), Z({3})}),
      made("div_", "scalar", [](V x) { Tensor y = copy_of(x[0]); y.div_(4.0); return y * y; }, {R({2, 3})}),
      made("masked_fill_", "(2, 3)", [mask](V x) { Tensor y = copy_of(x[0]); y.masked_fill_(mask(x[0]), -2.0); return y * x[0]; },
           {R({2, 3})}),
      made("masked_fill_", "broadcast mask",
           [row_mask](V x) { Tensor y = x[0] * x[1]; y.masked_fill_(row_mask(x[0]), 0.5); return y; },
           {R({2, 3}), R({2, 3})}),
      made("copy_", "(2, 3)", [](V x) { Tensor y = copy_of(x[0]); y.copy_(x[1]); return y * x[0]; }, {R({2, 3}), R({2, 3})}),
      made("copy_", "broadcast (3)", [](V x) { Tensor y = copy_of(x[0]); y.copy_(x[1]); return y * x[0]; },
           {R({2, 3}), R({3})}),
      made("fill_", "(2, 3)", [](V x) { Tensor y = x[0] * x[1]; y.fill_(2.0); return y * x[0]; }, {R({2, 3}), R({2, 3})}),
      made("zero_", "(2, 3)", [](V x) { Tensor y = x[0] * x[1]; y.zero_(); return y + x[1]; }, {R({2, 3}), R({2, 3})}),
      made("clamp_", "both", [](V x) { Tensor y = copy_of(x[0]); y.clamp_(-0.5, 0.6); return y * x[0]; }, {D({3, 4})}),
      made("clamp_", "min only", [](V x) { Tensor y = copy_of(x[0]); y.clamp_(0.1, std::nullopt); return y; }, {D({3, 4})}),
      made("add_", "operators += -= *= /=",
           [](V x) {
             Tensor y = copy_of(x[0]);
             y += x[1];
             y *= x[1];
             y -= 0.5;
             y /= x[2];
             y *= 2.0;
             y += 1.0;
             y -= x[0];
             y /= 3.0;
             return y;
           },
           {R({2, 3}), R({2, 3}), Z({2, 3})}),
      made("mul_", "a chain of in-place ops on one tensor",
           [](V x) { Tensor y = copy_of(x[0]); y.mul_(x[1]).add_(x[1]).mul_(x[0]).div_(x[2]); return y; },
           {R({2, 3}), R({2, 3}), Z({2, 3})}),
      made("mul_", "non-contiguous self and operand", [](V x) { Tensor y = copy_of(x[0]).t(); y.mul_(x[1]); return y; },
           {R({3, 4}), T({4, 3})}),
      made("add_", "stepped operand", [](V x) { Tensor y = copy_of(x[0]); y.add_(x[1], 2.0); return y * y; },
           {R({3, 4}), S({3, 4})}),
      // on views, and on tensors outside the graph
      made("mul_", "narrow(0, 0, 1).mul_(2)", [](V x) { Tensor y = copy_of(x[0]); y.narrow(0, 0, 1).mul_(2.0); return y * y; },
           {R({2, 3})}),
      made("zero_", "select(1, 0).zero_()", [](V x) { Tensor y = copy_of(x[0]); y.select(1, 0).zero_(); return y * x[0]; },
           {R({2, 3})}),
      made("mul_", "select(0, 1).mul_(tensor)", [](V x) { Tensor y = copy_of(x[0]); y.select(0, 1).mul_(x[1]); return y; },
           {R({2, 3}), R({3})}),
      made("add_", "t().add_(tensor)", [](V x) { Tensor y = copy_of(x[0]); y.t().add_(x[1]); return y * x[0]; },
           {R({2, 3}), R({3, 2})}),
      made("div_", "view of a view: narrow(1, 1, 2).select(0, 1).div_",
           [](V x) { Tensor y = copy_of(x[0]); y.narrow(1, 1, 2).select(0, 1).div_(x[1]); return y; },
           {R({3, 4}), Z({2})}),
      made("masked_fill_", "slice with step",
           [](V x) {
             Tensor y = copy_of(x[0]);
             y.slice(1, 0, 4, 2).masked_fill_(mask_of({1, 0, 0, 1, 1, 0}, {3, 2}, x[0]), 0.25);
             return y * x[0];
           },
           {R({3, 4})}),
      made("clamp_", "view(-1).clamp_", [](V x) { Tensor y = copy_of(x[0]); y.view({-1}).clamp_(-0.5, 0.6); return y; },
           {D({3, 4})}),
      made("mul_", "the view itself used after",
           [](V x) { Tensor y = copy_of(x[0]); Tensor r = y.select(0, 0); r.mul_(x[1]); return r * r; },
           {R({2, 3}), R({3})}),
      made("mul_", "an older view used after the base changed",
           [](V x) { Tensor y = copy_of(x[0]); Tensor col = y.select(1, 2); y.mul_(x[1]); return col * 1.0; },
           {R({2, 3}), R({2, 3})}),
      made("sub_", "view of a non-contiguous input",
           [](V x) { Tensor y = copy_of(x[0]); y.narrow(1, 0, 2).sub_(x[1]); return y; }, {T({3, 4}), R({3, 2})}),
      made("copy_", "into a zeros buffer's row",
           [f64](V x) {
             Tensor buf = zeros({2, 3}, f64(x[0]));
             buf.select(0, 1).copy_(x[0]);
             return buf * x[1];
           },
           {R({3}), R({2, 3})}),
      made("copy_", "into a tensor that did not require grad",
           [f64](V x) { Tensor z = zeros({2, 3}, f64(x[0])); z.copy_(x[0]); return z * x[0]; }, {R({2, 3})}),
      made("add_", "of an operand into a constant",
           [f64](V x) { Tensor z = ones({2, 3}, f64(x[0])); z.add_(x[0], 3.0); return z * z; }, {R({3})}),
  };
  // The samples pin their shapes: an operand or mask of fixed rows, a narrow or select at
  // rows a zero-size input no longer has, a transposed self, a constant of 2 rows.
  const std::set<std::string> no_zero_size = {
      "add_ t().add_(tensor)", "copy_ into a tensor that did not require grad",
      "div_ view of a view: narrow(1, 1, 2).select(0, 1).div_", "masked_fill_ (2, 3)", "masked_fill_ slice with step",
      "mul_ narrow(0, 0, 1).mul_(2)", "mul_ non-contiguous self and operand", "mul_ select(0, 1).mul_(tensor)",
      "mul_ the view itself used after"};
  for (OpTest& t : rows)
    if (no_zero_size.count(t.op + " " + t.sample)) t.zero_size = false;
  // view needs a contiguous input: no non-contiguous copies there.
  for (OpTest& t : rows)
    if (t.sample == "view(-1).clamp_") t.strided = false;
  return rows;
}

// bfloat16 in place: the same values as the out-of-place ops (add_ with alpha computes
// a + alpha·b in float32 too), bit for bit.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  rows.push_back(bf16_row("add_", "ew.add_alpha",
                          [](V x) {
                            Tensor c = x[0].clone();
                            c.add_(x[1], 0.3);
                            return c;
                          },
                          {"ew.a", "ew.b"}));
  rows.push_back(bf16_row("sub_", "ew.sub_alpha",
                          [](V x) {
                            Tensor c = x[0].clone();
                            c.sub_(x[1], 1.7);
                            return c;
                          },
                          {"ew.a", "ew.b"}));
  rows.push_back(bf16_row("mul_", "ew.mul_scalar",
                          [](V x) {
                            Tensor c = x[0].clone();
                            c.mul_(0.1);
                            return c;
                          },
                          {"ew.a"}));
  rows.push_back(bf16_row("add_", "ew.add_scalar",
                          [](V x) {
                            Tensor c = x[0].clone();
                            c.add_(0.3);
                            return c;
                          },
                          {"ew.a"}));
  rows.push_back(bf16_row("div_", "ew.div_scalar",
                          [](V x) {
                            Tensor c = x[0].clone();
                            c.div_(0.3);
                            return c;
                          },
                          {"ew.a"}));
  return rows;
}

void add_errors(std::vector<OpTest>& rows) {
  const Tensor u;
  std::map<std::string, std::vector<ErrorCase>> errors = {
      {"add_",
       {{"an operand of other rows", [] { ones({2, 3}).add_(ones({4, 3})); }, {"[add_]", "(2, 3)", "(4, 3)"}},
        {"an operand that would grow self", [] { ones({2, 3}).add_(ones({2, 2, 3})); }, {"[add_]", "(2, 3)", "(2, 2, 3)"}},
        {"a float32 operand into int64", [] { zeros({3}, kInt64).add_(ones({3})); }, {"[add_]", "float32", "int64"}},
        {"undefined", [u] { ones({2}).add_(u); }, {"[add_]", "undefined"}}}},
      {"copy_",
       {{"a source that does not broadcast", [] { ones({2, 3}).copy_(ones({4})); }, {"[copy_]", "(4,)", "(2, 3)"}},
        {"undefined", [u] { ones({2}).copy_(u); }, {"[copy_]", "undefined"}}}},
      {"div_", {{"int64 self", [] { zeros({3}, kInt64).div_(2.0); }, {"[div_]", "int64"}}}},
  };
  for (auto& [op, cases] : errors)
    for (OpTest& t : rows)
      if (t.op == op) {
        t.errors = std::move(cases);
        break;
      }
}

}  // namespace

std::vector<OpTest> inplace_rows() {
  std::vector<OpTest> rows = rows_of({&made_rows, &bf16_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
