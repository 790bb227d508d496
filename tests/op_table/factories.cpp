// Rows of the factories (empty, zeros, ones, full and their _like forms, arange, eye,
// scalar_tensor, tensor): their values written out, with dtype and shape. A factory row
// takes one input only for its device (the CUDA check makes it on the GPU), and its
// dtype where the row says "in the input's dtype".
#include "op_table/op_test.h"

namespace kiln::optable {
namespace {


// The options of a factory row: the input's device, and dtype `d` (float32 by default, as
// torch's default dtype).
TensorOptions on(V x, DType d = kFloat32) { return TensorOptions(d).device(x[0].device()); }
// The input's dtype and device.
TensorOptions like(V x) { return on(x, x[0].dtype()); }

Tensor f32(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s, kFloat32); }
Tensor f64(const std::vector<double>& v, const Shape& s) { return from_vector<double>(v, s, kFloat64); }
Tensor i64(const std::vector<int64_t>& v, const Shape& s) { return from_vector<int64_t>(v, s); }

// A row whose output is `want` exactly (dtype and shape included).
OpTest exact(const std::string& op, const std::string& sample, Fn fn, Tensor want) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .made = {R({1})},
          .tags = {"f64"},
          .gradcheck = false,
          .want = std::move(want)};
}

// A row in the input's dtype (float64 and float32), against values made another way.
OpTest in_dtype(const std::string& op, const std::string& sample, Fn fn, Fn reference, In in = R({1})) {
  return {.op = op,
          .sample = sample,
          .fn = std::move(fn),
          .made = {in},
          .gradcheck = false,
          .reference = std::move(reference)};
}

// A fresh tensor's layout: contiguous, row-major strides, no gradient.
void check_fresh(const Tensor& out, const Shape& shape, DType dtype) {
  CHECK(out.shape() == shape);
  CHECK(out.dtype() == dtype);
  CHECK(out.is_contiguous());
  CHECK(out.strides() == contiguous_strides(shape));
  CHECK(out.numel() == shape_numel(shape));
  CHECK(out.dim() == static_cast<int64_t>(shape.size()));
  CHECK(out.element_size() == dtype_size(dtype));
  CHECK_FALSE(out.requires_grad());
}

std::vector<OpTest> fill_rows() {
  std::vector<OpTest> rows;
  // Uninitialised values: the layout only.
  OpTest e = exact("empty", "(2, 3)", [](V x) { return empty({2, 3}, on(x)); }, Tensor());
  e.holds = [](const Tensor& out, V) { check_fresh(out, {2, 3}, kFloat32); };
  e.cuda = false;
  e.errors = {{"a negative size", [] { (void)zeros({2, -1}); }, {"[empty]", "(2, -1)"}}};
  rows.push_back(e);
  OpTest e64 = exact("empty", "(4,) float64", [](V x) { return empty({4}, on(x, kFloat64)); }, Tensor());
  e64.holds = [](const Tensor& out, V) { check_fresh(out, {4}, kFloat64); };
  e64.cuda = false;
  rows.push_back(e64);

  OpTest z = exact("zeros", "(2, 3)", [](V x) { return zeros({2, 3}, on(x)); }, f32({0, 0, 0, 0, 0, 0}, {2, 3}));
  z.holds = [](const Tensor& out, V) {
    check_fresh(out, {2, 3}, kFloat32);
    CHECK(out.strides() == Strides{3, 1});
  };
  rows.push_back(z);
  rows.push_back(exact("zeros", "(0, 3)", [](V x) { return zeros({0, 3}, on(x)); }, f32({}, {0, 3})));
  rows.push_back(exact("zeros", "0-d", [](V x) { return zeros({}, on(x)); }, f32({0}, {})));

  rows.push_back(exact("ones", "(4,) int64", [](V x) { return ones({4}, on(x, kInt64)); }, i64({1, 1, 1, 1}, {4})));
  rows.push_back(exact("ones", "(2,) bool", [](V x) { return ones({2}, on(x, kBool)); },
                       from_vector<bool>({true, true}, {2})));
  rows.push_back(exact("ones", "(2, 1, 2)", [](V x) { return ones({2, 1, 2}, on(x)); }, f32({1, 1, 1, 1}, {2, 1, 2})));

  OpTest f = exact("full", "(2, 2) float64", [](V x) { return full({2, 2}, 2.5, on(x, kFloat64)); },
                   f64({2.5, 2.5, 2.5, 2.5}, {2, 2}));
  f.holds = [](const Tensor& out, V) { check_fresh(out, {2, 2}, kFloat64); };
  rows.push_back(f);
  rows.push_back(exact("full", "int64 truncates", [](V x) { return full({3}, 7.9, on(x, kInt64)); }, i64({7, 7, 7}, {3})));

  // The _like forms follow the input's shape, dtype and device, whatever its strides.
  for (const In& in : {R({2, 3}), T({2, 3}), S({3, 2})}) {
    const std::string layout = in.layout == Layout::Contiguous ? "" : in.layout == Layout::Transposed ? ", transposed" : ", stepped";
    rows.push_back(in_dtype("zeros_like", "of " + shape_str(in.shape) + layout, [](V x) { return zeros_like(x[0]); },
                            [](V x) { return mul(x[0].detach(), 0.0); }, in));
    rows.push_back(in_dtype("ones_like", "of " + shape_str(in.shape) + layout, [](V x) { return ones_like(x[0]); },
                            [](V x) { return add(mul(x[0].detach(), 0.0), 1.0); }, in));
    rows.push_back(in_dtype("full_like", "-1 of " + shape_str(in.shape) + layout,
                            [](V x) { return full_like(x[0], -1); },
                            [](V x) { return add(mul(x[0].detach(), 0.0), -1.0); }, in));
    OpTest el = in_dtype("empty_like", "of " + shape_str(in.shape) + layout, [](V x) { return empty_like(x[0]); },
                         Fn(), in);
    el.cuda = false;  // uninitialised values: nothing to compare (holds checks the device)
    el.holds = [](const Tensor& out, V x) {
      CHECK(out.shape() == x[0].shape());
      CHECK(out.dtype() == x[0].dtype());
      CHECK(out.device() == x[0].device());
    };
    rows.push_back(el);
  }
  OpTest fl = in_dtype("full_like", "int64 input", [](V x) { return full_like(x[0].to(kInt64), 2.0); },
                       [](V x) { return add(mul(x[0].to(kInt64), 0.0), 2.0); }, R({3}));
  fl.tags = {"f64"};
  rows.push_back(fl);
  return rows;
}

std::vector<OpTest> range_rows() {
  std::vector<OpTest> rows;
  rows.push_back(exact("arange", "(5)", [](V x) { return arange(5, on(x, kInt64)); }, i64({0, 1, 2, 3, 4}, {5})));
  rows.push_back(exact("arange", "(5), default int64", [](V) { return arange(5); }, i64({0, 1, 2, 3, 4}, {5})));
  rows.back().cuda = false;  // on the CPU by default
  rows.push_back(exact("arange", "(2, 9, 3)", [](V x) { return arange(2, 9, 3, on(x, kInt64)); }, i64({2, 5, 8}, {3})));
  rows.push_back(exact("arange", "(0, 1, 0.25) float32", [](V x) { return arange(0, 1, 0.25, on(x)); },
                       f32({0, 0.25, 0.5, 0.75}, {4})));
  // ceil((end - start) / step) elements, as torch.arange, each start + i * step.
  rows.push_back(exact("arange", "(1, 2, 0.3) float64", [](V x) { return arange(1, 2, 0.3, on(x, kFloat64)); },
                       f64({1, 1 + 0.3, 1 + 0.3 * 2, 1 + 0.3 * 3}, {4})));
  rows.push_back(exact("arange", "(5, 0, -1.5) float32", [](V x) { return arange(5, 0, -1.5, on(x)); },
                       f32({5, 3.5, 2, 0.5}, {4})));
  rows.push_back(exact("arange", "(3, 3): empty", [](V x) { return arange(3, 3, 1, on(x, kInt64)); }, i64({}, {0})));
  rows.push_back(in_dtype("arange", "(-3, 7.5, 0.7) in the input's dtype",
                          [](V x) { return arange(-3, 7.5, 0.7, like(x)); },
                          [](V x) {
                            // (7.5 + 3) / 0.7 is 15.000000000000002 in float64: 16 values, as torch.
                            std::vector<double> v;
                            for (int i = 0; i < 16; ++i) v.push_back(-3 + 0.7 * i);
                            return from_vector<double>(v, {16}, x[0].dtype());
                          }));
  rows[0].errors = {
      {"step 0", [] { (void)arange(0, 10, 0); }, {"[arange]", "step"}},
      {"a step away from end", [] { (void)arange(0, 10, -1); }, {"[arange]", "start 0", "end 10", "step -1"}},
  };

  rows.push_back(exact("eye", "(3)", [](V x) { return eye(3, on(x)); }, f32({1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3})));
  rows.back().errors = {{"n = -1", [] { (void)eye(-1); }, {"[eye]", "-1"}}};
  rows.push_back(exact("eye", "(2, 3)", [](V x) { return eye(2, 3, on(x)); }, f32({1, 0, 0, 0, 1, 0}, {2, 3})));
  rows.push_back(exact("eye", "(3, 2) int64", [](V x) { return eye(3, 2, on(x, kInt64)); },
                       i64({1, 0, 0, 1, 0, 0}, {3, 2})));
  rows.push_back(exact("eye", "(0)", [](V x) { return eye(0, on(x)); }, f32({}, {0, 0})));
  return rows;
}

std::vector<OpTest> literal_rows() {
  std::vector<OpTest> rows;
  rows.push_back(exact("scalar_tensor", "3.5", [](V x) { return scalar_tensor(3.5, on(x)); }, f32({3.5}, {})));
  rows.push_back(exact("scalar_tensor", "2 int64", [](V x) { return scalar_tensor(2, on(x, kInt64)); }, i64({2}, {})));
  rows.push_back(exact("tensor", "a list of floats: float32", [](V) { return tensor({1.0, 2.0, 3.0}); },
                       f32({1, 2, 3}, {3})));
  rows.push_back(exact("tensor", "nested (3, 2)", [](V) { return tensor({{1.0, 2.0}, {3.0, 4.0}, {5.0, 6.0}}); },
                       f32({1, 2, 3, 4, 5, 6}, {3, 2})));
  rows.push_back(exact("tensor", "int64 (1, 2)", [](V) { return tensor({{1, 2}}, kInt64); }, i64({1, 2}, {1, 2})));
  for (size_t i = rows.size() - 3; i < rows.size(); ++i) rows[i].cuda = false;  // on the CPU by default
  rows.back().errors = {{"ragged", [] { (void)tensor({{1, 2}, {3}}); }, {"[tensor]", "2", "1"}}};
  return rows;
}

}  // namespace

std::vector<OpTest> factory_rows() {
  std::vector<OpTest> rows = fill_rows();
  for (auto* more : {&range_rows, &literal_rows})
    for (OpTest& t : more()) rows.push_back(std::move(t));
  return rows;
}

}  // namespace kiln::optable
