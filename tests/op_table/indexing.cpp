// Rows of the indexing, scatter, scan and sort ops (gather, scatter, scatter_add,
// index_add, cumsum, sort, argsort, topk, one_hot) and the in-place scatter_,
// scatter_add_, index_add_: forward values against PyTorch (index_ops.txt, made by
// make_index_fixtures.py), generated inputs in every layout for gradcheck and the CUDA
// backend, and every error. Indices are constants captured by the rows, on the first
// input's device. (Rules torch leaves open, such as repeated indices, and thread-count
// independence are in test_index_ops.cpp.)
#include <limits>
#include <map>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const char* kFile = "index_ops.txt";

std::string tag_of(const Tensor& x) {
  switch (x.dtype()) {
    case kFloat32: return "f32";
    case kInt64: return "i64";
    case kBool: return "bool";
    default: return "f64";
  }
}

// A fixture tensor ("gather.{t}.index1", {t} the tag of like's dtype) on like's device.
Tensor ix(std::string pattern, const Tensor& like) {
  const size_t at = pattern.find("{t}");
  if (at != std::string::npos) pattern.replace(at, 3, tag_of(like));
  return fixture(kFile, pattern).to(like.device());
}
Tensor ids(const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
  return from_vector<int64_t>(v, s).to(like.device());
}
Tensor ints(const std::vector<int64_t>& v, const Shape& s) { return from_vector<int64_t>(v, s); }
Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); }

// A row against torch's values. Fixture rows check values only: the generated rows
// below gradcheck every op (and the fixtures hold no gradients).
OpTest fx(const std::string& op, const std::string& sample, Fn fn, std::vector<std::string> in,
          const std::string& expected, std::vector<std::string> tags = {"f64", "f32"}) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .inputs = std::move(in),
          .expected = expected,
          .file = kFile,
          .tags = std::move(tags),
          .gradcheck = false,  // values only: the generated rows gradcheck
          .zero_size = false};  // the captured indices pin the input's shape
}

// Indices are constants of the inputs' sizes: no zero-size check.
OpTest made_fixed(const std::string& op, const std::string& sample, Fn fn, std::vector<In> in) {
  OpTest t = made(op, sample, std::move(fn), std::move(in));
  t.zero_size = false;
  return t;
}

std::vector<OpTest> fixture_rows() {
  std::vector<OpTest> r;
  // gather
  r.push_back(fx("gather", "dim 1", [](V x) { return gather(x[0], 1, ix("gather.{t}.index1", x[0])); },
                 {"gather.{t}.x"}, "gather.{t}.out1"));
  r.push_back(fx("gather", "dim 0", [](V x) { return gather(x[0], 0, ix("gather.{t}.index0", x[0])); },
                 {"gather.{t}.x"}, "gather.{t}.out0"));
  r.push_back(fx("gather", "index larger than x along dim, method",
                 [](V x) { return x[0].gather(-1, ix("gather.{t}.indexl", x[0])); }, {"gather.{t}.x"},
                 "gather.{t}.outl"));
  r.push_back(fx("gather", "transposed x", [](V x) { return gather(x[0].t(), 1, ix("gather_t.{t}.index", x[0])); },
                 {"gather_t.{t}.x"}, "gather_t.{t}.out"));
  r.push_back(fx("gather", "transposed x and index",
                 [](V x) { return gather(x[0].t(), 1, ix("gather_t.{t}.index", x[0]).t().contiguous().t()); },
                 {"gather_t.{t}.x"}, "gather_t.{t}.out"));
  r.push_back(fx("gather", "int64", [](V x) { return gather(x[0], 1, ix("gather.i64.index", x[0])); },
                 {"gather.i64.x"}, "gather.i64.out", {"i64"}));
  r.push_back(fx("gather", "empty index",
                 [](V x) { return gather(x[0].select(2, 0), 1, Tensor::empty({3, 0}, kInt64).to(x[0].device())); },
                 {"gather.f64.x"}, "gather.empty.out", {"f64"}));
  r.push_back(fx("gather", "0-d x, 1-d index",
                 [](V x) { return gather(scalar_tensor(2.5, TensorOptions(kFloat64).device(x[0].device())), 0,
                                         ids({0, 0, 0}, {3}, x[0])); },
                 {"gather.f64.x"}, "gather.scalar.out", {"f64"}));
  r.push_back(fx("gather", "NaN, inf and -0", [](V x) { return gather(x[0], 1, ix("gather.edge.index", x[0])); },
                 {"gather.edge.x"}, "gather.edge.out", {"f64"}));
  // scatter
  r.push_back(fx("scatter", "src larger than index",
                 [](V x) { return scatter(x[0], 1, ix("scatter.{t}.index1", x[0]), x[1]); },
                 {"scatter.{t}.x", "scatter.{t}.src"}, "scatter.{t}.out1"));
  r.push_back(fx("scatter", "dim 0, method", [](V x) { return x[0].scatter(0, ix("scatter.{t}.index0", x[0]), x[1]); },
                 {"scatter.{t}.x", "scatter.{t}.src0"}, "scatter.{t}.out0"));
  r.push_back(fx("scatter", "value", [](V x) { return scatter(x[0], 1, ix("scatter.{t}.index1", x[0]), -2.5); },
                 {"scatter.{t}.x"}, "scatter.{t}.value"));
  r.push_back(fx("scatter", "transposed x, value",
                 [](V x) { return scatter(x[0].t(), 1, ix("scatter.{t}.index_t", x[0]), 7.0); }, {"scatter.{t}.x"},
                 "scatter.{t}.out_t"));
  r.push_back(fx("scatter", "transposed x and src",
                 [](V x) { return scatter(x[0].t(), 1, ix("scatter.{t}.index_t", x[0]), x[1].t()); },
                 {"scatter.{t}.x", "scatter.{t}.src0"}, "scatter.{t}.out_t_src"));
  r.push_back(fx("scatter", "out of place: x unchanged",
                 [](V x) {
                   (void)scatter(x[0], 1, ix("scatter.{t}.index1", x[0]), x[1]);
                   (void)scatter(x[0], 1, ix("scatter.{t}.index1", x[0]), -2.5);
                   return x[0];
                 },
                 {"scatter.{t}.x", "scatter.{t}.src"}, "scatter.{t}.x"));
  r.push_back(fx("scatter", "int64", [](V x) { return scatter(x[0], 1, ix("scatter.i64.index", x[0]), x[1]); },
                 {"scatter.i64.x", "scatter.i64.src"}, "scatter.i64.out", {"i64"}));
  r.push_back(fx("scatter", "int64, value", [](V x) { return scatter(x[0], 1, ix("scatter.i64.index", x[0]), -3.75); },
                 {"scatter.i64.x"}, "scatter.i64.value", {"i64"}));
  r.push_back(fx("scatter", "NaN value", [](V x) { return scatter(x[0], 1, ids({0, 2}, {2, 1}, x[0]), kNaN); },
                 {"gather.edge.x"}, "scatter.edge.value_nan", {"f64"}));
  // scatter_add
  r.push_back(fx("scatter_add", "repeats sum",
                 [](V x) { return scatter_add(x[0], 1, ix("scatter_add.{t}.index", x[0]), x[1]); },
                 {"scatter_add.{t}.x", "scatter_add.{t}.src"}, "scatter_add.{t}.out"));
  r.push_back(fx("scatter_add", "3-D dim 0, method",
                 [](V x) { return x[0].scatter_add(0, ix("scatter_add.{t}.index3", x[0]), x[1]); },
                 {"scatter_add.{t}.x3", "scatter_add.{t}.src3"}, "scatter_add.{t}.out3"));
  // int64 wraps around like torch (no signed-overflow UB); bool adds as "or".
  r.push_back(fx("scatter_add", "int64 wraps, bool adds as or",
                 [](V x) { return scatter_add(x[0], 0, ix("scatter_add.{t}.index", x[0]), x[1]); },
                 {"scatter_add.{t}.x", "scatter_add.{t}.src"}, "scatter_add.{t}.out", {"i64", "bool"}));
  // index_add
  r.push_back(fx("index_add", "dim 0", [](V x) { return index_add(x[0], 0, ix("index_add.{t}.index", x[0]), x[1]); },
                 {"index_add.{t}.x", "index_add.{t}.src"}, "index_add.{t}.out"));
  r.push_back(fx("index_add", "alpha 2.5, method",
                 [](V x) { return x[0].index_add(0, ix("index_add.{t}.index", x[0]), x[1], 2.5); },
                 {"index_add.{t}.x", "index_add.{t}.src"}, "index_add.{t}.out_alpha"));
  r.push_back(fx("index_add", "dim 1, alpha -1.5",
                 [](V x) { return index_add(x[0], 1, ix("index_add.{t}.index3", x[0]), x[1], -1.5); },
                 {"index_add.{t}.x3", "index_add.{t}.src3"}, "index_add.{t}.out3"));
  r.push_back(fx("index_add", "0-d index",
                 [](V x) { return index_add(x[0], 0, ids({3}, {}, x[0]), x[1].slice(0, 0, 1)); },
                 {"index_add.{t}.x", "index_add.{t}.src"}, "index_add.{t}.out_scalar_index"));
  r.push_back(fx("index_add", "transposed self and source",
                 [](V x) {
                   return index_add(x[0].t().contiguous().t(), 0, ix("index_add.{t}.index", x[0]),
                                    x[1].t().contiguous().t());
                 },
                 {"index_add.{t}.x", "index_add.{t}.src"}, "index_add.{t}.out"));
  r.push_back(fx("index_add", "int64, alpha 2.5 truncated to 2",
                 [](V x) { return index_add(x[0], 0, ids({3, 3}, {2}, x[0]), x[1], 2.5); },
                 {"index_add.i64.x", "index_add.i64.src"}, "index_add.i64.out_alpha", {"i64"}));
  r.push_back(fx("index_add", "bool",
                 [](V x) {
                   return index_add(from_vector<bool>({false, true, false}, {3}).to(x[0].device()), 0,
                                    ids({0, 0}, {2}, x[0]), from_vector<bool>({true, false}, {2}).to(x[0].device()));
                 },
                 {"index_add.i64.x"}, "index_add.bool.out", {"i64"}));
  // cumsum
  for (int64_t d : {0, 1, 2, -1})
    r.push_back(fx("cumsum", "dim " + std::to_string(d), [d](V x) { return cumsum(x[0], d); }, {"cumsum.{t}.x"},
                   "cumsum.{t}.out" + std::to_string(d)));
  r.push_back(fx("cumsum", "transposed, method", [](V x) { return x[0].transpose(0, 2).cumsum(1); }, {"cumsum.{t}.x"},
                 "cumsum.{t}.out_t"));
  r.push_back(fx("cumsum", "NaN stays, inf - inf is NaN", [](V x) { return cumsum(x[0], 0); }, {"cumsum.{t}.edge_x"},
                 "cumsum.{t}.edge"));
  r.push_back(fx("cumsum", "infinities",
                 [](V x) { return cumsum(f64({kInf, 1, -kInf, 2}, {4}).to(x[0].dtype()).to(x[0].device()), 0); },
                 {"cumsum.{t}.x"}, "cumsum.{t}.infs"));
  r.push_back(fx("cumsum", "float32 summed in double", [](V x) { return cumsum(x[0], 0); }, {"cumsum.f32.cancel_x"},
                 "cumsum.f32.cancel", {"f32"}));
  r.push_back(fx("cumsum", "float32 to float64", [](V x) { return cumsum(x[0].to(kFloat32), 1, kFloat64); },
                 {"cumsum.f64.x"}, "cumsum.f32.to_f64", {"f64"}));
  r.push_back(fx("cumsum", "int64 dim 1", [](V x) { return cumsum(x[0], 1); }, {"cumsum.i64.x"}, "cumsum.i64.out1",
                 {"i64"}));
  r.push_back(fx("cumsum", "int64 dim 0, method", [](V x) { return x[0].cumsum(0); }, {"cumsum.i64.x"},
                 "cumsum.i64.out0", {"i64"}));
  r.push_back(fx("cumsum", "int64 to float32", [](V x) { return cumsum(x[0], 1, kFloat32); }, {"cumsum.i64.x"},
                 "cumsum.i64.to_f32", {"i64"}));
  r.push_back(fx("cumsum", "int64 wraps", [](V x) { return cumsum(x[0], 0); }, {"cumsum.i64.wrap_x"},
                 "cumsum.i64.wrap", {"i64"}));
  r.push_back(fx("cumsum", "bool counts in int64", [](V x) { return cumsum(x[0], 0); }, {"cumsum.bool.x"},
                 "cumsum.bool.out", {"bool"}));
  r.push_back(fx("cumsum", "empty",
                 [](V x) { return cumsum(zeros({3, 0}, TensorOptions(kFloat64).device(x[0].device())), 1); },
                 {"cumsum.f64.x"}, "cumsum.empty.out", {"f64"}));
  r.push_back(fx("cumsum", "0-d",
                 [](V x) { return cumsum(scalar_tensor(2.5, TensorOptions(kFloat64).device(x[0].device())), 0); },
                 {"cumsum.f64.x"}, "cumsum.scalar.out", {"f64"}));
  // sort and argsort (no ties but at the edges, where -0, 0 and the two NaNs keep their order)
  for (int64_t d : {0, 1, 2, -1})
    for (bool desc : {false, true}) {
      const std::string key = "sort.{t}." + std::to_string(d) + (desc ? ".desc" : ".asc");
      const std::string s = "dim " + std::to_string(d) + (desc ? " descending" : "");
      r.push_back(fx("sort", s + " values", [d, desc](V x) { return sort(x[0], d, desc).values; }, {"sort.{t}.x"},
                     key + ".values"));
      r.push_back(fx("sort", s + " indices", [d, desc](V x) { return sort(x[0], d, desc).indices; }, {"sort.{t}.x"},
                     key + ".indices"));
      r.push_back(fx("argsort", s, [d, desc](V x) { return argsort(x[0], d, desc); }, {"sort.{t}.x"}, key + ".indices"));
    }
  r.push_back(fx("sort", "transposed, method, values", [](V x) { return x[0].transpose(0, 2).sort(1).values; },
                 {"sort.{t}.x"}, "sort.{t}.t.values"));
  r.push_back(fx("sort", "transposed, method, indices", [](V x) { return x[0].transpose(0, 2).sort(1).indices; },
                 {"sort.{t}.x"}, "sort.{t}.t.indices"));
  for (bool desc : {false, true}) {
    const std::string key = std::string("sort.{t}.edge.") + (desc ? "desc" : "asc");
    const std::string s = std::string("NaN, inf, -0 and ties, stable") + (desc ? ", descending" : "");
    r.push_back(fx("sort", s + " values", [desc](V x) { return sort(x[0], -1, desc, true).values; },
                   {"sort.{t}.edge_x"}, key + ".values"));
    r.push_back(fx("sort", s + " indices", [desc](V x) { return sort(x[0], -1, desc, true).indices; },
                   {"sort.{t}.edge_x"}, key + ".indices"));
    const std::string ikey = std::string("sort.i64.") + (desc ? "desc" : "asc");
    const std::string is = std::string("int64 with ties, stable") + (desc ? ", descending" : "");
    r.push_back(fx("sort", is + " values", [desc](V x) { return sort(x[0], 1, desc, true).values; }, {"sort.i64.x"},
                   ikey + ".values", {"i64"}));
    r.push_back(fx("sort", is + " indices", [desc](V x) { return sort(x[0], 1, desc, true).indices; }, {"sort.i64.x"},
                   ikey + ".indices", {"i64"}));
  }
  r.push_back(fx("sort", "bool values", [](V x) { return sort(x[0], 0, false, true).values; }, {"sort.bool.x"},
                 "sort.bool.values", {"bool"}));
  r.push_back(fx("sort", "bool indices", [](V x) { return sort(x[0], 0, false, true).indices; }, {"sort.bool.x"},
                 "sort.bool.indices", {"bool"}));
  // topk (no ties but at the edges, where NaN counts as the largest)
  struct Case {
    const char* name;
    int64_t k, dim;
    bool largest;
  };
  for (const Case& c : {Case{"k3", 3, -1, true}, Case{"k3small", 3, 1, false}, Case{"d0", 2, 0, true},
                        Case{"d0small", 2, 0, false}, Case{"all", 6, 1, true}, Case{"k1", 1, 1, false}}) {
    const std::string s = "k " + std::to_string(c.k) + " dim " + std::to_string(c.dim) + (c.largest ? "" : " smallest");
    const std::string key = std::string("topk.{t}.") + c.name;
    r.push_back(fx("topk", s + " values", [c](V x) { return topk(x[0], c.k, c.dim, c.largest).values; },
                   {"topk.{t}.x"}, key + ".values"));
    r.push_back(fx("topk", s + " indices", [c](V x) { return topk(x[0], c.k, c.dim, c.largest).indices; },
                   {"topk.{t}.x"}, key + ".indices"));
  }
  r.push_back(fx("topk", "transposed, method, values", [](V x) { return x[0].t().topk(2, 1).values; }, {"topk.{t}.x"},
                 "topk.{t}.t.values"));
  r.push_back(fx("topk", "transposed, method, indices", [](V x) { return x[0].t().topk(2, 1).indices; },
                 {"topk.{t}.x"}, "topk.{t}.t.indices"));
  for (bool largest : {true, false}) {
    const std::string key = std::string("topk.{t}.edge.") + (largest ? "largest" : "smallest");
    const std::string s = std::string("NaN and infinities") + (largest ? "" : ", smallest");
    r.push_back(fx("topk", s + " values", [largest](V x) { return topk(x[0], 3, -1, largest).values; },
                   {"topk.{t}.edge_x"}, key + ".values"));
    r.push_back(fx("topk", s + " indices", [largest](V x) { return topk(x[0], 3, -1, largest).indices; },
                   {"topk.{t}.edge_x"}, key + ".indices"));
  }
  r.push_back(fx("topk", "int64 values", [](V x) { return topk(x[0], 2, 1).values; }, {"topk.i64.x"},
                 "topk.i64.values", {"i64"}));
  r.push_back(fx("topk", "int64 indices", [](V x) { return topk(x[0], 2, 1).indices; }, {"topk.i64.x"},
                 "topk.i64.indices", {"i64"}));
  // one_hot
  r.push_back(fx("one_hot", "classes from the values", [](V x) { return one_hot(x[0]); }, {"one_hot.x"}, "one_hot.out",
                 {"i64"}));
  r.push_back(fx("one_hot", "6 classes", [](V x) { return one_hot(x[0], 6); }, {"one_hot.x"}, "one_hot.out6", {"i64"}));
  r.push_back(fx("one_hot", "0-d", [](V x) { return one_hot(ids({2}, {}, x[0]), 4); }, {"one_hot.x"}, "one_hot.scalar",
                 {"i64"}));
  r.push_back(fx("one_hot", "empty",
                 [](V x) { return one_hot(Tensor::empty({0, 2}, kInt64).to(x[0].device()), 3); }, {"one_hot.x"},
                 "one_hot.empty", {"i64"}));
  return r;
}

// Values written out (0-d and empty cases, NaN and infinities, int64 limits): the
// generated input only carries the device.
OpTest lit(const std::string& op, const std::string& sample, Fn fn, Tensor want) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .made = {R({1})},  // the device only
          .tags = {"f64"},
          .gradcheck = false,  // the input carries the device only: nothing to perturb
          .zero_size = false,  // the values are written out
          .want = std::move(want)};
}

std::vector<OpTest> literal_rows() {
  auto on = [](const Tensor& t, const Tensor& like) { return t.to(like.device()); };
  std::vector<OpTest> r = {
      lit("gather", "0-d x, 0-d index",
          [on](V x) { return gather(on(scalar_tensor(4.0, kFloat64), x[0]), -1, ids({0}, {}, x[0])); },
          f64({4.0}, {})),
      lit("index_add", "alpha -2^63 fits int64",
          [on](V x) {
            return index_add(on(zeros({1}, kInt64), x[0]), 0, ids({0}, {1}, x[0]), on(ones({1}, kInt64), x[0]),
                             -9223372036854775808.0);
          },
          ints({INT64_MIN}, {1})),
      lit("index_add", "0-d self and source, alpha 3",
          [on](V x) {
            return index_add(on(scalar_tensor(1.0, kFloat64), x[0]), 0, ids({0}, {1}, x[0]),
                             on(scalar_tensor(2.0, kFloat64), x[0]), 3.0);
          },
          f64({7.0}, {})),
      lit("cumsum", "(0, 3) along dim 0", [on](V x) { return cumsum(on(zeros({0, 3}, kFloat64), x[0]), 0); },
          f64({}, {0, 3})),
      lit("sort", "0-d values", [on](V x) { return sort(on(scalar_tensor(3.0), x[0])).values; },
          from_vector<float>({3.0f}, {})),
      lit("sort", "0-d indices", [on](V x) { return sort(on(scalar_tensor(3.0), x[0])).indices; }, ints({0}, {})),
      lit("sort", "(3, 0) indices", [on](V x) { return sort(on(zeros({3, 0}), x[0]), 1).indices; },
          ints({}, {3, 0})),
      lit("topk", "k 0", [on](V x) { return topk(on(zeros({3, 4}), x[0]), 0).values; }, from_vector<float>({}, {3, 0})),
      lit("topk", "0-d, k 0", [on](V x) { return topk(on(scalar_tensor(3.0), x[0]), 0).values; },
          from_vector<float>({3.0f}, {})),
      lit("topk", "0-d, k 1", [on](V x) { return topk(on(scalar_tensor(3.0), x[0]), 1).values; },
          from_vector<float>({3.0f}, {})),
  };
  // NaN stays and inf - inf is NaN; sort puts NaN above +inf.
  for (DType dt : {kFloat32, kFloat64}) {
    const std::string n = std::string(dtype_name(dt));
    const Tensor in = f64({1.0, kNaN, 2.0, kInf, -kInf}, {5}).to(dt);
    r.push_back(lit("cumsum", n + " NaN and infinities", [on, in](V x) { return cumsum(on(in, x[0]), 0); },
                    f64({1, kNaN, kNaN, kNaN, kNaN}, {5}).to(dt)));
    const Tensor s = f64({kNaN, 1.0, -kInf, kInf, 0.0}, {5}).to(dt);
    r.push_back(lit("sort", n + " NaN above inf, values", [on, s](V x) { return sort(on(s, x[0])).values; },
                    f64({-kInf, 0, 1, kInf, kNaN}, {5}).to(dt)));
    r.push_back(lit("sort", n + " NaN above inf, indices", [on, s](V x) { return sort(on(s, x[0])).indices; },
                    ints({2, 4, 1, 3, 0}, {5})));
  }
  return r;
}

// bfloat16 against torch's (bf16.txt, made by make_bf16_fixtures.py): moves exact, the
// running sum within one ulp.
std::vector<OpTest> bf16_rows() {
  std::vector<OpTest> rows;
  rows.push_back(bf16_row("gather", "st.gather", [](V x) { return gather(x[0], 1, x[1]); }, {"ew.a", "st.gidx"}, 0));
  rows.push_back(bf16_row("sort", "st.sort", [](V x) { return x[0].sort(1).values; }, {"ew.a"}, 0));
  rows.push_back(bf16_row("cumsum", "st.cumsum", [](V x) { return x[0].slice(1, 0, 6).cumsum(1); }, {"ew.a"}, 1));
  return rows;
}

// Generated inputs: gradcheck (which compares the gradients with central differences)
// and the CUDA backend.
std::vector<OpTest> made_rows() {
  auto g_idx = [](const Tensor& x) { return ids({3, 0, 0, 2, 1, 1}, {3, 2}, x); };  // repeats: gradients add up
  auto g_idx0 = [](const Tensor& x) { return ids({2, 0, 1, 1, 0, 2, 2, 1}, {2, 2, 2}, x); };  // into (3, 4, 2)
  auto g_wide = [](const Tensor& x) { return ids({0, 3, 3, 1, 2, 0, 0, 0, 1, 2, 3, 3, 2, 1, 0}, {3, 5}, x); };
  auto s_idx = [](const Tensor& x) { return ids({4, 0, 2, 1, 3, 0, 2, 4, 1}, {3, 3}, x); };  // distinct per row
  auto s_idx0 = [](const Tensor& x) { return ids({1, 0, 2, 2, 0, 2, 1, 0}, {2, 4}, x); };  // distinct per column
  auto a_idx = [](const Tensor& x) { return ids({4, 4, 0, 2, 4, 1, 0, 0, 3, 3, 2, 2}, {3, 4}, x); };  // repeats sum
  auto a_idx3 = [](const Tensor& x) { return ids({1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 1, 1}, {3, 2, 2}, x); };
  auto i_idx = [](const Tensor& x) { return ids({0, 2, 0, 4}, {4}, x); };
  auto copy_of = [](const Tensor& x) { return x * 1.0; };  // a non-leaf with x's values
  std::vector<OpTest> rows = {
      made_fixed("gather", "dim 1, repeated indices", [g_idx](V x) { return gather(x[0], 1, g_idx(x[0])); }, {R({3, 4})}),
      made_fixed("gather", "dim 0, 3-D, smaller index", [g_idx0](V x) { return gather(x[0], 0, g_idx0(x[0])); },
           {R({3, 4, 2})}),
      made_fixed("gather", "index longer than x along dim", [g_wide](V x) { return x[0].gather(-1, g_wide(x[0])); },
           {R({3, 4})}),
      made_fixed("gather", "generated, transposed x", [g_idx](V x) { return gather(x[0], 1, g_idx(x[0])); }, {T({3, 4})}),
      made_fixed("gather", "then transpose", [g_idx](V x) { return gather(x[0], 1, g_idx(x[0])).t(); }, {S({3, 4})}),
      made_fixed("gather", "0-d", [](V x) { return gather(x[0], 0, ids({0, 0}, {2}, x[0])); }, {R({})}),
      made_fixed("scatter", "x and src", [s_idx](V x) { return scatter(x[0], 1, s_idx(x[0]), x[1]); },
           {R({3, 5}), R({3, 3})}),
      made_fixed("scatter", "generated, src larger than index", [s_idx](V x) { return scatter(x[0], 1, s_idx(x[0]), x[1]); },
           {R({3, 5}), R({4, 4})}),
      made_fixed("scatter", "dim 0, transposed x, stepped src", [s_idx0](V x) { return scatter(x[0], 0, s_idx0(x[0]), x[1]); },
           {T({3, 4}), S({2, 4})}),
      made_fixed("scatter", "generated, value", [s_idx](V x) { return scatter(x[0], 1, s_idx(x[0]), 0.75); }, {R({3, 5})}),
      made_fixed("scatter", "value, permuted", [s_idx0](V x) { return x[0].scatter(0, s_idx0(x[0]).unsqueeze(2), -1.0); },
           {Pm({3, 4, 2})}),
      made_fixed("scatter_add", "x and src, repeats", [a_idx](V x) { return scatter_add(x[0], 1, a_idx(x[0]), x[1]); },
           {R({3, 5}), R({3, 4})}),
      made_fixed("scatter_add", "src larger, transposed", [a_idx](V x) { return x[0].scatter_add(1, a_idx(x[0]), x[1]); },
           {T({3, 5}), T({4, 6})}),
      made_fixed("scatter_add", "dim 0, 3-D", [a_idx3](V x) { return scatter_add(x[0], 0, a_idx3(x[0]), x[1]); },
           {R({2, 2, 2}), R({3, 2, 2})}),
      made_fixed("index_add", "x and source, repeats", [i_idx](V x) { return index_add(x[0], 0, i_idx(x[0]), x[1]); },
           {R({5, 3}), R({4, 3})}),
      made_fixed("index_add", "generated, alpha 2.5", [i_idx](V x) { return index_add(x[0], 0, i_idx(x[0]), x[1], 2.5); },
           {R({5, 3}), R({4, 3})}),
      made_fixed("index_add", "dim 1, transposed and stepped",
           [](V x) { return x[0].index_add(1, ids({2, 0, 2}, {3}, x[0]), x[1], -0.5); }, {T({4, 3}), S({4, 3})}),
      made_fixed("index_add", "generated, 0-d index", [](V x) { return index_add(x[0], 1, ids({1}, {}, x[0]), x[1]); },
           {R({2, 3}), R({2, 1})}),
      made_fixed("index_add", "alpha 2.5, stepped source",
           [i_idx](V x) { return index_add(x[0], 0, i_idx(x[0]), x[1], 2.5); }, {R({5, 3}), S({4, 3})}),
      made_fixed("cumsum", "generated, dim 0", [](V x) { return cumsum(x[0], 0); }, {R({2, 3, 4})}),
      made_fixed("cumsum", "generated, dim 1", [](V x) { return cumsum(x[0], 1); }, {R({2, 3, 4})}),
      made_fixed("cumsum", "generated, dim 2", [](V x) { return cumsum(x[0], 2); }, {R({2, 3, 4})}),
      made_fixed("cumsum", "dim -1, method", [](V x) { return x[0].cumsum(-1); }, {R({2, 3, 4})}),
      made_fixed("cumsum", "transposed, dim 0", [](V x) { return cumsum(x[0], 0); }, {T({3, 4})}),
      made_fixed("cumsum", "transposed, dim 1", [](V x) { return cumsum(x[0], 1); }, {T({3, 4})}),
      made_fixed("cumsum", "permuted, dim 1", [](V x) { return cumsum(x[0], 1); }, {Pm({2, 3, 4})}),
      made_fixed("cumsum", "stepped, then transpose", [](V x) { return cumsum(x[0], 0).t(); }, {S({3, 4})}),
      made_fixed("cumsum", "generated, 0-d", [](V x) { return cumsum(x[0], 0); }, {R({})}),
      made_fixed("cumsum", "dtype float64", [](V x) { return cumsum(x[0], 1, kFloat64); }, {R({2, 3})}),
      made_fixed("cumsum", "twice (second order path)", [](V x) { return cumsum(cumsum(x[0], 0), 0); }, {R({4})}),
      made_fixed("cumsum", "both dims of a transposed input", [](V x) { return cumsum(x[0], 0) + cumsum(x[0], -1); },
           {T({3, 4})}),
      made_fixed("sort", "values dim 1", [](V x) { return sort(x[0], 1).values; }, {D({3, 4})}),
      made_fixed("sort", "values dim 0 descending", [](V x) { return sort(x[0], 0, true).values; }, {D({3, 4})}),
      made_fixed("sort", "values permuted, method", [](V x) { return x[0].sort(-1, false, true).values; },
           {Pm(D({2, 3, 4}))}),
      made_fixed("sort", "values 0-d", [](V x) { return sort(x[0]).values; }, {R({})}),
      made_fixed("sort", "values times indices, descending",
           [](V x) {
             ValuesIndices r = sort(x[0], 1, true);
             return r.values * r.indices.to(x[0].dtype());
           },
           {D({3, 5})}),
      made_fixed("argsort", "picks the sorted values", [](V x) { return gather(x[0], 1, argsort(x[0], 1, true)); },
           {D({3, 5})}),
      made_fixed("topk", "values k 2", [](V x) { return topk(x[0], 2).values; }, {D({3, 5})}),
      made_fixed("topk", "values smallest dim 0", [](V x) { return topk(x[0], 2, 0, false).values; }, {D({3, 5})}),
      made_fixed("topk", "values transposed, method", [](V x) { return x[0].topk(3, 1).values; }, {T(D({4, 5}))}),
      made_fixed("topk", "all k", [](V x) { return topk(x[0], 4).values; }, {D({2, 4})}),
      made_fixed("topk", "values plus indices, smallest dim 0, permuted",
           [](V x) {
             ValuesIndices r = topk(x[0], 2, 0, false);
             return r.values + r.indices.to(x[0].dtype());
           },
           {Pm(D({4, 3}))}),
      made_fixed("one_hot", "(2, 2) indices, 5 classes", [](V x) { return one_hot(ids({0, 3, 1, 2}, {2, 2}, x[0]), 5); },
           {R({1})}),
      // in place, on a non-leaf copy of the input
      made_fixed("scatter_", "src", [s_idx, copy_of](V x) { Tensor y = copy_of(x[0]); y.scatter_(1, s_idx(x[0]), x[1]); return y; },
           {R({3, 5}), R({3, 3})}),
      made_fixed("scatter_", "value",
           [s_idx0, copy_of](V x) { Tensor y = copy_of(x[0]); y.scatter_(0, s_idx0(x[0]), 7.0); return y * x[0]; },
           {T({3, 4})}),
      made_fixed("scatter_add_", "repeats",
           [a_idx, copy_of](V x) { Tensor y = copy_of(x[0]); y.scatter_add_(1, a_idx(x[0]), x[1]); return y; },
           {R({3, 5}), S({3, 4})}),
      made_fixed("index_add_", "alpha 2.0",
           [](V x) { Tensor y = x[0] * 1.0; y.index_add_(1, ids({0}, {1}, x[0]), x[1], 2.0); return y; },
           {R({2, 3}), R({2, 1})}),
      made_fixed("index_add_", "into a transposed view",
           [i_idx](V x) { Tensor y = x[0] * 1.0; y.t().index_add_(1, i_idx(x[0]), x[1].t(), -0.5); return y * y; },
           {R({5, 3}), R({4, 3})}),
  };
  // Integer outputs: no gradient.
  for (OpTest& t : rows)
    if (t.op == "one_hot") t.gradcheck = false;
  // cumsum and sort keep their shapes along dims other than 0: a zero-size input works.
  for (OpTest& t : rows)
    if ((t.op == "cumsum" && t.sample != "stepped, then transpose") ||
        (t.op == "sort" && t.sample != "values dim 0 descending"))
      t.zero_size = true;
  return rows;
}

void add_errors(std::vector<OpTest>& rows) {
  const Tensor x = zeros({3, 4}), u;
  std::map<std::string, std::vector<ErrorCase>> errors = {
      {"gather",
       {{"index 7 of 4", [x] { gather(x, 1, ints({7}, {1, 1})); }, {"[gather] index 7 is out of bounds for dim 1 with size 4"}},
        {"index -1", [x] { gather(x, -1, ints({-1}, {1, 1})); }, {"[gather] index -1 is out of bounds for dim 1 with size 4"}},
        {"dim 2", [x] { gather(x, 2, ints({0}, {1, 1})); }, {"[gather]", "dim 2", "out of range"}},
        {"an index of another rank", [x] { gather(x, 1, ints({0}, {1})); },
         {"[gather]", "index of shape (1,)", "(3, 4)", "dimensions"}},
        {"an index larger off dim", [x] { gather(x, 1, zeros({4, 1}, kInt64)); }, {"[gather]", "(4, 1)", "(3, 4)", "dim 0"}},
        {"a float index", [x] { gather(x, 1, zeros({1, 1})); }, {"[gather]", "int64", "float32"}},
        {"undefined", [] { gather(Tensor(), 1, zeros({1, 1}, kInt64)); }, {"[gather]", "undefined"}},
        {"a bfloat16 index", [] { gather(ones({2, 3}, kBFloat16), 1, ones({2, 1}, kBFloat16)); },
         {"[gather]", "bfloat16"}}}},
      {"scatter",
       {{"index 4 of 4", [x] { scatter(x, 1, ints({4}, {1, 1}), 1.0); }, {"[scatter] index 4 is out of bounds for dim 1 with size 4"}},
        {"index 3 of 3", [x] { scatter(x, 0, ints({3}, {1, 1}), ones({1, 1})); },
         {"[scatter] index 3 is out of bounds for dim 0 with size 3"}},
        {"a float64 src", [x] { scatter(x, 1, ints({0}, {1, 1}), ones({1, 1}, kFloat64)); },
         {"[scatter]", "src has dtype float64", "float32"}},
        {"an index larger than src", [x] { scatter(x, 1, ints({0, 1}, {1, 2}), ones({1, 1})); },
         {"[scatter]", "(1, 2)", "larger than src", "(1, 1)"}},
        {"an index larger than self off dim", [x] { scatter(x, 1, zeros({4, 1}, kInt64), ones({5, 5})); },
         {"[scatter]", "(4, 1)", "(3, 4)", "dim 0"}},
        {"a src of another rank", [x] { scatter(x, 1, zeros({1, 1}, kInt64), ones({5})); },
         {"[scatter]", "src of shape (5,)", "dimensions"}},
        {"NaN into int64", [] { scatter(zeros({3}, kInt64), 0, ints({1}, {1}), kNaN); }, {"[scatter]", "nan", "int64"}},
        {"1e19 into int64", [] { scatter(zeros({3}, kInt64), 0, ints({1}, {1}), 1e19); }, {"[scatter]", "int64", "overflow"}}}},
      {"scatter_add",
       {{"index -2", [x] { scatter_add(x, 0, ints({-2}, {1, 1}), ones({1, 1})); },
         {"[scatter_add] index -2 is out of bounds for dim 0 with size 3"}},
        {"an int64 src", [x] { scatter_add(x, 0, ints({0}, {1, 1}), ones({1, 1}, kInt64)); },
         {"[scatter_add]", "int64", "float32"}}}},
      {"scatter_",
       {{"index 5 of 3", [] { zeros({3, 4}).scatter_(0, ints({5}, {1, 1}), 2.0); },
         {"[scatter] index 5 is out of bounds for dim 0 with size 3"}},
        {"a leaf that requires grad", [] { zeros({2, 3}, kFloat64).requires_grad_().scatter_(1, ints({0}, {1, 1}), 1.0); },
         {"[scatter_]", "leaf tensor that requires grad"}},
        {"an expanded self", [] { zeros({1, 4}, kFloat64).expand({3, 4}).scatter_(1, zeros({3, 1}, kInt64), 1.0); },
         {"[scatter_]", "stride 0"}},
        {"src in self's memory",
         [] { Tensor y = f64({1, 2, 3, 4, 5, 6}, {2, 3}); y.scatter_(1, ints({0, 0}, {2, 1}), y.slice(1, 2, 3)); },
         {"[scatter_]", "same memory"}},
        {"index in self's memory", [] { Tensor xi = zeros({2, 2}, kInt64); xi.scatter_(0, xi, 1.0); },
         {"[scatter_]", "same memory"}}}},
      {"scatter_add_",
       {{"a float64 src", [] { zeros({3, 4}).scatter_add_(0, ints({0}, {1, 1}), ones({1, 1}, kFloat64)); },
         {"[scatter_add_]", "float64"}},
        {"a leaf that requires grad",
         [] { zeros({2, 3}, kFloat64).requires_grad_().scatter_add_(1, ints({0}, {1, 1}), ones({1, 1}, kFloat64)); },
         {"[scatter_add_]", "leaf"}},
        {"an expanded self",
         [] { zeros({1, 4}, kFloat64).expand({3, 4}).scatter_add_(1, zeros({3, 1}, kInt64), ones({3, 1}, kFloat64)); },
         {"[scatter_add_]", "stride 0", "clone()"}}}},
      {"index_add",
       {{"index 3 of 3", [x] { index_add(x, 0, ints({3}, {1}), ones({1, 4})); },
         {"[index_add] index 3 is out of bounds for dim 0 with size 3"}},
        {"index -1", [x] { index_add(x, 1, ints({-1}, {1}), ones({3, 1})); },
         {"[index_add] index -1 is out of bounds for dim 1 with size 4"}},
        {"a float64 source", [x] { index_add(x, 0, ints({1}, {1}), ones({1, 4}, kFloat64)); },
         {"[index_add]", "float64", "float32"}},
        {"a source of other width", [x] { index_add(x, 0, ints({1}, {1}), ones({1, 5})); },
         {"[index_add]", "(1, 5)", "(3, 4)", "dim 1"}},
        {"more indices than source rows", [x] { index_add(x, 0, ints({1, 2}, {2}), ones({1, 4})); },
         {"[index_add]", "number of indices (2)", "source.size(0) (1)"}},
        {"a 2-D index", [x] { index_add(x, 0, ints({1}, {1, 1}), ones({1, 4})); }, {"[index_add]", "0-D or 1-D", "(1, 1)"}},
        {"a float index", [x] { index_add(x, 0, ones({1}), ones({1, 4})); }, {"[index_add]", "int64", "float32"}},
        {"a source of another rank", [x] { index_add(x, 0, ints({1}, {1}), ones({4})); }, {"[index_add]", "(4,)", "dimensions"}},
        {"dim 2", [x] { index_add(x, 2, ints({1}, {1}), ones({1, 4})); }, {"[index_add]", "dim 2", "out of range"}},
        {"an infinite alpha into int64", [] { index_add(zeros({3}, kInt64), 0, ints({1}, {1}), ones({1}, kInt64), kInf); },
         {"[index_add]", "alpha", "int64"}}}},
      {"index_add_",
       {{"index 9 of 3", [] { zeros({3, 4}).index_add_(0, ints({9}, {1}), ones({1, 4})); },
         {"[index_add] index 9 is out of bounds"}},
        {"a leaf that requires grad",
         [] { zeros({2, 3}, kFloat64).requires_grad_().index_add_(0, ints({0}, {1}), ones({1, 3}, kFloat64)); },
         {"[index_add_]", "leaf"}},
        {"an expanded self",
         [] { zeros({1, 4}, kFloat64).expand({3, 4}).index_add_(0, ints({0}, {1}), ones({1, 4}, kFloat64)); },
         {"[index_add_]", "stride 0"}},
        {"source in self's memory",
         [] { Tensor y = f64({1, 2, 3, 4, 5, 6}, {2, 3}); y.index_add_(1, ints({0}, {1}), y.slice(1, 1, 2)); },
         {"[index_add_]", "same memory"}}}},
      {"cumsum",
       {{"dim 2", [x] { cumsum(x, 2); }, {"[cumsum]", "dim 2", "out of range"}},
        {"dim 1 of a 0-d", [] { cumsum(scalar_tensor(1.0), 1); }, {"[cumsum]", "dim 1", "out of range"}},
        {"dtype bool", [x] { cumsum(x, 0, kBool); }, {"[cumsum]", "bool"}},
        {"undefined", [] { cumsum(Tensor(), 0); }, {"[cumsum]", "undefined"}}}},
      {"sort",
       {{"dim 2", [x] { sort(x, 2); }, {"[sort]", "dim 2", "out of range"}},
        {"dim 1 of a 0-d", [] { sort(scalar_tensor(1.0), 1); }, {"[sort]", "dim 1"}}}},
      {"argsort", {{"dim -3", [x] { argsort(x, -3); }, {"[sort]", "dim -3"}}}},
      {"topk",
       {{"k 5 of 4", [x] { topk(x, 5); }, {"[topk]", "k out of range", "k = 5", "size 4"}},
        {"k -1", [x] { topk(x, -1); }, {"[topk]", "k = -1"}},
        {"k 4 of 3 along dim 0", [x] { topk(x, 4, 0); }, {"[topk]", "k = 4", "dim 0", "size 3"}},
        {"dim 2", [x] { topk(x, 1, 2); }, {"[topk]", "dim 2", "out of range"}},
        {"k 2 of a 0-d", [] { topk(scalar_tensor(1.0), 2); }, {"[topk]", "k = 2"}},
        {"bool", [] { topk(zeros({3}, kBool), 1); }, {"[topk]", "bool"}}}},
      {"one_hot",
       {{"a negative index", [] { one_hot(ints({0, -2, 1}, {3})); }, {"[one_hot]", "non-negative", "-2"}},
        {"index 3 of 3 classes", [] { one_hot(ints({0, 3, 1}, {3}), 3); },
         {"[one_hot]", "smaller than num_classes (3)", "got 3"}},
        {"0 classes", [] { one_hot(ints({0}, {1}), 0); }, {"[one_hot]", "smaller than num_classes (0)"}},
        {"-2 classes", [] { one_hot(ints({0}, {1}), -2); }, {"[one_hot]", "num_classes (-2)"}},
        {"empty, classes from the values", [] { one_hot(Tensor::empty({0}, kInt64)); },
         {"[one_hot]", "empty tensor", "num_classes = -1"}},
        {"float32", [] { one_hot(ones({2})); }, {"[one_hot]", "int64", "float32"}},
        {"a huge index", [] { one_hot(ints({std::numeric_limits<int64_t>::max()}, {1})); }, {"[one_hot]", "too large"}},
        {"bfloat16", [] { one_hot(from_vector<double>({0, 1}, {2}).to(kBFloat16)); }, {"[one_hot]", "bfloat16"}},
        {"float32 NaN", [] { one_hot(from_vector<double>({kNaN}, {1}).to(kFloat32)); }, {"[one_hot]", "int64"}},
        {"float64 NaN", [] { one_hot(f64({kNaN}, {1})); }, {"[one_hot]", "int64"}},
        {"a size that overflows int64", [] { one_hot(zeros({1}, kInt64).expand({int64_t{1} << 20}), int64_t{1} << 44); },
         {"[one_hot]", "overflows int64"}},
        {"a size that cannot be allocated", [] { one_hot(zeros({1 << 20}, kInt64), 1 << 20); },
         {"[one_hot]", "cannot allocate"}}}},
  };
  for (auto& entry : errors) {  // not a structured binding: CHECK_MESSAGE's lambda takes op
    const std::string& op = entry.first;
    bool placed = false;
    for (OpTest& t : rows)
      if (t.op == op) {
        t.errors = std::move(entry.second);
        placed = true;
        break;
      }
    CHECK_MESSAGE(placed, op, ": no row for its errors");
  }
}

}  // namespace

std::vector<OpTest> indexing_rows() {
  std::vector<OpTest> rows = rows_of({&fixture_rows, &literal_rows, &bf16_rows, &made_rows});
  add_errors(rows);
  return rows;
}

}  // namespace kiln::optable
