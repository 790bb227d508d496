// Rows of linear_cross_entropy: cross_entropy(linear(input, weight, bias), target, ...)
// computed a chunk of rows at a time, against that composition (forward and gradients,
// float64 and float32) for every reduction, with and without bias, class weights,
// ignore_index and label smoothing, chunks of one row to all rows; float64 gradcheck on
// every row. The targets and class weights are constants captured by the rows, on the
// input's device. (Its memory bound and autocast's single rounding of the weight:
// test_linear_cross_entropy.cpp.)
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using RD = Reduction;

Tensor ids(const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
  return from_vector<int64_t>(v, s).to(like.device());
}
Tensor wts(const std::vector<double>& v, const Shape& s, const Tensor& like) {
  return from_vector<double>(v, s).to(like.dtype()).to(like.device());
}

// One set of options: the target's values and shape, class weights (empty: none).
struct Options {
  std::string name;
  std::vector<int64_t> target;
  Shape target_shape;
  std::vector<double> class_weight = {};
  int64_t ignore_index = -100;
  double smoothing = 0.0;
  RD reduction = RD::Mean;
  bool bias = true;
};

Tensor composed(V x, const Options& o) {
  const int64_t classes = x[1].size(0);
  const Tensor t = ids(o.target, o.target_shape, x[0]).reshape({-1});
  const Tensor logits = linear(x[0], x[1], o.bias ? x[2] : Tensor()).reshape({-1, classes});
  const Tensor out = o.class_weight.empty()
                         ? cross_entropy(logits, t, o.ignore_index, o.smoothing, o.reduction)
                         : cross_entropy(logits, t, wts(o.class_weight, {classes}, x[0]), o.ignore_index, o.smoothing,
                                         o.reduction);
  return o.reduction == RD::None ? out.reshape(o.target_shape) : out;
}

Tensor fused(V x, const Options& o, int64_t chunk) {
  const Tensor t = ids(o.target, o.target_shape, x[0]);
  const Tensor b = o.bias ? x[2] : Tensor();
  if (o.class_weight.empty())
    return linear_cross_entropy(x[0], x[1], b, t, o.ignore_index, o.smoothing, o.reduction, chunk);
  return linear_cross_entropy(x[0], x[1], b, t, wts(o.class_weight, {x[1].size(0)}, x[0]), o.ignore_index,
                              o.smoothing, o.reduction, chunk);
}

OpTest row(const Options& o, int64_t chunk, std::vector<In> in) {
  if (!o.bias) in.pop_back();
  return {.op = "linear_cross_entropy",
          .sample = o.name + (chunk == 0 ? ", one chunk" : ", chunks of " + std::to_string(chunk)),
          .fn = [o, chunk](V x) { return fused(x, o, chunk); },
          .made = std::move(in),
          // float32: the chunks sum the loss and the weight's gradient in another order
          // than the composition (a few float32 ulps of the largest term).
          .tol32 = kTol32Loose,
          .zero_size = false,  // the targets are constants of the inputs' row count
          .reference = [o](V x) { return composed(x, o); }};
}

// (3, 4, 5) inputs over 7 classes, 12 rows; -100 and 6 appear so that ignore_index has
// rows to skip either way.
std::vector<OpTest> option_rows() {
  const std::vector<int64_t> t = {0, 6, 3, -100, 2, 2, 5, 1, 6, -100, 4, 0};
  const std::vector<int64_t> t6 = {0, 6, 3, 1, 2, 2, 5, 1, 6, 4, 4, 0};  // for ignore_index 6
  const std::vector<double> cw = {0.5, 1.5, 1.0, 0.2, 2.0, 0.7, 1.1};
  const std::vector<Options> options = {
      {"mean", t, {3, 4}},
      {"sum", t, {3, 4}, {}, -100, 0.0, RD::Sum},
      {"none, smoothing 0.1", t, {3, 4}, {}, -100, 0.1, RD::None},
      {"mean, no bias", t, {3, 4}, {}, -100, 0.0, RD::Mean, false},
      {"ignore 6, smoothing 0.25", t6, {3, 4}, {}, 6, 0.25},
      {"class weights, smoothing 0.15", t, {3, 4}, cw, -100, 0.15},
      {"class weights, sum, ignore 6", t6, {3, 4}, cw, 6, 0.0, RD::Sum},
  };
  std::vector<OpTest> rows;
  for (const Options& o : options)
    for (const int64_t chunk : {1, 5, 12, 0}) rows.push_back(row(o, chunk, {R({3, 4, 5}), R({7, 5}), R({7})}));
  return rows;
}

// Other layouts: a transposed weight, a stepped input, a (2, 3, D) input with a chunk
// that splits no row.
std::vector<OpTest> layout_rows() {
  const std::vector<int64_t> t5 = {1, -100, 3, 2, -100};
  return {
      row({"transposed weight, ignore, smoothing 0.2", t5, {5}, {}, -100, 0.2}, 2, {R({5, 3}), T({4, 3}), R({4})}),
      row({"stepped input, class weights", t5, {5}, {0.5, 2.0, 1.0, 0.3}, -100, 0.1}, 2, {S({5, 3}), R({4, 3}), R({4})}),
      row({"(2, 3, 3) input", {0, 3, 1, 2, 2, 0}, {2, 3}}, 4, {R({2, 3, 3}), R({4, 3}), R({4})}),
  };
}

void add_errors(OpTest& t) {
  const Tensor x = randn({4, 3}, kFloat64), w = randn({5, 3}, kFloat64), b = randn({5}, kFloat64);
  const Tensor tg = from_vector<int64_t>({0, 1, 2, 3}, {4});
  const std::string op = "[linear_cross_entropy]";
  t.errors = {
      {"float targets", [=] { (void)linear_cross_entropy(x, w, b, tg.to(kFloat64)); }, {op, "int64", "float64"}},
      {"targets of another size", [=] { (void)linear_cross_entropy(x, w, b, from_vector<int64_t>({0, 1, 2}, {3})); },
       {op, "expected target of shape (4,)", "got (3,)"}},
      {"in_features differ", [=] { (void)linear_cross_entropy(x, randn({5, 4}, kFloat64), b, tg); },
       {op, "input of shape (4, 3)", "in_features = 4"}},
      {"a 1-D weight", [=] { (void)linear_cross_entropy(x, randn({15}, kFloat64), b, tg); }, {op, "2-D", "(15,)"}},
      {"chunk_rows < 0", [=] { (void)linear_cross_entropy(x, w, b, tg, -100, 0.0, RD::Mean, -3); },
       {op, "chunk_rows", "-3"}},
      {"label_smoothing > 1", [=] { (void)linear_cross_entropy(x, w, b, tg, -100, 1.5); }, {op, "label_smoothing", "1.5"}},
      {"batchmean", [=] { (void)linear_cross_entropy(x, w, b, tg, -100, 0.0, RD::BatchMean); }, {op, "batchmean"}},
      {"a target out of range",
       [=] { (void)linear_cross_entropy(x, w, b, from_vector<int64_t>({0, 1, 9, 3}, {4}), -100, 0.0, RD::Mean, 1); },
       {op, "target 9 out of range for 5 classes", "position 2"}},
      {"a bias of another size", [=] { (void)linear_cross_entropy(x, w, randn({4}, kFloat64), tg); },
       {op, "bias must be (5)", "(4,)"}},
      {"class weights for 2 of 5 classes",
       [=] { (void)linear_cross_entropy(x, w, b, tg, from_vector<double>({1, 2}, {2})); },
       {op, "weight tensor should be defined either for all 5 classes"}},
      // The dtype check is linear's, inside: its message names the dtypes.
      {"float32 input, float64 weight", [=] { (void)linear_cross_entropy(x.to(kFloat32), w, b, tg); },
       {"[", "input has dtype float32", "float64"}},
  };
}

}  // namespace

std::vector<OpTest> fused_loss_rows() {
  std::vector<OpTest> rows = option_rows();
  for (OpTest& t : layout_rows()) rows.push_back(std::move(t));
  add_errors(rows.front());
  return rows;
}

}  // namespace kiln::optable
