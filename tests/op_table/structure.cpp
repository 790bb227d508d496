// Rows of the structure ops: triu, tril, repeat, repeat_interleave, flip, roll, outer and
// einsum, against PyTorch (shape_ops.txt, made by make_shape_fixtures.py) in float64,
// float32, int64 and bool, and generated inputs in every layout for gradcheck and the
// CUDA backend. Moves and copies are exact; only einsum's contractions round.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using I = std::vector<int64_t>;

constexpr Tol kExact{0, 0};
constexpr Tol kShape64{1e-12, 1e-13};

// "-1" -> "m1", as the fixture script names numbers.
std::string key(int64_t v) { return v < 0 ? "m" + std::to_string(-v) : std::to_string(v); }

Tensor constant(const std::string& name, const Tensor& like) { return fixture("shape_ops.txt", name).to(like.device()); }

OpTest fwd(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
           const std::string& out, std::vector<std::string> tags = {"f64", "f32"}) {
  const bool floating = tags.size() == 2;
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(in),
          .expected = out,
          .file = "shape_ops.txt",
          .tags = std::move(tags),
          .tol64 = kExact,
          .tol32 = kExact,
          .gradcheck = floating};  // integer, bool or no inputs have nothing to perturb
}

std::vector<OpTest> triangle_rows() {
  std::vector<OpTest> rows;
  for (const int64_t d : {-5, -2, -1, 0, 1, 2, 5}) {
    const std::string k = key(d), s = "diagonal " + std::to_string(d);
    rows.push_back(fwd("triu", "(2, 3, 4) " + s, [d](V x) { return triu(x[0], d); }, {"tri.{t}.x"}, "tri.{t}.triu." + k));
    rows.push_back(fwd("tril", "(2, 3, 4) " + s, [d](V x) { return tril(x[0], d); }, {"tri.{t}.x"}, "tri.{t}.tril." + k));
    rows.push_back(fwd("triu", "(2, 3, 4) " + s + " (method)", [d](V x) { return x[0].triu(d); }, {"tri.{t}.x"},
                       "tri.{t}.triu." + k));
    rows.push_back(fwd("tril", "(2, 3, 4) " + s + " (method)", [d](V x) { return x[0].tril(d); }, {"tri.{t}.x"},
                       "tri.{t}.tril." + k));
    rows.push_back(fwd("triu", "tall (4, 3) " + s, [d](V x) { return triu(x[0], d); }, {"tri.{t}.tall"},
                       "tri.{t}.tall_triu." + k));
    rows.push_back(fwd("tril", "tall (4, 3) " + s, [d](V x) { return tril(x[0], d); }, {"tri.{t}.tall"},
                       "tri.{t}.tall_tril." + k));
  }
  rows.push_back(fwd("triu", "the default diagonal (method)", [](V x) { return x[0].triu(); }, {"tri.{t}.x"},
                     "tri.{t}.triu.0"));
  rows.push_back(fwd("tril", "the default diagonal (method)", [](V x) { return x[0].tril(); }, {"tri.{t}.x"},
                     "tri.{t}.tril.0"));
  // The samples hold NaN, inf and -0: no finite differences there (the generated rows
  // gradcheck).
  for (OpTest& t : rows) t.gradcheck = false;
  const std::vector<std::string> fixed = {"fixed"};
  rows.push_back(fwd("triu", "int64", [](V x) { return triu(x[0]); }, {"tri.int.x"}, "tri.int.triu", fixed));
  rows.push_back(fwd("tril", "int64 -1", [](V x) { return tril(x[0], -1); }, {"tri.int.x"}, "tri.int.tril_m1", fixed));
  rows.push_back(fwd("triu", "bool 1", [](V x) { return triu(x[0], 1); }, {"tri.bool.x"}, "tri.bool.triu1", fixed));
  rows.push_back(fwd("tril", "bool (method)", [](V x) { return x[0].tril(); }, {"tri.bool.x"}, "tri.bool.tril", fixed));
  OpTest mask = fwd("triu", "the seeds' mask", [](V) { return triu(ones({5, 5}), 1); }, {}, "tri.mask.triu1", fixed);
  OpTest e1 = fwd("triu", "(2, 0, 3)", [](V) { return triu(ones({2, 0, 3})); }, {}, "tri.empty.triu", fixed);
  OpTest e2 = fwd("tril", "(0, 3)", [](V) { return tril(ones({0, 3})); }, {}, "tri.empty.tril", fixed);
  for (OpTest* t : {&mask, &e1, &e2}) {
    t->cuda = false;  // no input to move
    rows.push_back(std::move(*t));
  }
  return rows;
}

std::vector<OpTest> repeat_rows() {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"2_1", {2, 1}}, {"1_3", {1, 3}}, {"2_2_3", {2, 2, 3}}, {"0_2", {0, 2}}, {"1_1", {1, 1}}};
  std::vector<OpTest> rows;
  for (const auto& [name, r] : cases)
    for (const bool method : {false, true}) {
      const Shape reps = r;
      rows.push_back(fwd("repeat", "(2, 3) by " + name + (method ? " (method)" : ""),
                         [reps, method](V x) { return method ? x[0].repeat(reps) : repeat(x[0], reps); },
                         {"rep.{t}.x"}, "rep.{t}.repeat." + name));
    }
  const std::vector<std::string> fixed = {"fixed"};
  rows.push_back(fwd("repeat", "0-d by 3", [](V x) { return repeat(x[0], {3}); }, {"rep.scalar.x"}, "rep.scalar.repeat_3",
                     fixed));
  rows.push_back(fwd("repeat", "0-d by nothing", [](V x) { return repeat(x[0], {}); }, {"rep.scalar.x"},
                     "rep.scalar.repeat_none", fixed));
  rows.push_back(fwd("repeat", "int64", [](V x) { return x[0].repeat({2, 2}); }, {"rep.int.x"}, "rep.int.repeat_2_2", fixed));
  rows.push_back(fwd("repeat", "bool", [](V x) { return x[0].repeat({2, 2}); }, {"rep.bool.x"}, "rep.bool.repeat_2_2",
                     fixed));
  // counts (3,) along dim 1, flat counts (6,) of the flattened input
  auto counts = [](const Tensor& x) { return constant("ri.counts", x); };
  auto flat = [](const Tensor& x) { return constant("ri.flat_counts", x); };
  const std::vector<std::string> x = {"ri.{t}.x"};
  std::vector<OpTest> ri = {
      fwd("repeat_interleave", "2, flattened", [](V v) { return repeat_interleave(v[0], 2); }, x, "ri.{t}.r2"),
      fwd("repeat_interleave", "2, dim 0", [](V v) { return repeat_interleave(v[0], 2, 0); }, x, "ri.{t}.r2_d0"),
      fwd("repeat_interleave", "3, dim 1 (method)", [](V v) { return v[0].repeat_interleave(3, 1); }, x, "ri.{t}.r3_d1"),
      fwd("repeat_interleave", "2, dim -1", [](V v) { return repeat_interleave(v[0], 2, -1); }, x, "ri.{t}.r2_dm1"),
      fwd("repeat_interleave", "0, dim 1", [](V v) { return repeat_interleave(v[0], 0, 1); }, x, "ri.{t}.r0_d1"),
      fwd("repeat_interleave", "counts, dim 1", [counts](V v) { return repeat_interleave(v[0], counts(v[0]), 1); }, x,
          "ri.{t}.counts_d1"),
      fwd("repeat_interleave", "counts, flattened (method)", [flat](V v) { return v[0].repeat_interleave(flat(v[0])); },
          x, "ri.{t}.counts_flat"),
      fwd("repeat_interleave", "one count, dim 0",
          [](V v) { return repeat_interleave(v[0], from_vector<int64_t>({3}, {1}).to(v[0].device()), 0); }, x,
          "ri.{t}.one_count_d0"),
      fwd("repeat_interleave", "a 0-d count, dim 1",
          [](V v) { return repeat_interleave(v[0], scalar_tensor(2, kInt64).to(v[0].device()), 1); }, x,
          "ri.{t}.scalar_count_d1"),
      fwd("repeat_interleave", "the counts alone", [](V v) { return repeat_interleave(v[0]); }, {"ri.counts"}, "ri.index",
          fixed),
      fwd("repeat_interleave", "the flat counts alone", [](V v) { return repeat_interleave(v[0]); }, {"ri.flat_counts"},
          "ri.index_flat", fixed),
      fwd("repeat_interleave", "int64 counts, dim 1", [counts](V v) { return repeat_interleave(v[0], counts(v[0]), 1); },
          {"ri.int.x"}, "ri.int.counts_d1", fixed),
      fwd("repeat_interleave", "int64 2, dim 0", [](V v) { return repeat_interleave(v[0], 2, 0); }, {"ri.int.x"},
          "ri.int.r2_d0", fixed),
      fwd("repeat_interleave", "0-d 3", [](V v) { return repeat_interleave(v[0], 3); }, {"rep.scalar.x"}, "ri.scalar.r3",
          fixed),
  };
  for (OpTest& t : ri) rows.push_back(std::move(t));
  return rows;
}

std::vector<OpTest> flip_roll_rows() {
  const std::vector<std::pair<std::string, I>> flips = {
      {"d0", {0}}, {"d12", {1, 2}}, {"dm1", {-1}}, {"d012", {0, 1, 2}}, {"dm3m1", {-3, -1}}};
  struct RollCase {
    std::string name;
    I shifts, dims;
  };
  const std::vector<RollCase> rolls = {{"flat1", {1}, {}},      {"flatm5", {-5}, {}},      {"flat30", {30}, {}},
                                       {"d0_1", {1}, {0}},      {"d1_5", {5}, {1}},        {"dm1_m1", {-1}, {-1}},
                                       {"d02", {1, 2}, {0, 2}}, {"d22", {1, -7}, {2, 2}}, {"d1_0", {0}, {1}}};
  const std::vector<std::string> x = {"fr.{t}.x"};
  std::vector<OpTest> rows;
  for (const auto& [name, d] : flips)
    for (const bool method : {false, true}) {
      const I dims = d;
      rows.push_back(fwd("flip", "(2, 3, 4) " + name + (method ? " (method)" : ""),
                         [dims, method](V v) { return method ? v[0].flip(dims) : flip(v[0], dims); }, x,
                         "fr.{t}.flip." + name));
    }
  for (const RollCase& r : rolls)
    for (const bool method : {false, true}) {
      const I shifts = r.shifts, dims = r.dims;
      rows.push_back(fwd("roll", "(2, 3, 4) " + r.name + (method ? " (method)" : ""),
                         [shifts, dims, method](V v) { return method ? v[0].roll(shifts, dims) : roll(v[0], shifts, dims); },
                         x, "fr.{t}.roll." + r.name));
    }
  rows.push_back(fwd("roll", "(2, 3, 4) by 1", [](V v) { return roll(v[0], 1); }, x, "fr.{t}.roll.flat1"));
  rows.push_back(fwd("roll", "(2, 3, 4) by -5 (method)", [](V v) { return v[0].roll(-5); }, x, "fr.{t}.roll.flatm5"));
  rows.push_back(fwd("roll", "(2, 3, 4) by 5 along 1", [](V v) { return roll(v[0], 5, 1); }, x, "fr.{t}.roll.d1_5"));
  rows.push_back(fwd("roll", "(2, 3, 4) by -1 along -1 (method)", [](V v) { return v[0].roll(-1, -1); }, x,
                     "fr.{t}.roll.dm1_m1"));
  const std::vector<std::string> fixed = {"fixed"};
  rows.push_back(fwd("flip", "int64", [](V v) { return flip(v[0], {1}); }, {"fr.int.x"}, "fr.int.flip_d1", fixed));
  rows.push_back(fwd("roll", "int64", [](V v) { return roll(v[0], 1, 1); }, {"fr.int.x"}, "fr.int.roll_d1", fixed));
  rows.push_back(fwd("flip", "bool", [](V v) { return flip(v[0], {0}); }, {"fr.bool.x"}, "fr.bool.flip", fixed));
  rows.push_back(fwd("roll", "bool", [](V v) { return roll(v[0], 1); }, {"fr.bool.x"}, "fr.bool.roll", fixed));
  rows.push_back(fwd("roll", "0-d", [](V v) { return roll(v[0], 3); }, {"fr.scalar.x"}, "fr.scalar.roll", fixed));
  rows.push_back(fwd("flip", "empty", [](V v) { return flip(v[0], {0, 1}); }, {"fr.empty.x"}, "fr.empty.flip", fixed));
  rows.push_back(fwd("roll", "empty", [](V v) { return roll(v[0], 2, 0); }, {"fr.empty.x"}, "fr.empty.roll", fixed));
  // outer: b holds an inf (no finite difference there)
  for (const bool method : {false, true}) {
    OpTest t = fwd("outer", method ? "with an inf (method)" : "with an inf",
                   [method](V v) { return method ? v[0].outer(v[1]) : outer(v[0], v[1]); }, {"outer.{t}.a", "outer.{t}.b"},
                   "outer.{t}.out");
    t.gradcheck = false;
    rows.push_back(std::move(t));
  }
  rows.push_back(fwd("outer", "int64", [](V v) { return outer(v[0], v[0]); }, {"outer.int.a"}, "outer.int.out", fixed));
  rows.push_back(fwd("outer", "int64 with float32 (promotes like mul)", [](V v) { return outer(v[0], v[1]); },
                     {"outer.int.a", "outer.f32.b"}, "outer.mixed.out", fixed));
  return rows;
}

// einsum's equations, each on its fixture's operands (es.<name>.{t}.in0, in1, ...).
std::vector<OpTest> einsum_rows() {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"matmul_implicit", "ij,jk"},       {"matmul", "ij,jk->ik"},
      {"matmul_spaces", " i j , j k -> i k "}, {"bmm", "bij,bjk->bik"},
      {"transpose", "ij->ji"},            {"permute3", "ijk->kij"},
      {"sum_all", "ij->"},                {"sum_rows", "ij->i"},
      {"sum_cols", "ij->j"},              {"outer", "i,j->ij"},
      {"outer_implicit", "i,j"},          {"dot", "i,i->"},
      {"dot_implicit", "i,i"},            {"hadamard", "ij,ij->ij"},
      {"diag", "ii->i"},                  {"trace", "ii->"},
      {"trace_implicit", "ii"},           {"diag3", "iii->i"},
      {"batch_diag", "bii->bi"},          {"diag_times", "ii,ij->ij"},
      {"attention", "bhqd,bhkd->bhqk"},   {"attention_v", "bhqk,bhkd->bhqd"},
      {"chain3", "ij,jk,kl->il"},         {"chain3_implicit", "ij,jk,kl"},
      {"three_shared", "ij,ij,ij->i"},    {"bilinear", "bn,anm,bm->ba"},
      {"ellipsis_matmul", "...ij,...jk->...ik"}, {"ellipsis_broadcast", "...ij,...jk->...ik"},
      {"ellipsis_transpose", "...ij->...ji"},    {"ellipsis_implicit", "...ij,...jk"},
      {"ellipsis_summed", "...ij->ij"},   {"ellipsis_front", "i...,i...->..."},
      {"ellipsis_middle", "a...b,b...c->a...c"}, {"upper_lower", "Ab,bC->CA"},
      {"implicit_ascii", "bA,Ca"},        {"broadcast_one", "ij,jk->ik"},
      {"batch_broadcast_one", "bij,bjk->bik"},   {"sum_then_outer", "ij,k->k"},
      {"scalar", ""},                     {"scalar_product", ",i->i"},
      {"empty_contraction", "ij,jk->ik"},
  };
  std::vector<OpTest> rows;
  for (const auto& [name, eq] : cases) {
    const std::string lhs = eq.substr(0, eq.find("->"));
    const int64_t n = std::count(lhs.begin(), lhs.end(), ',') + 1;
    std::vector<std::string> in;
    for (int64_t i = 0; i < n; ++i) in.push_back("es." + name + ".{t}.in" + std::to_string(i));
    OpTest t = fwd("einsum", name + " \"" + eq + "\"", [eq = eq](V v) { return einsum(eq, v); }, in,
                   "es." + name + ".{t}.out");
    // einsum's contractions round, in another order than torch's
    t.tol64 = kShape64;
    t.tol32 = kTol32Loose;
    rows.push_back(std::move(t));
  }
  return rows;
}

std::vector<OpTest> made_rows() {
  auto counts = [](const Tensor& x) { return from_vector<int64_t>({2, 0, 3}, {3}).to(x.device()); };
  auto flat = [](const Tensor& x) { return from_vector<int64_t>({1, 2, 0, 1, 3, 1}, {6}).to(x.device()); };
  auto es = [](const std::string& eq) { return [eq](V x) { return einsum(eq, x); }; };
  return {
      made("triu", "(3, 4)", [](V x) { return triu(x[0]); }, {R({3, 4})}),
      made("triu", "1 batched", [](V x) { return triu(x[0], 1); }, {R({2, 3, 4})}),
      made("triu", "-1 transposed", [](V x) { return triu(x[0], -1); }, {T({4, 3})}),
      made("tril", "(3, 4)", [](V x) { return tril(x[0]); }, {R({3, 4})}),
      made("tril", "-2 permuted", [](V x) { return tril(x[0], -2); }, {Pm({2, 3, 4})}),
      made("tril", "2 method stepped", [](V x) { return x[0].tril(2); }, {S({3, 4})}),
      made("repeat", "(2, 1)", [](V x) { return repeat(x[0], {2, 1}); }, {R({2, 3})}),
      made("repeat", "leading dim, transposed", [](V x) { return repeat(x[0], {2, 1, 2}); }, {T({2, 3})}),
      made("repeat", "1-D to 3-D", [](V x) { return repeat(x[0], {2, 3, 1}); }, {R({3})}),
      made("repeat", "method stepped", [](V x) { return x[0].repeat({1, 2}); }, {S({2, 3})}),
      made("repeat_interleave", "flattened", [](V x) { return repeat_interleave(x[0], 2); }, {R({2, 3})}),
      made("repeat_interleave", "dim 1", [](V x) { return repeat_interleave(x[0], 3, 1); }, {R({2, 3})}),
      made("repeat_interleave", "dim -1 permuted", [](V x) { return repeat_interleave(x[0], 2, -1); }, {Pm({2, 3, 2})}),
      made("repeat_interleave", "counts dim 0", [counts](V x) { return repeat_interleave(x[0], counts(x[0]), 0); },
           {R({3, 2})}),
      made("repeat_interleave", "counts flattened, transposed",
           [flat](V x) { return x[0].repeat_interleave(flat(x[0])); }, {T({2, 3})}),
      made("flip", "dim 0", [](V x) { return flip(x[0], {0}); }, {R({3, 4})}),
      made("flip", "dims 1, -1 permuted", [](V x) { return flip(x[0], {1, -1}); }, {Pm({2, 3, 4})}),
      made("flip", "method transposed", [](V x) { return x[0].flip({0, 1}); }, {T({3, 4})}),
      made("roll", "flattened", [](V x) { return roll(x[0], 2); }, {R({2, 3})}),
      made("roll", "dim 1 by -1", [](V x) { return roll(x[0], -1, 1); }, {R({2, 3})}),
      made("roll", "dims 0, 2 permuted", [](V x) { return roll(x[0], {1, 3}, {0, 2}); }, {Pm({2, 3, 4})}),
      made("roll", "dim -1 stepped", [](V x) { return x[0].roll(5, -1); }, {S({3, 4})}),
      made("roll", "one dim twice", [](V x) { return roll(x[0], {1, 1}, {0, 0}); }, {R({3, 2})}),
      made("outer", "(3), (4)", [](V x) { return outer(x[0], x[1]); }, {R({3}), R({4})}),
      made("outer", "stepped (method)", [](V x) { return x[0].outer(x[1]); }, {S({3}), R({2})}),
      // contractions
      made("einsum", "ij,jk->ik", es("ij,jk->ik"), {R({2, 3}), R({3, 4})}),
      made("einsum", "ij,jk implicit, transposed", es("ij,jk"), {T({2, 3}), R({3, 4})}),
      made("einsum", "ji,jk->ik (operand taken transposed)", es("ji,jk->ik"), {R({3, 2}), R({3, 4})}),
      made("einsum", "i,j->ij", es("i,j->ij"), {R({3}), R({2})}),
      made("einsum", "i,i->", es("i,i->"), {R({4}), S({4})}),
      made("einsum", "ij,jk broadcast size 1", es("ij,jk->ik"), {R({2, 1}), R({3, 4})}),
      made("einsum", "ij,jk,kl->il", es("ij,jk,kl->il"), {R({2, 3}), R({3, 4}), R({4, 2})}),
      made("einsum", "bn,anm,bm->ba", es("bn,anm,bm->ba"), {R({2, 3}), Pm({2, 3, 2}), R({2, 2})}),
      made("einsum", "ij,ij,ij->i", es("ij,ij,ij->i"), {R({2, 3}), T({2, 3}), R({2, 3})}),
      // batch and "..."
      made("einsum", "bij,bjk->bik", es("bij,bjk->bik"), {R({2, 2, 3}), R({2, 3, 2})}),
      made("einsum", "bhqd,bhkd->bhqk", es("bhqd,bhkd->bhqk"), {R({2, 2, 3, 2}), Pm({2, 2, 4, 2})}),
      made("einsum", "...ij,...jk->...ik broadcast", es("...ij,...jk->...ik"), {R({2, 1, 2, 3}), R({3, 3, 2})}),
      made("einsum", "i...,i...->...", es("i...,i...->..."), {R({3, 2, 1}), R({3, 4})}),
      // permutations, sums, diagonals
      made("einsum", "ij->ji", es("ij->ji"), {R({3, 4})}),
      made("einsum", "ijk->kij stepped", es("ijk->kij"), {S({2, 3, 4})}),
      made("einsum", "ij->", es("ij->"), {R({3, 4})}),
      made("einsum", "ij->i transposed", es("ij->i"), {T({3, 4})}),
      made("einsum", "ii->i", es("ii->i"), {R({3, 3})}),
      made("einsum", "ii-> transposed", es("ii->"), {T({3, 3})}),
      made("einsum", "bii->bi permuted", es("bii->bi"), {Pm({2, 3, 3})}),
      made("einsum", "ii,ij->ij", es("ii,ij->ij"), {R({3, 3}), R({3, 2})}),
      made("einsum", "...ij->ij", es("...ij->ij"), {R({2, 3, 2})}),
  };
}

void add_errors(std::vector<OpTest>& rows) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::map<std::string, std::vector<ErrorCase>> errors = {
      {"triu", {{"1-D", [] { triu(ones({3})); }, {"[triu]", "at least 2 dimensions", "(3,)"}}}},
      {"tril", {{"0-d", [] { tril(scalar_tensor(1.0)); }, {"[tril]", "at least 2 dimensions", "()"}}}},
      {"repeat",
       {{"fewer counts than dims", [] { repeat(ones({2, 3}), {2}); }, {"[repeat]", "(2,)", "(2, 3)", "can not be smaller"}},
        {"a negative count", [] { ones({2, 3}).repeat({2, -1}); }, {"[repeat]", "negative", "(2, -1)"}},
        {"a size that overflows", [] { repeat(ones({2}), {kMax}); }, {"[repeat]", "overflows"}}}},
      {"repeat_interleave",
       {{"a negative count", [] { repeat_interleave(ones({2, 3}), -1); }, {"[repeat_interleave]", "negative", "-1"}},
        {"dim 2 of 2", [] { repeat_interleave(ones({2, 3}), 2, 2); }, {"[repeat_interleave]", "dim 2", "out of range"}},
        {"0-d along a dim", [] { repeat_interleave(scalar_tensor(1.0), 2, 0); }, {"[repeat_interleave]", "0-d"}},
        {"2 counts for 3", [] { repeat_interleave(ones({2, 3}), from_vector<int64_t>({1, 2}, {2}), 1); },
         {"[repeat_interleave]", "2 repeats", "size 3"}},
        {"2 counts for 6, flattened", [] { repeat_interleave(ones({2, 3}), from_vector<int64_t>({1, 2}, {2})); },
         {"[repeat_interleave]", "2 repeats", "size 6"}},
        {"a negative count in counts", [] { repeat_interleave(ones({2, 3}), from_vector<int64_t>({1, -2}, {2}), 0); },
         {"[repeat_interleave]", "negative", "-2"}},
        {"float counts", [] { repeat_interleave(ones({2, 3}), ones({2}), 0); },
         {"[repeat_interleave]", "int64", "float32"}},
        {"2-D counts", [] { repeat_interleave(ones({2, 3}), ones({1, 2}, kInt64), 0); },
         {"[repeat_interleave]", "0-D or 1-D", "(1, 2)"}},
        {"2-D counts alone", [] { repeat_interleave(ones({2, 2}, kInt64)); }, {"[repeat_interleave]", "0-D or 1-D", "(2, 2)"}}}},
      {"flip",
       {{"dim 0 twice", [] { flip(ones({2, 3}), {0, 0}); }, {"[flip]", "dim 0", "more than once"}},
        {"dim 2 of 2", [] { flip(ones({2, 3}), {2}); }, {"[flip]", "dim 2", "out of range"}}}},
      {"roll",
       {{"2 shifts, flattened", [] { roll(ones({2, 3}), {1, 2}); }, {"[roll]", "align", "2 shifts"}},
        {"2 shifts for 1 dim", [] { roll(ones({2, 3}), {1, 2}, {0}); }, {"[roll]", "align", "2 shifts", "1 dims"}},
        {"dim 5", [] { roll(ones({2, 3}), 1, 5); }, {"[roll]", "dim 5", "out of range"}},
        {"no shifts", [] { roll(ones({2, 3}), I{}, I{}); }, {"[roll]", "empty"}},
        {"0-d along a dim", [] { roll(scalar_tensor(1.0), 1, 0); }, {"[roll]", "0-d"}}}},
      {"outer",
       {{"2-D first", [] { outer(ones({2, 3}), ones({3})); }, {"[outer]", "1-D first", "(2, 3)"}},
        {"0-d second", [] { outer(ones({2}), scalar_tensor(1.0)); }, {"[outer]", "1-D second", "()"}}}},
      {"einsum",
       {{"2 terms, 1 operand", [] { einsum("ij,jk", {ones({2, 3})}); }, {"[einsum]", "2 operand terms", "1 operand was given"}},
        {"1 term, 2 operands", [] { einsum("ij", {ones({2, 3}), ones({3})}); },
         {"[einsum]", "1 operand term", "2 operands were given"}},
        {"no operands", [] { einsum("ij", {}); }, {"[einsum]", "at least one operand"}},
        {"2 subscripts for 3 dims", [] { einsum("ij", {ones({2, 3, 4})}); },
         {"[einsum]", "subscripts in the equation (2)", "number of dimensions (3)", "operand 0", "no ellipsis"}},
        {"3 subscripts and ... for 2 dims", [] { einsum("ijk...", {ones({2, 3})}); }, {"[einsum]", "(3)", "more than", "(2)"}},
        {"j of sizes 3 and 4", [] { einsum("ij,jk", {ones({2, 3}), ones({4, 5})}); },
         {"[einsum]", "subscript j", "size 4", "operand 1", "previously seen size 3"}},
        {"ii of 2 x 3", [] { einsum("ii", {ones({2, 3})}); }, {"[einsum]", "subscript i", "repeated", "2 != 3"}},
        {"... of sizes 2 and 4", [] { einsum("...i,...i", {ones({2, 3}), ones({4, 3})}); },
         {"[einsum]", "'...' dim 0", "size 4"}},
        {"#", [] { einsum("i#", {ones({2, 3})}); }, {"[einsum]", "invalid subscript '#'", "index 1"}},
        {"two arrows", [] { einsum("ij->j->i", {ones({2, 3})}); }, {"[einsum]", "invalid subscript '-'", "index 5"}},
        {"a comma in the output", [] { einsum("ij->i,j", {ones({2, 3})}); }, {"[einsum]", "invalid subscript ','"}},
        {"two dots", [] { einsum("i..j", {ones({2, 3})}); }, {"[einsum]", "'.'", "not part of an ellipsis"}},
        {"two ellipses", [] { einsum("...i...", {ones({2, 3})}); }, {"[einsum]", "'.'", "after its ellipsis"}},
        {"an output letter not in the input", [] { einsum("ij->k", {ones({2, 3})}); },
         {"[einsum]", "output subscript k", "does not appear"}},
        {"an output letter twice", [] { einsum("ij->ii", {ones({2, 3})}); },
         {"[einsum]", "output subscript i", "more than once"}},
        {"int64", [] { einsum("ij,jk", {ones({2, 3}, kInt64), ones({3, 2}, kInt64)}); },
         {"[einsum]", "floating-point", "int64", "operand 0"}},
        {"int64, naming the dtypes it takes", [] { einsum("i,i->", {ones({2}, kInt64), ones({2}, kInt64)}); },
         {"[einsum]", "(float32, float64 or bfloat16)"}},
        {"two dtypes", [] { einsum("ij,jk", {ones({2, 3}), ones({3, 2}, kFloat64)}); },
         {"[einsum]", "one dtype", "float32", "float64"}},
        {"undefined", [] { einsum("ij,jk", {ones({2, 3}), Tensor()}); }, {"[einsum]", "operand 1", "undefined"}}}},
  };
  for (auto& [op, cases] : errors)
    for (OpTest& t : rows)
      if (t.op == op) {
        t.errors = std::move(cases);
        break;
      }
}

// A zero-size first input that the op sums over (einsum's contractions over its first
// subscript), whose first dim is also another dim (a diagonal), whose first dim another
// operand broadcasts against, or whose counts are for its rows: the output has elements,
// or the call is refused, as in torch. No zero-size check there.
const std::set<std::string> kNoZeroSize = {
    "einsum sum_all \"ij->\"",
    "einsum sum_cols \"ij->j\"",
    "einsum ellipsis_summed \"...ij->ij\"",
    "einsum sum_then_outer \"ij,k->k\"",
    "einsum ji,jk->ik (operand taken transposed)",
    "einsum ij->",
    "einsum ...ij->ij",
    "einsum batch_broadcast_one \"bij,bjk->bik\"",
    "einsum diag \"ii->i\"",
    "einsum diag3 \"iii->i\"",
    "einsum diag_times \"ii,ij->ij\"",
    "einsum ellipsis_front \"i...,i...->...\"",
    "einsum i...,i...->...",
    "einsum ii,ij->ij",
    "einsum ii-> transposed",
    "einsum ii->i",
    "einsum trace \"ii->\"",
    "einsum trace_implicit \"ii\"",
    "repeat_interleave counts dim 0",
    "repeat_interleave counts flattened, transposed",
    "repeat_interleave counts, flattened (method)",
};

}  // namespace

std::vector<OpTest> structure_rows() {
  std::vector<OpTest> rows = rows_of({&triangle_rows, &repeat_rows, &flip_roll_rows, &einsum_rows, &made_rows});
  for (OpTest& t : rows)
    if (kNoZeroSize.count(t.op + " " + t.sample)) t.zero_size = false;
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
