// Rows of the random ops (rand, randn, randint, bernoulli, multinomial, uniform_,
// normal_): each draws the same values from the same seed and others when drawn again
// (the driver's random check; the CUDA backend the CPU's), and its draws have the range
// and statistics of their distribution. The statistics are bounded at about six
// standard errors and the generator is seeded from the row, so no check can flake. (The
// Generator itself, its Philox streams and its states: test_tensor.cpp.)
#include <algorithm>
#include <cmath>
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

using Holds = std::function<void(const Tensor&, V)>;

constexpr int64_t kDraws = 100000;

// The input's dtype and device (the input carries nothing else).
TensorOptions like(V x) { return TensorOptions(x[0].dtype()).device(x[0].device()); }
TensorOptions on(V x, DType d) { return TensorOptions(d).device(x[0].device()); }
// Weights in the input's dtype, on its device.
Tensor weights(const std::vector<double>& v, const Shape& s, V x) {
  return from_vector<double>(v, s).to(x[0].dtype()).to(x[0].device());
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}
std::vector<double> values(const Tensor& t) { return t.to(kCPU).to_vector<double>(); }

OpTest drawn(const std::string& op, const std::string& sample, Fn fn, Holds holds) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .made = {R({1})},
          .gradcheck = false,
          .random = true,
          .holds = std::move(holds)};
}

std::vector<OpTest> uniform_and_normal_rows() {
  std::vector<OpTest> rows;
  rows.push_back(drawn("rand", "(100000,) in the input's dtype", [](V x) { return rand({kDraws}, like(x)); },
                       [](const Tensor& out, V x) {
                         CHECK(out.dtype() == x[0].dtype());
                         const std::vector<double> v = values(out);
                         CHECK(std::abs(mean_of(v) - 0.5) < 0.01);
                         CHECK(std::abs(std_of(v) - std::sqrt(1.0 / 12)) < 0.01);
                         CHECK(*std::min_element(v.begin(), v.end()) >= 0);
                         CHECK(*std::max_element(v.begin(), v.end()) < 1);
                       }));
  rows.back().errors = {{"int64", [] { (void)rand({3}, kInt64); }, {"[rand]", "int64"}}};
  rows.push_back(drawn("randn", "(100000,) in the input's dtype", [](V x) { return randn({kDraws}, like(x)); },
                       [](const Tensor& out, V x) {
                         CHECK(out.dtype() == x[0].dtype());
                         const std::vector<double> v = values(out);
                         // Standard errors: 1/sqrt(n) = 0.0032 (mean), 1/sqrt(2n) = 0.0022 (std).
                         CHECK(std::abs(mean_of(v)) < 0.02);
                         CHECK(std::abs(std_of(v) - 1.0) < 0.02);
                         const auto beyond3 = std::count_if(v.begin(), v.end(), [](double e) { return std::abs(e) > 3; });
                         CHECK(beyond3 > 150);  // expected 270
                         CHECK(beyond3 < 400);
                         const std::set<double> distinct(v.begin(), v.end());
                         CHECK(distinct.size() > kDraws - 1000);  // float32 has a few collisions
                       }));
  rows.back().errors = {{"bool", [] { (void)randn({3}, kBool); }, {"[randn]", "bool"}}};

  rows.push_back(drawn("uniform_", "[-2, 2) in place",
                       [](V x) {
                         Tensor t = empty({kDraws}, like(x));
                         t.uniform_(-2, 2);
                         return t;
                       },
                       [](const Tensor& out, V) {
                         const std::vector<double> v = values(out);
                         CHECK(std::abs(mean_of(v)) < 0.03);
                         CHECK(*std::min_element(v.begin(), v.end()) >= -2);
                         CHECK(*std::max_element(v.begin(), v.end()) < 2);
                       }));
  rows.back().errors = {{"from > to", [] { (void)zeros({3}).uniform_(1.0, 0.0); }, {"[uniform_]", "from=1", "to=0"}}};
  rows.push_back(drawn("uniform_", "of a transposed view",
                       [](V x) {
                         Tensor t = zeros({7, 9}, like(x));
                         t.t().uniform_(-2, 3);
                         return t;
                       },
                       [](const Tensor& out, V) {
                         const std::vector<double> v = values(out);
                         CHECK(*std::min_element(v.begin(), v.end()) >= -2);
                         CHECK(*std::max_element(v.begin(), v.end()) < 3);
                         CHECK(std::set<double>(v.begin(), v.end()).size() == v.size());  // each element drawn
                       }));
  rows.push_back(drawn("normal_", "mean 5, std 2 in place",
                       [](V x) {
                         Tensor t = empty({kDraws}, like(x));
                         t.normal_(5, 2);
                         return t;
                       },
                       [](const Tensor& out, V) {
                         const std::vector<double> v = values(out);
                         CHECK(std::abs(mean_of(v) - 5) < 0.04);
                         CHECK(std::abs(std_of(v) - 2) < 0.04);
                       }));
  rows.back().errors = {{"std < 0", [] { (void)zeros({3}).normal_(0.0, -1.0); }, {"[normal_]", "-1"}}};
  // Non-contiguous: only the viewed elements change.
  rows.push_back(drawn("normal_", "of a stepped, transposed view",
                       [](V x) {
                         Tensor m = zeros({4, 6}, like(x));
                         m.t().slice(0, 0, 6, 2).normal_();
                         return m;
                       },
                       [](const Tensor& out, V) {
                         const Tensor m = out.to(kCPU);
                         for (int64_t i = 0; i < 4; ++i)
                           for (int64_t j = 0; j < 6; ++j) {
                             CAPTURE(i);
                             CAPTURE(j);
                             CHECK((m.at({i, j}) != 0.0) == (j % 2 == 0));
                           }
                       }));
  return rows;
}

std::vector<OpTest> integer_and_bernoulli_rows() {
  std::vector<OpTest> rows;
  rows.push_back(drawn("randint", "[3, 7)", [](V x) { return randint(3, 7, {kDraws}, on(x, kInt64)); },
                       [](const Tensor& out, V) {
                         CHECK(out.dtype() == kInt64);
                         std::vector<int64_t> counts(4, 0);
                         int64_t outside = 0;
                         for (int64_t e : out.to(kCPU).to_vector<int64_t>()) {
                           if (e < 3 || e >= 7) ++outside;
                           else ++counts[static_cast<size_t>(e - 3)];
                         }
                         CHECK(outside == 0);
                         for (int64_t c : counts) CHECK(std::abs(static_cast<double>(c) / kDraws - 0.25) < 0.01);
                       }));
  rows.back().errors = {{"low = high", [] { (void)randint(5, 5, {3}); }, {"[randint]", "low=5", "high=5"}}};
  rows.push_back(drawn("randint", "[-5, -3)", [](V x) { return randint(-5, -3, {1000}, on(x, kInt64)); },
                       [](const Tensor& out, V) {
                         CHECK(amin(out).item() == -5);
                         CHECK(amax(out).item() == -4);
                       }));
  rows.push_back(drawn("randint", "in the input's dtype", [](V x) { return randint(0, 10, {50}, like(x)); },
                       [](const Tensor& out, V x) {
                         CHECK(out.dtype() == x[0].dtype());
                         const std::vector<double> v = values(out);
                         CHECK(std::all_of(v.begin(), v.end(), [](double e) { return e == std::floor(e) && e >= 0 && e < 10; }));
                       }));

  rows.push_back(drawn("bernoulli", "p = 0.3", [](V x) { return bernoulli({kDraws}, 0.3, like(x)); },
                       [](const Tensor& out, V) {
                         const std::vector<double> v = values(out);
                         CHECK(std::all_of(v.begin(), v.end(), [](double e) { return e == 0 || e == 1; }));
                         CHECK(std::abs(mean_of(v) - 0.3) < 0.01);
                       }));
  rows.back().errors = {{"p > 1", [] { (void)bernoulli({3}, 1.5); }, {"[bernoulli]", "1.5"}}};
  rows.push_back(drawn("bernoulli", "of a tensor of 0.8", [](V x) { return bernoulli(full({kDraws}, 0.8, like(x))); },
                       [](const Tensor& out, V x) {
                         CHECK(out.dtype() == x[0].dtype());
                         CHECK(std::abs(mean_of(values(out)) - 0.8) < 0.01);
                       }));
  // Certain draws: exactly the probabilities.
  for (const double p : {0.0, 1.0}) {
    OpTest t = drawn("bernoulli", "p = " + std::to_string(static_cast<int>(p)),
                     [p](V x) { return bernoulli({100}, p, like(x)); },
                     [p](const Tensor& out, V) { CHECK(values(out) == std::vector<double>(100, p)); });
    t.random = false;
    rows.push_back(t);
  }
  OpTest edges = drawn("bernoulli", "of probabilities 0 and 1", [](V x) { return bernoulli(weights({0, 1, 0, 1}, {4}, x)); },
                       [](const Tensor& out, V) { CHECK(values(out) == std::vector<double>{0, 1, 0, 1}); });
  edges.random = false;
  rows.push_back(edges);
  return rows;
}

// Frequencies of each category among draws.
std::vector<double> frequencies(const std::vector<int64_t>& draws, int64_t categories) {
  std::vector<double> f(static_cast<size_t>(categories), 0);
  for (int64_t d : draws) f[static_cast<size_t>(d)] += 1.0 / static_cast<double>(draws.size());
  return f;
}

std::vector<OpTest> multinomial_rows() {
  std::vector<OpTest> rows;
  // Not normalised; a zero weight is never drawn.
  rows.push_back(drawn("multinomial", "with replacement, weights 1 2 3 0 4",
                       [](V x) { return multinomial(weights({1, 2, 3, 0, 4}, {5}, x), kDraws, true); },
                       [](const Tensor& out, V) {
                         CHECK(out.dtype() == kInt64);
                         CHECK(out.shape() == Shape{kDraws});
                         const std::vector<int64_t> v = out.to(kCPU).to_vector<int64_t>();
                         CHECK(std::all_of(v.begin(), v.end(), [](int64_t c) { return c >= 0 && c < 5; }));
                         const std::vector<double> f = frequencies(v, 5);
                         CHECK(f[3] == 0);
                         // Each frequency's standard deviation is at most 0.0016: six of them.
                         const std::vector<double> w = {1, 2, 3, 0, 4};
                         for (size_t c = 0; c < 5; ++c) {
                           CAPTURE(c);
                           CHECK(std::abs(f[c] - w[c] / 10.0) < 0.01);
                         }
                       }));
  // A 2-D batch: each row follows its own weights.
  rows.push_back(drawn("multinomial", "with replacement, a batch of 2",
                       [](V x) { return multinomial(weights({0, 0, 1, 1, 1, 0}, {2, 3}, x), 1000, true); },
                       [](const Tensor& out, V) {
                         CHECK(out.shape() == Shape{2, 1000});
                         const Tensor b = out.to(kCPU);
                         CHECK(equal(b.select(0, 0), full({1000}, 2, kInt64)));
                         const std::vector<int64_t> r1 = b.select(0, 1).to_vector<int64_t>();
                         CHECK(std::count(r1.begin(), r1.end(), 2) == 0);
                         CHECK(std::abs(static_cast<double>(std::count(r1.begin(), r1.end(), 0)) - 500.0) < 100.0);
                       }));
  // Without replacement, in order: P(first = i) = w_i, P(second = j) = sum over i != j of
  // w_i w_j / (1 - w_i). Standard deviations are below 0.0032; bound 0.02. Any strides.
  rows.push_back(drawn("multinomial", "without replacement, 25000 rows expanded",
                       [](V x) { return weights({0.1, 0.2, 0.3, 0.4}, {1, 4}, x).expand({25000, 4}).multinomial(2, false); },
                       [](const Tensor& out, V) {
                         const int64_t R = 25000;
                         REQUIRE(out.shape() == Shape{R, 2});
                         const std::vector<int64_t> v = out.to(kCPU).to_vector<int64_t>();
                         const std::vector<double> w = {0.1, 0.2, 0.3, 0.4};
                         std::vector<double> first(4, 0), second(4, 0);
                         int64_t same = 0;
                         for (int64_t r = 0; r < R; ++r) {
                           same += v[2 * r] == v[2 * r + 1];
                           first[static_cast<size_t>(v[2 * r])] += 1.0 / R;
                           second[static_cast<size_t>(v[2 * r + 1])] += 1.0 / R;
                         }
                         CHECK(same == 0);
                         for (size_t j = 0; j < 4; ++j) {
                           double p2 = 0;
                           for (size_t i = 0; i < 4; ++i)
                             if (i != j) p2 += w[i] * w[j] / (1 - w[i]);
                           CAPTURE(j);
                           CHECK(std::abs(first[j] - w[j]) < 0.02);
                           CHECK(std::abs(second[j] - p2) < 0.02);
                         }
                       }));
  // All categories: a permutation, zero weights last.
  rows.push_back(drawn("multinomial", "every category without replacement",
                       [](V x) { return multinomial(weights({0, 3, 0, 1, 2}, {5}, x), 5, false); },
                       [](const Tensor& out, V) {
                         const std::vector<int64_t> v = out.to(kCPU).to_vector<int64_t>();
                         CHECK(std::set<int64_t>(v.begin(), v.end()).size() == 5);
                         CHECK(std::set<int64_t>(v.begin() + 3, v.end()) == std::set<int64_t>{0, 2});
                       }));
  rows.back().random = false;  // two zero weights last: few orders, a second draw may repeat
  auto f64 = [](const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s); };
  const double nan = std::nan(""), inf = INFINITY;
  rows[0].errors = {
      {"a negative weight", [=] { (void)multinomial(f64({1, -1}, {2}), 1); },
       {"[multinomial]", "inf, nan or element < 0", "-1"}},
      {"a NaN weight", [=] { (void)multinomial(f64({1, nan}, {2}), 1, true); },
       {"[multinomial]", "inf, nan or element < 0", "nan"}},
      {"an infinite weight", [=] { (void)multinomial(f64({inf, 1}, {2}), 1); },
       {"[multinomial]", "inf, nan or element < 0", "inf"}},
      {"a row of zeros", [=] { (void)multinomial(f64({1, 1, 0, 0}, {2, 2}), 1); },
       {"[multinomial]", "sum of probabilities <= 0", "row 1"}},
      {"all zero, with replacement", [=] { (void)multinomial(f64({0, 0}, {2}), 3, true); },
       {"[multinomial]", "sum of probabilities <= 0"}},
      {"more samples than categories", [=] { (void)multinomial(f64({1, 1}, {2}), 3); },
       {"[multinomial]", "without replacement", "num_samples = 3", "2 categories"}},
      {"no samples", [=] { (void)multinomial(f64({1, 1}, {2}), 0); }, {"[multinomial]", "n_sample <= 0", "num_samples = 0"}},
      {"negative samples", [=] { (void)multinomial(f64({1, 1}, {2}), -2, true); }, {"[multinomial]", "num_samples = -2"}},
      {"3-D", [] { (void)multinomial(ones({2, 2, 2}), 1); }, {"[multinomial]", "1 or 2 dim", "(2, 2, 2)"}},
      {"0-d", [] { (void)multinomial(scalar_tensor(1.0), 1); }, {"[multinomial]", "1 or 2 dim", "()"}},
      {"int64", [] { (void)multinomial(from_vector<int64_t>({1, 2}, {2}), 1); }, {"[multinomial]", "floating", "int64"}},
      {"no categories", [] { (void)multinomial(ones({2, 0}), 1); }, {"[multinomial]", "without replacement"}},
  };
  // No rows: nothing to draw, as torch.
  OpTest none = drawn("multinomial", "of no rows", [](V x) { return multinomial(weights({}, {0, 3}, x), 2); },
                      [](const Tensor& out, V) { CHECK(out.shape() == Shape{0, 2}); });
  none.random = false;
  rows.push_back(none);
  return rows;
}

}  // namespace

std::vector<OpTest> random_rows() {
  std::vector<OpTest> rows = uniform_and_normal_rows();
  for (auto* more : {&integer_and_bernoulli_rows, &multinomial_rows})
    for (OpTest& t : more()) rows.push_back(std::move(t));
  return rows;
}

}  // namespace kiln::optable
