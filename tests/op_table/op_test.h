#pragma once
// The op table: one record per op sample, as PyTorch's OpInfo, and one driver
// (op_table/driver.cpp) that checks each row every way the op must hold. The rows live in
// one file per op family (pointwise.cpp, binary.cpp, normalization.cpp, ...);
// op_table.cpp runs them and checks that every record of kiln::op_records() has a row.
#include <doctest/doctest.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace kiln::optable {

using testing::Tol;
using V = const std::vector<Tensor>&;

// Torch and Kiln evaluate the same formulas in different orders and with different math
// libraries: a few ulps apart, any real bug is far larger. float64: 1e-12 allows a few
// thousand ulps; float32: kTol32 ~ 8 ulps, kTol32Loose for composite ops (norms, rotary).
constexpr Tol kTol64{1e-12, 1e-14};
constexpr Tol kTol32{1e-6, 1e-7};
constexpr Tol kTol32Loose{1e-5, 1e-6};

// A generated input (where no fixture holds one): float64 values of a kind, laid out in
// memory one way, from a seed drawn from the row's name.
enum class Kind {
  Randn,
  Positive,  // |randn| + 0.5: log, sqrt, rsqrt, pow(0.5)
  AwayZero,  // randn pushed at least 0.3 away from 0: abs, relu, division
  Distinct,  // a shuffled grid 0.3 apart, all = 0.05 (mod 0.3): no ties, no kink at 0,
             // none near bounds = 0.2 (mod 0.3) such as -0.4 and 0.5
  Small,     // randn * 1e-3
  Masked,    // randn with the values above 1 set to -inf (softmax masks)
};
enum class Layout {
  Contiguous,
  Transposed,  // the transpose of a contiguous tensor (rank >= 2)
  Stepped,     // every other row of a larger tensor, at an offset
  Permuted,    // a contiguous tensor with its dims reversed (rank >= 2)
  Expanded,    // stride 0 along dim 0
};
struct In {
  Shape shape;
  Kind kind = Kind::Randn;
  Layout layout = Layout::Contiguous;
};
inline In R(const Shape& s) { return {s, Kind::Randn}; }
inline In P(const Shape& s) { return {s, Kind::Positive}; }
inline In Z(const Shape& s) { return {s, Kind::AwayZero}; }
inline In D(const Shape& s) { return {s, Kind::Distinct}; }
inline In Sm(const Shape& s) { return {s, Kind::Small}; }
inline In M(const Shape& s) { return {s, Kind::Masked}; }
inline In T(In in) { in.layout = Layout::Transposed; return in; }
inline In S(In in) { in.layout = Layout::Stepped; return in; }
inline In Pm(In in) { in.layout = Layout::Permuted; return in; }
inline In E(In in) { in.layout = Layout::Expanded; return in; }
inline In T(const Shape& s) { return T(R(s)); }
inline In S(const Shape& s) { return S(R(s)); }
inline In Pm(const Shape& s) { return Pm(R(s)); }

struct ErrorCase {
  std::string what;
  std::function<void()> call;
  std::vector<std::string> message_parts;  // the message starts with the first
};

// One op sample. Written with designated initializers; what a row leaves out is not
// checked (no expected: no forward values; no upstream: no gradient fixtures).
struct OpTest {
  std::string op;      // the record's name (kiln::op_records())
  std::string sample;  // what this row exercises
  // The op on its inputs (constants are captured; a captured tensor follows the inputs'
  // device: x[0].device()).
  std::function<Tensor(V)> fn;
  // Either fixture names with {t} for the dtype tag (f64, f32) ...
  std::vector<std::string> inputs = {};
  std::string expected = {};           // the output's fixture name
  std::string upstream = {};           // g of sum(out * g): a fixture, or a number ("1": sum(out))
  std::vector<std::string> grads = {};  // d/d input of sum(out * g), one per input
  // ... or generated inputs (then there are no fixtures to compare with).
  std::vector<In> made = {};
  std::string file = "llama_ops.txt";  // the fixture file (tests/fixtures)
  std::vector<std::string> tags = {"f64", "f32"};       // the dtypes the fixtures hold
  std::vector<std::string> grad_tags = {"f64", "f32"};  // those with gradient fixtures
  Tol tol64 = kTol64, tol32 = kTol32;
  std::vector<Tol> grad_tol32 = {};  // float32 gradients' own tolerances, one per input (else tol32)
  bool gradcheck = true;  // float64 gradcheck on the inputs ...
  bool strided = true;    // ... and on non-contiguous copies of them
  bool zero_size = true;  // a zero-size first input gives an empty output
  bool cuda = true;       // the CUDA backend against the CPU's (forward and backward)
  double bf16_rtol = 0;   // bfloat16 against float32: |d| <= rtol * max|out| (0: none)
  // bfloat16 against torch's (tests/fixtures/bf16.txt): bit for bit, or within bf16_ulps.
  std::vector<std::string> bf16_inputs = {};
  std::string bf16_expected = {};
  int bf16_ulps = 0;
  std::vector<ErrorCase> errors = {};
  // Values written out (a predicate's bools, from the op's definition, where no fixture
  // holds them): the output must have them exactly, dtype and shape included.
  Tensor want = {};
  // The op's definition by other ops (a fused op's composition, a factory's values): the
  // output, and the gradients of sum(out * g) for a random g, must match the reference's
  // within tol64 / tol32, in every tag. Where reference_forward is false only the
  // gradients must (an op whose forward approximates the reference: quantized_linear's
  // 8-bit activations).
  std::function<Tensor(V)> reference = {};
  bool reference_forward = true;
  // A random op: seeded alike, it draws the same values twice; drawn on, others. (The
  // CUDA check seeds every row alike on both devices: a random op's draws there are the
  // CPU's.)
  bool random = false;
  // What the output must satisfy where its values cannot be written out (a random op's
  // range and statistics, an approximation's bound, a factory's strides): called with
  // the output and the inputs of each tag, the default generator seeded from the row.
  std::function<void(const Tensor& out, V in)> holds = {};
};

using Fn = std::function<Tensor(V)>;

// A row of generated inputs: every check but forward values against fixtures.
inline OpTest made(const std::string& op, const std::string& sample, Fn fn, std::vector<In> in) {
  return {.op = op, .sample = sample, .fn = std::move(fn), .made = std::move(in)};
}

// A bfloat16 row against torch's (bf16.txt, made by make_bf16_fixtures.py): `out` from
// the fixture inputs `in`, within `ulps` (0: bit for bit). The generated rows of the same
// op do its gradchecks.
inline OpTest bf16_row(const std::string& op, const std::string& out, Fn fn, std::vector<std::string> in,
                       int ulps = 0) {
  return {.op = op,
          .sample = "bfloat16 " + out,
          .fn = std::move(fn),
          .tags = {"bf16"},
          .gradcheck = false,
          .zero_size = false,
          .cuda = false,
          .bf16_inputs = std::move(in),
          .bf16_expected = out,
          .bf16_ulps = ulps};
}

// A tensor of a fixture file ("ops_forward.txt"), read once.
Tensor fixture(const std::string& file, const std::string& name);

// What rows capture (class targets, weights), on the device of `like`, the row's first
// input: a tensor of a fixture file, "{t}" in its name taking like's dtype tag (f64,
// f32); int64 indices; values in like's dtype.
Tensor constant_like(const std::string& file, std::string name, const Tensor& like);
Tensor indices_like(const std::vector<int64_t>& v, const Shape& s, const Tensor& like);
Tensor values_like(const std::vector<double>& v, const Shape& s, const Tensor& like);

// A family's rows: those of each part in turn.
std::vector<OpTest> rows_of(std::initializer_list<std::vector<OpTest> (*)()> parts);

// Marks `row` for gradients against torch's: those of sum(out), one fixture per input,
// in the dtypes of `tags`.
OpTest& with_sum_grads(OpTest& row, std::vector<std::string> grads, std::vector<std::string> tags = {"f64"});
// The row of `rows` whose sample is `sample`; throws where none is.
OpTest& row_named(std::vector<OpTest>& rows, const std::string& sample);

// Runs every check of every row, each row as its own SUBCASE.
void run_table(const std::vector<OpTest>& table);

// The families' rows (one file each).
std::vector<OpTest> normalization_rows();
std::vector<OpTest> pointwise_rows();
std::vector<OpTest> binary_rows();
std::vector<OpTest> reduction_rows();
std::vector<OpTest> softmax_rows();
std::vector<OpTest> matmul_rows();
std::vector<OpTest> loss_rows();
std::vector<OpTest> norm_rows();
std::vector<OpTest> structure_rows();
std::vector<OpTest> shape_rows();
std::vector<OpTest> embedding_and_fused_rows();
std::vector<OpTest> attention_rows();
std::vector<OpTest> inplace_rows();
std::vector<OpTest> indexing_rows();
std::vector<OpTest> predicate_rows();
std::vector<OpTest> factory_rows();
std::vector<OpTest> random_rows();
std::vector<OpTest> fused_loss_rows();
std::vector<OpTest> nll_loss_rows();
std::vector<OpTest> elementwise_loss_rows();
std::vector<OpTest> quantized_rows();

}  // namespace kiln::optable
