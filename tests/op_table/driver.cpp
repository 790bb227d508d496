// The op table's driver: every check of a row (op_test.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>

#include "op_table/op_test.h"

namespace kiln::optable {
namespace {

// The script that writes each fixture file.
const std::map<std::string, std::string> kScripts = {
    {"llama_ops.txt", "make_llama_ops_fixtures.py"}, {"ops_forward.txt", "make_op_fixtures.py"},
    {"math_ops.txt", "make_math_fixtures.py"},       {"shape_ops.txt", "make_shape_fixtures.py"},
    {"bf16.txt", "make_bf16_fixtures.py"},           {"index_ops.txt", "make_index_fixtures.py"},
    {"nn_modules.txt", "make_nn_fixtures.py"},
};

// "rms.{t}.x" -> "rms.f64.x"
std::string with_tag(std::string pattern, const std::string& tag) {
  const size_t at = pattern.find("{t}");
  if (at != std::string::npos) pattern.replace(at, 3, tag);
  return pattern;
}

DType dtype_of(const std::string& tag) { return tag == "f32" ? kFloat32 : kFloat64; }

// A row's seed: the same row draws the same values on every run.
uint64_t seed_of(const OpTest& t) {
  uint64_t h = 1469598103934665603ull;
  for (char c : t.op + "/" + t.sample) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h % 1000000007ull;
}

// The contiguous float64 values a layout is cut from, on the CPU.
Tensor base_values(const In& in, uint64_t seed) {
  Shape s = in.shape;
  switch (in.layout) {
    case Layout::Contiguous: break;
    case Layout::Transposed: std::swap(s[s.size() - 1], s[s.size() - 2]); break;
    case Layout::Stepped: s[0] = 2 * s[0] + 1; break;
    case Layout::Permuted: s = Shape(in.shape.rbegin(), in.shape.rend()); break;
    case Layout::Expanded: s[0] = 1; break;
  }
  Generator g(seed);
  const TensorOptions f64(kFloat64);
  switch (in.kind) {
    case Kind::Randn: return randn(s, f64, &g);
    case Kind::Small: return randn(s, f64, &g) * 1e-3;
    case Kind::Positive: return randn(s, f64, &g).abs() + 0.5;
    case Kind::AwayZero: {
      const Tensor r = randn(s, f64, &g);
      return r + sign(r) * 0.3;
    }
    case Kind::Masked: {
      const Tensor r = randn(s, f64, &g);
      return masked_fill(r, gt(r, 1.0), -INFINITY);
    }
    case Kind::Distinct: {
      const int64_t n = shape_numel(s);
      std::vector<double> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i - n / 2) * 0.3 + 0.05;
      std::mt19937_64 rng(seed);
      std::shuffle(v.begin(), v.end(), rng);
      return from_vector<double>(v, s);
    }
  }
  return Tensor();
}

// The view of `base` (on any device) that has in's layout.
Tensor apply_layout(const Tensor& base, const In& in) {
  switch (in.layout) {
    case Layout::Contiguous: return base;
    case Layout::Transposed: return base.transpose(-1, -2);
    case Layout::Stepped: return base.slice(0, 1, base.size(0), 2);
    case Layout::Permuted: {
      std::vector<int64_t> dims(in.shape.size());
      std::iota(dims.rbegin(), dims.rend(), 0);
      return base.permute(dims);
    }
    case Layout::Expanded: return base.expand(in.shape);
  }
  return base;
}

// The row's inputs in the dtype of `tag`, on `device`, with their layouts.
std::vector<Tensor> inputs_of(const OpTest& t, const std::string& tag, const Device& device = kCPU) {
  std::vector<Tensor> v;
  for (const std::string& name : t.inputs) v.push_back(fixture(t.file, with_tag(name, tag)).to(device));
  const uint64_t seed = seed_of(t);
  for (size_t i = 0; i < t.made.size(); ++i) {
    const Tensor base = base_values(t.made[i], seed + 16 * i).to(dtype_of(tag)).to(device);
    const Tensor x = apply_layout(base, t.made[i]);
    REQUIRE(x.shape() == t.made[i].shape);
    if (t.made[i].layout != Layout::Contiguous) REQUIRE_FALSE(x.is_contiguous());
    v.push_back(x);
  }
  return v;
}

std::string name_of(const OpTest& t) { return t.op + " " + t.sample; }

void check_forward_and_grads(const OpTest& t) {
  if (t.expected.empty() && t.upstream.empty() && !t.want.defined()) return;
  for (const std::string& tag : t.tags) {
    CAPTURE(tag);
    const Tensor expected = t.expected.empty() ? Tensor() : fixture(t.file, with_tag(t.expected, tag));
    const Tol tol = (expected.defined() ? expected.dtype() : dtype_of(tag)) == kFloat64 ? t.tol64 : t.tol32;
    std::vector<Tensor> leaves;
    const bool grads = !t.upstream.empty() && std::count(t.grad_tags.begin(), t.grad_tags.end(), tag) > 0;
    for (const Tensor& x : inputs_of(t, tag)) leaves.push_back(grads ? x.detach().clone().requires_grad_() : x);
    const Tensor out = t.fn(leaves);
    if (expected.defined()) testing::check_matches(name_of(t) + " " + tag, out, expected, tol);
    if (t.want.defined()) testing::check_matches(name_of(t) + " " + tag, out, t.want, {0, 0});
    if (!grads) continue;
    // A number ("1", "0.75") is a constant g; anything else names a fixture.
    const bool constant = t.upstream.find_first_not_of("0123456789.-") == std::string::npos;
    if (constant) mul(out, std::stod(t.upstream)).sum().backward();
    else mul(out, fixture(t.file, with_tag(t.upstream, tag))).sum().backward();
    for (size_t i = 0; i < t.grads.size(); ++i)
      testing::check_matches(name_of(t) + " grad " + std::to_string(i) + " " + tag, leaves[i].grad(),
                             fixture(t.file, with_tag(t.grads[i], tag)),
                             tag == "f32" && i < t.grad_tol32.size() ? t.grad_tol32[i] : tol);
  }
}

// float64 central differences with gradcheck's default tolerances (never loosened), on
// the row's inputs and on transposed copies of them (the same values, other strides).
void check_gradcheck(const OpTest& t) {
  if (!t.gradcheck) return;
  const std::vector<Tensor> x = inputs_of(t, "f64");
  std::vector<Tensor> leaves, strided;
  for (size_t i = 0; i < x.size(); ++i) {
    const Tensor& v = x[i];
    // A stride-0 leaf would be perturbed at every place it is read from at once.
    const bool expanded = i >= t.inputs.size() && t.made[i - t.inputs.size()].layout == Layout::Expanded;
    leaves.push_back((expanded ? v.contiguous() : v).detach().requires_grad_());
    Tensor s = v.dim() >= 2 ? v.transpose(-1, -2).contiguous().transpose(-1, -2) : v.clone();
    if (v.dim() >= 2 && v.size(-1) > 1 && v.size(-2) > 1) REQUIRE_FALSE(s.is_contiguous());
    strided.push_back(s.detach().requires_grad_());
  }
  {
    EnableGradGuard grad_on;
    REQUIRE_MESSAGE(t.fn(leaves).requires_grad(), name_of(t), ": records nothing, so gradcheck checks nothing");
  }
  GradcheckOptions opts;
  opts.raise_exception = false;
  for (const auto* in : {&leaves, &strided}) {
    if (in == &strided && !t.strided) continue;
    const GradcheckResult r = gradcheck_result(t.fn, *in, opts);
    CHECK_MESSAGE(r.ok, name_of(t), std::string(in == &leaves ? "" : " (non-contiguous)"), ": ", r.message);
  }
}

void check_bf16(const OpTest& t) {
  if (t.bf16_rtol == 0) return;
  const std::vector<Tensor> x32 = inputs_of(t, "f32");
  std::vector<Tensor> x16;
  for (const Tensor& v : x32) x16.push_back(v.to(kBFloat16));
  const Tensor out16 = t.fn(x16);
  CHECK(out16.dtype() == kBFloat16);
  std::vector<Tensor> rounded;  // float32 on the bfloat16 inputs: only the op's own rounding differs
  for (const Tensor& v : x16) rounded.push_back(v.to(kFloat32));
  const Tensor ref = t.fn(rounded);
  const double scale = ref.abs().max().item();
  const double diff = (out16.to(kFloat32) - ref).abs().max().item();
  CHECK_MESSAGE(diff <= t.bf16_rtol * scale, name_of(t), " bf16: max |diff| ", diff, " > ", t.bf16_rtol, " * ",
                scale);
}

bool is_nan_bits(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// The distance in bfloat16 steps between two finite values (or equal infinities): the
// bits as a line of ordered integers, -0 and +0 both at 0.
int64_t ulps_between(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t v) -> int64_t { return (v & 0x8000) ? -int64_t(v & 0x7FFF) : int64_t(v); };
  return std::abs(ordered(a) - ordered(b));
}

// bfloat16 against torch's bfloat16 (tests/fixtures/bf16.txt): within bf16_ulps, bit for
// bit at 0 (-0 and +0 told apart). A NaN must meet a NaN, of any payload: torch's own
// scalar and vector conversions give different NaN bits.
void check_bf16_torch(const OpTest& t) {
  if (t.bf16_expected.empty()) return;
  std::vector<Tensor> x;
  for (const std::string& name : t.bf16_inputs) x.push_back(fixture("bf16.txt", name));
  const Tensor got = t.fn(x), ref = fixture("bf16.txt", t.bf16_expected);
  const std::string what = name_of(t) + " bf16 (" + t.bf16_expected + ")";
  REQUIRE_MESSAGE(got.defined(), what);
  if (ref.dtype() != kBFloat16) {  // a comparison's bools: exactly
    testing::check_matches(what, got, ref, {0, 0});
    return;
  }
  CHECK_MESSAGE(got.dtype() == kBFloat16, what << ": dtype " << std::string(dtype_name(got.dtype())));
  CHECK_MESSAGE(ref.dtype() == kBFloat16, what << ": the fixture's dtype is " << std::string(dtype_name(ref.dtype())));
  REQUIRE_MESSAGE(got.shape() == ref.shape(),
                  what << ": shape " << shape_str(got.shape()) << ", torch gives " << shape_str(ref.shape()));
  std::vector<uint16_t> g, r;
  for (bfloat16 v : got.to_vector<bfloat16>()) g.push_back(v.bits);
  for (bfloat16 v : ref.to_vector<bfloat16>()) r.push_back(v.bits);
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (is_nan_bits(r[i]) || is_nan_bits(g[i])) ok = is_nan_bits(r[i]) && is_nan_bits(g[i]);
    else if (t.bf16_ulps == 0) ok = g[i] == r[i];
    else ok = ulps_between(g[i], r[i]) <= t.bf16_ulps && ((g[i] & 0x7F80) != 0x7F80) == ((r[i] & 0x7F80) != 0x7F80);
    if (!ok && bad++ == 0)
      first = "element " + std::to_string(i) + ": " + std::to_string(float_from_bf16_bits(g[i])) + " vs torch " +
              std::to_string(float_from_bf16_bits(r[i]));
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << g.size() << " elements differ; first " << first);
}

// The same op on a first input (the data; the rest are parameters) with a zero-size
// leading dim, and every input of its rank and leading size (the data's other operands)
// with it: the output has no elements either.
void check_zero_size(const OpTest& t) {
  if (!t.zero_size) return;
  std::vector<Tensor> x = inputs_of(t, t.tags[0]);
  if (x.empty() || x[0].dim() < 2) return;
  const int64_t rank = x[0].dim(), rows = x[0].size(0);
  for (Tensor& v : x)
    if (v.dim() == rank && v.size(0) == rows) v = v.narrow(0, 0, 0);
  const Tensor out = t.fn(x);
  CHECK_MESSAGE(out.numel() == 0, name_of(t), ": a zero-size input gives ", out.numel(), " elements");
}

// The CUDA backend against the CPU's, in float64 and float32 from the same values with
// the same strides: forward, then the same random gradient back through both.
void check_cuda(const OpTest& t) {
  const std::optional<Device> gpu = testing::cuda_test_device();
  if (!t.cuda || !gpu) return;
  for (const std::string& tag : t.tags) {
    CAPTURE(tag);
    std::vector<Tensor> cpu_in = inputs_of(t, tag), gpu_in = inputs_of(t, tag, *gpu);
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      REQUIRE(gpu_in[i].strides() == cpu_in[i].strides());
      const bool grad = is_floating(cpu_in[i].dtype());
      cpu_in[i] = cpu_in[i].detach().requires_grad_(grad);
      gpu_in[i] = gpu_in[i].detach().requires_grad_(grad);
    }
    // A random op draws from the default generator: seeded alike on both devices.
    manual_seed(seed_of(t));
    const Tensor want = t.fn(cpu_in);
    manual_seed(seed_of(t));
    const Tensor got = t.fn(gpu_in);
    CHECK(got.device() == *gpu);
    testing::check_same_as_cpu(name_of(t) + " cuda forward", got, want);
    if (!want.requires_grad()) continue;
    Generator g(seed_of(t) + 99);
    const Tensor upstream = randn(want.shape(), TensorOptions(kFloat64), &g).to(want.dtype());
    want.backward(upstream);
    got.backward(upstream.to(*gpu));
    for (size_t i = 0; i < cpu_in.size(); ++i) {
      testing::check_same_as_cpu(name_of(t) + " cuda gradient of input " + std::to_string(i), gpu_in[i].grad(), cpu_in[i].grad());
      if (gpu_in[i].grad().defined()) CHECK(gpu_in[i].grad().device() == *gpu);
    }
  }
}

// The row's inputs for a check that records gradients: fresh leaves, floating ones
// requiring grad.
std::vector<Tensor> leaves_of(const std::vector<Tensor>& x) {
  std::vector<Tensor> v;
  for (const Tensor& e : x) v.push_back(e.detach().clone().requires_grad_(is_floating(e.dtype())));
  return v;
}

void check_reference(const OpTest& t) {
  if (!t.reference) return;
  for (const std::string& tag : t.tags) {
    CAPTURE(tag);
    const Tol tol = dtype_of(tag) == kFloat64 ? t.tol64 : t.tol32;
    const std::vector<Tensor> x = inputs_of(t, tag), a = leaves_of(x), b = leaves_of(x);
    const Tensor got = t.fn(a), want = t.reference(b);
    if (t.reference_forward) testing::check_matches(name_of(t) + " against its reference " + tag, got, want, tol);
    REQUIRE_MESSAGE(got.shape() == want.shape(), name_of(t), ": shape ", shape_str(got.shape()), ", the reference's ",
                    shape_str(want.shape()));
    if (!want.requires_grad()) continue;
    REQUIRE_MESSAGE(got.requires_grad(), name_of(t), ": records no gradient where its reference does");
    Generator g(seed_of(t) + 7);
    const Tensor upstream = randn(want.shape(), TensorOptions(kFloat64), &g).to(want.dtype());
    got.backward(upstream);
    want.backward(upstream);
    for (size_t i = 0; i < x.size(); ++i) {
      if (!a[i].grad().defined() && !b[i].grad().defined()) continue;
      testing::check_matches(name_of(t) + " gradient of input " + std::to_string(i) + " against its reference " + tag,
                             a[i].grad(), b[i].grad(), tol);
    }
  }
}

void check_random(const OpTest& t) {
  if (!t.random) return;
  const std::vector<Tensor> x = inputs_of(t, t.tags[0]);
  manual_seed(seed_of(t));
  const Tensor a = t.fn(x);
  manual_seed(seed_of(t));
  CHECK_MESSAGE(equal(a, t.fn(x)), name_of(t), ": the same seed drew other values");
  CHECK_MESSAGE(!equal(a, t.fn(x)), name_of(t), ": drawn again, the same values (the generator did not move on)");
}

// Seeded from the row: statistics that hold at that seed hold on every run.
void check_holds(const OpTest& t) {
  if (!t.holds) return;
  for (const std::string& tag : t.tags) {
    CAPTURE(tag);
    const std::vector<Tensor> x = inputs_of(t, tag);
    manual_seed(seed_of(t));
    t.holds(t.fn(x), x);
  }
}

void check_errors(const OpTest& t) {
  for (const ErrorCase& e : t.errors) {
    const std::string msg = testing::error_of(e.call);
    INFO(t.op, ": ", e.what, ": ", msg);
    REQUIRE(!e.message_parts.empty());
    CHECK_MESSAGE(msg.rfind(e.message_parts[0], 0) == 0, "message does not start with ", e.message_parts[0]);
    for (const std::string& part : e.message_parts) CHECK_MESSAGE(msg.find(part) != std::string::npos, "lacks ", part);
  }
}

}  // namespace

Tensor fixture(const std::string& file, const std::string& name) {
  static std::map<std::string, std::unique_ptr<testing::FixtureFile>> files;
  auto it = files.find(file);
  if (it == files.end()) {
    const auto script = kScripts.find(file);
    REQUIRE_MESSAGE(script != kScripts.end(), "no script known for fixture file ", file);
    it = files.emplace(file, std::make_unique<testing::FixtureFile>(file, script->second)).first;
  }
  return it->second->get(name);
}

Tensor constant_like(const std::string& file, std::string name, const Tensor& like) {
  const size_t at = name.find("{t}");
  if (at != std::string::npos) name.replace(at, 3, like.dtype() == kFloat64 ? "f64" : "f32");
  return fixture(file, name).to(like.device());
}

Tensor indices_like(const std::vector<int64_t>& v, const Shape& s, const Tensor& like) {
  return from_vector<int64_t>(v, s).to(like.device());
}

Tensor values_like(const std::vector<double>& v, const Shape& s, const Tensor& like) {
  return from_vector<double>(v, s).to(like.dtype()).to(like.device());
}

std::vector<OpTest> rows_of(std::initializer_list<std::vector<OpTest> (*)()> parts) {
  std::vector<OpTest> rows;
  for (auto* part : parts)
    for (OpTest& t : part()) rows.push_back(std::move(t));
  return rows;
}

OpTest& with_sum_grads(OpTest& row, std::vector<std::string> grads, std::vector<std::string> tags) {
  row.upstream = "1";
  row.grads = std::move(grads);
  row.grad_tags = std::move(tags);
  return row;
}

OpTest& row_named(std::vector<OpTest>& rows, const std::string& sample) {
  for (OpTest& r : rows)
    if (r.sample == sample) return r;
  throw std::logic_error("op table: no row named '" + sample + "'");
}

void run_table(const std::vector<OpTest>& table) {
  std::set<std::string> records, names;
  for (const OpRecord& r : op_records()) records.insert(r.name);
  for (const OpTest& t : table) {
    CHECK_MESSAGE(names.insert(name_of(t)).second, "two rows named ", name_of(t));
    SUBCASE(name_of(t).c_str()) {
      REQUIRE_MESSAGE(records.count(t.op) == 1, t.op, " has no record in core/op_records.inc");
      REQUIRE_MESSAGE((t.inputs.empty() || t.made.empty()), name_of(t), ": fixture inputs or made ones, not both");
      // Each check on its own: a row that throws in one still runs the others (and the
      // table goes on to the next row).
      for (auto* check : {&check_forward_and_grads, &check_gradcheck, &check_bf16, &check_bf16_torch, &check_zero_size,
                          &check_cuda, &check_reference, &check_random, &check_holds, &check_errors}) {
        try {
          check(t);
        } catch (const std::exception& e) {
          FAIL_CHECK(name_of(t) << ": threw " << std::string(e.what()));
        }
      }
    }
  }
}

}  // namespace kiln::optable
