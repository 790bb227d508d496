// Rows of the view and copy ops: view, reshape, flatten, transpose, t, permute, squeeze,
// unsqueeze, expand, slice, narrow, select, index_select, cat, stack, split, chunk,
// contiguous, clone, the dtype and device conversions and sum_to: forward values
// against PyTorch (ops_forward.txt, made by make_op_fixtures.py), and generated inputs
// in every layout for gradcheck and the CUDA backend. Moves and copies are exact.
#include <cstdint>
#include <map>
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using I = std::vector<int64_t>;

constexpr Tol kExact{0, 0};

OpTest fwd(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
           const std::string& out) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(in),
          .expected = "shp.{t}." + out,
          .file = "ops_forward.txt",
          .tol64 = kExact,
          .tol32 = kExact};
}

// shp: a (2, 3), b (2, 2), c (1, 3), s (5, 4), t (2, 3, 4)
std::vector<OpTest> fixture_rows() {
  const std::string a = "shp.{t}.a", b = "shp.{t}.b", c = "shp.{t}.c", s = "shp.{t}.s", t = "shp.{t}.t";
  std::vector<OpTest> rows = {
      fwd("cat", "(2, 3), (2, 2) along 1", [](V x) { return cat({x[0], x[1]}, 1); }, {a, b}, "cat1"),
      fwd("cat", "(2, 3), (1, 3), (2, 3) along 0", [](V x) { return cat({x[0], x[1], x[0]}, 0); }, {a, c}, "cat0"),
      fwd("cat", "along -1", [](V x) { return cat({x[0], x[1], x[0]}, -1); }, {a, b}, "catm1"),
      fwd("transpose", "(2, 3, 4) 0, 2 then contiguous", [](V x) { return x[0].transpose(0, 2).contiguous(); }, {t},
          "tr02"),
      fwd("contiguous", "of a transposed view", [](V x) { return x[0].transpose(1, 2).contiguous(); }, {t}, "tr12"),
      fwd("clone", "of a transposed view", [](V x) { return transpose(x[0], 1, 2).clone(); }, {t}, "tr12"),
      fwd("permute", "2, 0, 1 then contiguous", [](V x) { return permute(x[0], {2, 0, 1}).contiguous(); }, {t}, "perm"),
      fwd("transpose", "plus its broadcast sum", [](V x) {
            const Tensor tr = x[0].transpose(0, 2);
            return tr + sum(tr, {0}, true);
          }, {t}, "tr_add"),
      fwd("transpose", "summed over dim 1", [](V x) { return sum(x[0].transpose(1, 2), {1}); }, {t}, "tr_sum"),
  };
  // Sums round, in another order than torch's: ops_forward's float tolerances.
  for (OpTest& r : rows)
    if (r.sample == "plus its broadcast sum" || r.sample == "summed over dim 1") {
      r.tol64 = kTol64;
      r.tol32 = kTol32;
    }
  for (const int64_t d : {0, 1, 2})
    rows.push_back(fwd("stack", "a, 2a, 3a along " + std::to_string(d),
                       [d](V x) { return stack({x[0], x[0] * 2.0, x[0] * 3.0}, d); }, {a}, "stack" + std::to_string(d)));
  // The parts of split and chunk, each against torch's.
  struct Parts {
    std::string op, name, sample;
    std::function<std::vector<Tensor>(const Tensor&)> f;
    size_t n;
  };
  const std::vector<Parts> parts = {
      {"split", "split2", "(5, 4) by 2 along 0", [](const Tensor& x) { return split(x, 2, 0); }, 3},
      {"split", "splitsz", "(5, 4) into 1, 3 along 1", [](const Tensor& x) { return split(x, I{1, 3}, 1); }, 2},
      {"chunk", "chunk3", "(5, 4) in 3 along 1: only 2", [](const Tensor& x) { return chunk(x, 3, 1); }, 2},
      {"chunk", "chunk2", "(5, 4) in 2 along 0", [](const Tensor& x) { return chunk(x, 2, 0); }, 2},
      {"split", "split2", "(5, 4) by 2 along 0 (method)", [](const Tensor& x) { return x.split(2, 0); }, 3},
  };
  for (const Parts& p : parts)
    for (size_t i = 0; i < p.n; ++i) {
      const auto f = p.f;
      const size_t n = p.n;
      rows.push_back(fwd(p.op, p.sample + ", part " + std::to_string(i),
                         [f, n, i](V x) {
                           const std::vector<Tensor> got = f(x[0]);
                           REQUIRE_MESSAGE(got.size() == n, got.size(), " parts, torch gives ", n);
                           return got[i];
                         },
                         {s}, p.name + "." + std::to_string(i)));
    }
  // The other operands have the first's rows, or the parts are cut along dim 0.
  const std::set<std::string> no_zero_size = {"(2, 3), (2, 2) along 1", "(2, 3), (1, 3), (2, 3) along 0",
                                              "along -1", "a, 2a, 3a along 1", "a, 2a, 3a along 2"};
  for (OpTest& r : rows)
    if (no_zero_size.count(r.sample) || (r.op == "split" && r.sample.find("along 0") != std::string::npos) ||
        r.sample.rfind("(5, 4) in 2 along 0", 0) == 0)
      r.zero_size = false;
  return rows;
}

std::vector<OpTest> made_rows() {
  auto idx = [](const Tensor& x) { return from_vector<int64_t>({2, 0, -1, 2}, {4}).to(x.device()); };
  std::vector<OpTest> rows = {
      made("view", "(2, 3) as (3, 2)", [](V x) { return view(x[0], {3, 2}); }, {R({2, 3})}),
      made("view", "-1", [](V x) { return x[0].view({-1}).mul(x[0].view({6})); }, {R({2, 3})}),
      made("reshape", "contiguous", [](V x) { return reshape(x[0], {4, 3}); }, {R({2, 3, 2})}),
      made("reshape", "transposed", [](V x) { return reshape(x[0], {12}); }, {T({3, 4})}),
      made("reshape", "transposed, times 2", [](V x) { return x[0].reshape({12}) * 2.0; }, {T({3, 4})}),
      made("reshape", "permuted", [](V x) { return x[0].reshape({6, -1}); }, {Pm({2, 3, 4})}),
      made("reshape", "of a transposed view", [](V x) { return x[0].t().reshape({2, 6}); }, {R({3, 4})}),
      made("flatten", "(2, 3, 2)", [](V x) { return flatten(x[0]); }, {R({2, 3, 2})}),
      made("flatten", "1..2", [](V x) { return flatten(x[0], 1, 2); }, {R({2, 3, 2, 2})}),
      made("flatten", "0-d", [](V x) { return flatten(x[0]); }, {R({})}),
      made("flatten", "stepped", [](V x) { return x[0].flatten(); }, {S({2, 3})}),
      made("transpose", "0, 2", [](V x) { return transpose(x[0], 0, 2); }, {R({2, 3, 4})}),
      made("t", "(2, 3)", [](V x) { return x[0].t(); }, {R({2, 3})}),
      made("permute", "1, 2, 0", [](V x) { return permute(x[0], {1, 2, 0}); }, {R({2, 3, 4})}),
      made("permute", "transposed", [](V x) { return permute(x[0], {2, 0, 1}); }, {T({2, 3, 4})}),
      made("permute", "then contiguous", [](V x) { return x[0].permute({2, 0, 1}).contiguous(); }, {R({2, 3, 4})}),
      made("squeeze", "all", [](V x) { return squeeze(x[0]); }, {R({1, 3, 1, 2})}),
      made("squeeze", "dim", [](V x) { return squeeze(x[0], 2); }, {R({1, 3, 1, 2})}),
      made("unsqueeze", "1", [](V x) { return unsqueeze(x[0], 1); }, {R({2, 3})}),
      made("unsqueeze", "0-d", [](V x) { return unsqueeze(x[0], 0); }, {R({})}),
      made("unsqueeze", "-1", [](V x) { return x[0].unsqueeze(-1); }, {R({2, 3})}),
      made("expand", "(3, 1) to (2, 3, 4)", [](V x) { return expand(x[0], {2, 3, 4}); }, {R({3, 1})}),
      made("expand", "-1", [](V x) { return x[0].expand({4, -1, 2}); }, {R({3, 1})}),
      made("expand", "0-d", [](V x) { return expand(x[0], {2, 3}); }, {R({})}),
      made("expand", "then mul", [](V x) { return x[0].expand({3, 4}).mul(x[1]); }, {R({1, 4}), R({3, 4})}),
      made("expand", "(3, 1) times (2, 3, 4)", [](V x) { return x[0].expand({2, 3, 4}) * x[1]; },
           {R({3, 1}), R({2, 3, 4})}),
      made("slice", "1..3", [](V x) { return slice(x[0], 1, 1, 3); }, {R({2, 4})}),
      made("slice", "with step", [](V x) { return slice(x[0], 1, 0, 5, 2); }, {R({2, 5})}),
      made("slice", "with step 3 dim 0", [](V x) { return x[0].slice(0, 1, 7, 3); }, {R({7, 2})}),
      made("slice", "negative bounds", [](V x) { return slice(x[0], -1, -3, -1); }, {R({2, 4})}),
      made("slice", "of slice", [](V x) { return x[0].slice(0, 0, 4, 2).slice(1, 1, 4, 2); }, {R({4, 4})}),
      made("slice", "transposed", [](V x) { return slice(x[0], 0, 0, 3, 2); }, {T({3, 4})}),
      made("slice", "step, then select", [](V x) { return x[0].slice(1, 0, 5, 2).select(0, 1); }, {R({2, 5})}),
      made("narrow", "dim 0", [](V x) { return narrow(x[0], 0, 1, 2); }, {R({4, 3})}),
      made("narrow", "dim 1", [](V x) { return x[0].narrow(1, 2, 2); }, {R({2, 4})}),
      made("select", "dim 1", [](V x) { return select(x[0], 1, 2); }, {R({2, 3, 2})}),
      made("select", "negative", [](V x) { return x[0].select(0, -1); }, {R({3, 2})}),
      made("select", "stepped", [](V x) { return select(x[0], 1, 0); }, {S({3, 2})}),
      made("index_select", "dim 1, repeats and negatives, transposed",
           [idx](V x) { return index_select(x[0], 1, idx(x[0])); }, {T({2, 3, 4})}),
      made("cat", "dim 0", [](V x) { return cat({x[0], x[1]}, 0); }, {R({2, 3}), R({1, 3})}),
      made("cat", "dim 1 three", [](V x) { return cat({x[0], x[1], x[2]}, 1); }, {R({2, 1}), R({2, 3}), R({2, 2})}),
      made("cat", "dim 1 three, transposed and stepped", [](V x) { return cat({x[0], x[1], x[2]}, 1); },
           {R({2, 1}), T({2, 3}), S({2, 2})}),
      made("cat", "dim -1 non-contiguous", [](V x) { return cat({x[0], x[1]}, -1); }, {T({2, 3}), S({2, 2})}),
      made("cat", "with an empty input", [](V x) { return cat({x[0], x[1], x[2]}, 0); },
           {R({2, 3}), R({0, 3}), R({1, 3})}),
      made("cat", "same input twice", [](V x) { return cat({x[0], x[0] * 2.0}, 0); }, {R({2, 3})}),
      made("stack", "dim 0", [](V x) { return stack({x[0], x[1]}, 0); }, {R({2, 3}), R({2, 3})}),
      made("stack", "dim 1", [](V x) { return stack({x[0], x[1], x[2]}, 1); }, {R({2, 3}), T({2, 3}), R({2, 3})}),
      made("stack", "dim -1", [](V x) { return stack({x[0], x[1]}, -1); }, {R({3}), R({3})}),
      made("stack", "dim -1, permuted", [](V x) { return stack({x[0], x[1]}, -1); }, {R({2, 3}), Pm({2, 3})}),
      made("split", "size",
           [](V x) {
             auto p = split(x[0], 2, 1);  // (3,2) (3,2) (3,1)
             return cat({p[0] * 1.0, p[1] * 2.0, p[2] * 3.0}, 1);
           },
           {R({3, 5})}),
      made("split", "sizes",
           [](V x) {
             auto p = split(x[0], I{1, 3}, 0);
             return p[1].sum({0}).mul(p[0].squeeze(0));
           },
           {R({4, 3})}),
      made("split", "transposed",
           [](V x) {
             auto p = x[0].split(2, 0);
             return p[1].exp().sum().add(p[0].mul(p[2].sum()).sum());
           },
           {T({5, 3})}),
      made("split", "and chunk",
           [](V x) {
             auto p = split(x[0], 2, 1);
             auto q = chunk(x[0], 2, 0);
             return cat({p[0] * 1.0, p[2] * 3.0}, 1).sum() + q[1].sum({0}).sum();
           },
           {R({4, 5})}),
      made("chunk", "(5, 2) in 3",
           [](V x) {
             auto p = chunk(x[0], 3, 0);  // sizes 2, 2, 1
             return cat({p[2] * -1.0, p[0], p[1].pow(2.0)}, 0);
           },
           {R({5, 2})}),
      made("chunk", "dim 1",
           [](V x) {
             auto p = x[0].chunk(2, 1);
             return p[0].mul(p[1]);
           },
           {R({2, 4})}),
      made("chunk", "one piece unused", [](V x) { return chunk(x[0], 2, 0)[1] * 3.0; }, {R({4, 2})}),
      made("contiguous", "of transposed", [](V x) { return contiguous(x[0]); }, {T({3, 4})}),
      made("contiguous", "of a permuted view", [](V x) { return x[0].permute({2, 0, 1}).contiguous(); }, {R({2, 3, 4})}),
      made("contiguous", "of contiguous", [](V x) { return contiguous(x[0]) * 2.0; }, {R({2, 3})}),
      made("clone", "(2, 3)", [](V x) { return clone(x[0]); }, {R({2, 3})}),
      made("clone", "stepped", [](V x) { return x[0].clone(); }, {S({2, 3})}),
      made("clone", "stepped, then t().contiguous()", [](V x) { return x[0].clone().t().contiguous(); }, {S({3, 4})}),
      // float32 keeps ~7 digits: with inputs of size 1e-3 its rounding moves a central
      // difference by about 1e-4 of the slope, inside rtol (the tolerance is not loosened).
      made("to_dtype", "float32 round trip", [](V x) { return to_dtype(to_dtype(x[0], kFloat32), kFloat64) * 3.0; },
           {Sm({2, 3})}),
      made("to_dtype", "float64 (same)", [](V x) { return to_dtype(x[0], kFloat64); }, {R({2, 3})}),
      made("to_device", "cpu (same)", [](V x) { return to_device(x[0], Device()) * 2.0; }, {R({2, 3})}),
      made("to", "float32 and back", [](V x) { return x[0].to(kFloat32).to(kFloat64) * x[0].to(kFloat64); },
           {Sm({2, 3})}),
      // At randn's scale float32 rounding moves a central difference far past gradcheck's
      // tolerance (the row above gradchecks the same function): the CUDA check only.
      [] {
        OpTest t{.op = "to",
                 .sample = "float32 and back, randn's scale",
                 .fn = [](V x) { return x[0].to(kFloat32).to(kFloat64) * x[0].to(kFloat64); },
                 .made = {R({2, 3})},
                 .gradcheck = false};
        return t;
      }(),
      made("sum_to", "(2,3,4) -> (3,1)", [](V x) { return sum_to(x[0], {3, 1}); }, {R({2, 3, 4})}),
      made("sum_to", "(2,3,4) -> (1,4)", [](V x) { return sum_to(x[0], {1, 4}); }, {R({2, 3, 4})}),
  };
  // A zero-size first input that the op cannot take as torch cannot (view, reshape and
  // expand to a fixed size, narrow, select or split at rows it no longer has), that cat
  // joins to others with elements, that sum_to sums into a target with elements, or
  // whose parts the row's function indexes past what an empty input splits into.
  const std::set<std::string> no_zero_size = {
      "view (2, 3) as (3, 2)", "view -1", "reshape contiguous", "reshape transposed", "reshape transposed, times 2",
      "reshape of a transposed view", "expand (3, 1) to (2, 3, 4)", "expand then mul", "expand (3, 1) times (2, 3, 4)",
      "narrow dim 0", "select negative", "slice step, then select", "cat dim 0", "cat with an empty input",
      "split sizes", "split transposed", "split and chunk", "chunk (5, 2) in 3", "chunk one piece unused",
      "sum_to (2,3,4) -> (3,1)", "sum_to (2,3,4) -> (1,4)"};
  for (OpTest& r : rows)
    if (no_zero_size.count(r.op + " " + r.sample)) r.zero_size = false;
  // view needs a contiguous input (its errors say so): no non-contiguous copies.
  for (OpTest& r : rows)
    if (r.op == "view") r.strided = false;
  return rows;
}

void add_errors(std::vector<OpTest>& rows) {
  const Tensor x = ones({2, 3}), s = scalar_tensor(2.5), u;
  std::map<std::string, std::vector<ErrorCase>> errors = {
      {"cat",
       {{"shapes differ", [] { cat({ones({2, 3}), ones({2, 4})}, 0); }, {"[cat]", "(2, 3)", "(2, 4)"}},
        {"dims differ", [] { cat({ones({2, 3}), ones({2})}, 0); }, {"[cat]", "1 dimensions", "expected 2"}},
        {"dims differ, every shape named", [] { cat({ones({2, 3}), ones({2})}); }, {"[cat]", "(2, 3)", "(2,)"}},
        {"nothing", [] { cat({}, 0); }, {"[cat]", "non-empty"}},
        {"dim 2 of 2", [] { cat({ones({2, 3}), ones({2, 3})}, 2); }, {"[cat]", "dim 2", "2 dimensions"}},
        {"0-d", [] { cat({ones({})}); }, {"[cat]", "()"}},
        {"undefined", [u] { cat({ones({2}), u}); }, {"[cat]", "undefined"}}}},
      {"stack", {{"shapes differ", [] { stack({ones({2, 3}), ones({3, 2})}); }, {"[stack]", "(2, 3)", "(3, 2)"}}}},
      {"expand",
       {{"(2, 3) to (4, 5)", [] { ones({2, 3}).expand({4, 5}); }, {"[expand]", "(4, 5)", "(2, 3)"}},
        {"fewer dims", [] { ones({2, 3}).expand({3}); }, {"[expand]", "(1)", "(2)"}},
        {"fewer dims, every shape named", [] { ones({2, 3}).expand({3}); }, {"[expand]", "(3,)", "(2, 3)"}},
        {"-1 for a new dim", [] { ones({3}).expand({-1, 3}); }, {"[expand]", "-1", "(-1, 3)"}},
        {"-1 for a new dim of (2, 3)", [] { ones({2, 3}).expand({-1, 2, 3}); }, {"[expand]", "(-1, 2, 3)", "(2, 3)"}},
        {"-2", [] { ones({1, 3}).expand({-2, 3}); }, {"[expand]", "(-2, 3)", "(1, 3)"}},
        {"-2 alone", [] { ones({1}).expand({-2}); }, {"[expand]", "-2"}},
        {"-5", [] { ones({1, 3}).expand({-5, 3}); }, {"[expand]", "-5"}}}},
      {"view",
       {{"other elements", [] { ones({2, 3}).view({4, 4}); }, {"[view]", "(4, 4)", "(2, 3)", "6 elements"}},
        {"two -1", [] { ones({2, 3}).view({-1, -1}); }, {"[view]", "(-1, -1)", "only one"}},
        {"-2", [] { ones({2, 3}).view({-2, 3}); }, {"[view]", "-2"}},
        {"a transposed view that needs a copy",
         [] { arange(0, 6, 1, kFloat32).reshape({2, 3}).t().view({6}); }, {"[view]", "(6,)", "(3, 2)", "(1, 3)", "reshape"}},
        {"-1 of a transposed view", [] { arange(0, 6, 1, kFloat32).reshape({2, 3}).t().view({-1}); },
         {"[view]", "(6,)", "(3, 2)"}},
        {"undefined", [u] { u.view({2}); }, {"[view]", "undefined"}}}},
      {"reshape", {{"other elements", [] { ones({2, 3}).reshape({4, -1}); }, {"[reshape]", "(4, -1)", "(2, 3)"}}}},
      {"split",
       {{"sizes that do not add up", [] { split(ones({5}), I{2, 2}); }, {"[split]", "(2, 2)", "5"}},
        {"size 0", [] { ones({5}).split(0); }, {"[split]", "0"}},
        {"0-d", [s] { s.split(1); }, {"[split]", "0-d"}},
        {"0-d, sizes", [s] { split(s, I{1}); }, {"[split]", "0-d"}}}},
      {"chunk", {{"0 chunks", [] { ones({5}).chunk(0); }, {"[chunk]", "0"}}, {"0-d", [s] { s.chunk(1); }, {"[chunk]", "0-d"}}}},
      {"narrow",
       {{"past the end", [] { ones({5}).narrow(0, 3, 3); }, {"[narrow]", "3", "5"}},
        {"0-d", [s] { s.narrow(0, 0, 1); }, {"[narrow]", "0-d"}},
        {"a length that overflows", [] { ones({5}).narrow(0, 2, INT64_MAX); }, {"[narrow]", "exceeds", "5"}}}},
      {"permute",
       {{"a repeated dim", [] { ones({2, 3}).permute({0, 0}); }, {"[permute]", "repeated"}},
        {"too few dims", [] { ones({2, 3}).permute({0}); }, {"[permute]", "1", "2"}}}},
      {"transpose",
       {{"dim 2 of 2", [x] { x.transpose(0, 2); }, {"[transpose]", "dim 2", "2 dimensions"}},
        {"dim -3 of 2", [x] { x.transpose(-3, 0); }, {"[transpose]", "dim -3"}}}},
      {"select",
       {{"index 2 of 2", [x] { x.select(0, 2); }, {"[select]", "index 2", "dim 0", "size 2"}},
        {"index -4 of 3", [x] { x.select(1, -4); }, {"[select]", "index -4", "dim 1", "size 3"}},
        {"dim 2 of 2", [x] { x.select(2, 0); }, {"[select]", "dim 2"}},
        {"0-d", [] { scalar_tensor(1.0).select(0, 0); }, {"[select]", "0-d"}},
        {"INT64_MIN", [] { ones({3}).select(0, INT64_MIN); }, {"[select]", "out of range"}}}},
      {"unsqueeze", {{"dim 3 of 3", [x] { x.unsqueeze(3); }, {"[unsqueeze]", "dim 3", "3 dimensions"}}}},
      {"squeeze", {{"dim 2 of 2", [x] { x.squeeze(2); }, {"[squeeze]", "dim 2"}}}},
      {"slice",
       {{"dim 2 of 2", [x] { x.slice(2, 0, 1); }, {"[slice]", "dim 2"}},
        {"step 0", [x] { x.slice(0, 0, 1, 0); }, {"[slice]", "step", "0"}}}},
      {"flatten", {{"end before start", [x] { x.flatten(1, 0); }, {"[flatten]", "start_dim 1", "end_dim 0"}}}},
  };
  for (auto& [op, cases] : errors)
    for (OpTest& t : rows)
      if (t.op == op) {
        t.errors = std::move(cases);
        break;
      }
}

}  // namespace

std::vector<OpTest> shape_rows() {
  std::vector<OpTest> rows = rows_of({&fixture_rows, &made_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
