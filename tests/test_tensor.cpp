// Tensors: factories, dtypes, views and printing; comparison and in-place operators,
// in-place ops under autograd with torch's rules (recorded on the graph, views rebased,
// saved tensors checked, leaves protected), tensor literals, single int dims and printing
// shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/philox_batch.h"
#include "backend/cuda/fast_div.h"
#include "ops/op_helpers.h"
#include "test_util.h"

// ------------------------------------------------------------------ printing shapes
// Code outside namespace kiln, without `using namespace kiln`, with an operator<< of its
// own that hides every other by ordinary lookup: Shape's must still be found.
namespace user_code {
struct Other {};
inline std::ostream& operator<<(std::ostream& os, Other) { return os << "other"; }
inline std::string print_sizes(const kiln::Tensor& x) {
  std::ostringstream os;
  os << x.sizes() << ' ' << Other{};
  return os.str();
}
}  // namespace user_code

using namespace kiln;
using kiln::testing::error_of;

namespace {

std::vector<double> vec(const Tensor& t) { return t.to_vector<double>(); }

TensorOptions f64_grad() { return TensorOptions(kFloat64).requires_grad(); }

// A float64 leaf with the given values and shape.
Tensor leaf(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape, f64_grad()); }

}  // namespace

TEST_CASE("views share storage with their base") {
  Tensor a = arange(0, 6, 1, kFloat32).reshape({2, 3});
  Tensor t = a.t();
  CHECK(t.same_storage(a));
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.at({2, 1}) == 5.0);
  Tensor b = a.clone();
  a.set({0, 0}, 42.0);
  CHECK(t.at({0, 0}) == 42.0);
  CHECK(b.at({0, 0}) == 0.0);
}

// ---------------------------------------------------------------- factories

TEST_CASE("from_vector: its values, in the given shape and dtype") {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(a.dtype() == kFloat32);
  CHECK(a.shape() == Shape{2, 3});
  CHECK(a.at({1, 0}) == 4.0);
  Tensor b = from_vector<int64_t>({7, 8}, {2});
  CHECK(b.dtype() == kInt64);
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{7, 8});
  Tensor c = from_vector<double>({1.5, 2.5}, {2, 1}, kFloat32);  // converted
  CHECK(c.dtype() == kFloat32);
  CHECK(vec(c) == std::vector<double>{1.5, 2.5});
  Tensor bl = from_vector<bool>({true, false, true}, {3});
  CHECK(bl.dtype() == kBool);
  CHECK(bl.to_vector<bool>() == std::vector<bool>{true, false, true});
  Tensor s = from_vector<float>({9}, {});
  CHECK(s.dim() == 0);
  CHECK(s.item() == 9.0);
}

// ---------------------------------------------------------------- random

TEST_CASE("random: the same seed gives the same numbers, a different one differs") {
  manual_seed(1234);
  Tensor a = rand({1000});
  Tensor an = randn({1000});
  manual_seed(1234);
  Tensor b = rand({1000});
  Tensor bn = randn({1000});
  CHECK(equal(a, b));
  CHECK(equal(an, bn));
  CHECK_FALSE(equal(a, rand({1000})));  // the generator moved on

  Generator g1(7), g1b(7), g2(8);
  CHECK(equal(randn({64}, {}, &g1), randn({64}, {}, &g1b)));
  CHECK(equal(randint(0, 1000, {64}, kInt64, &g1), randint(0, 1000, {64}, kInt64, &g1b)));
  CHECK(equal(bernoulli({64}, 0.5, {}, &g1), bernoulli({64}, 0.5, {}, &g1b)));
  Generator g1c(7);
  CHECK_FALSE(equal(randn({64}, {}, &g1c), randn({64}, {}, &g2)));
  Generator g3(7), g4(8);
  CHECK_FALSE(equal(randint(0, 1000, {64}, kInt64, &g3), randint(0, 1000, {64}, kInt64, &g4)));

  // A saved state replays.
  Generator g(99);
  GeneratorState st = g.get_state();
  Tensor first = rand({10}, kFloat64, &g);
  g.set_state(st);
  CHECK(equal(first, rand({10}, kFloat64, &g)));
  g.manual_seed(99);
  CHECK(equal(first, rand({10}, kFloat64, &g)));
}

TEST_CASE("float32 rand is the Philox word stream: element i is word i % 4 of block i / 4") {
  // The batched, vectorized Philox of the fill kernels against the one-block reference.
  for (uint64_t seed : {uint64_t{0}, uint64_t{0x1234567890abcdefULL}}) {
    Generator g(seed);
    g.reserve((uint64_t{1} << 32) - 5);  // counters that carry into the high word
    const uint64_t block = g.get_state().offset;
    std::vector<float> v = rand({301}, kFloat32, &g).to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t word = philox4x32(seed, block + i / 4)[i % 4];
      bad += v[i] != uniform_float(word);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("every Philox path this CPU can run gives the one-block reference's words") {
  using kiln::cpu::PhiloxPath;
  int paths_run = 0;
  for (PhiloxPath path : {PhiloxPath::kPortable, PhiloxPath::kAvx2, PhiloxPath::kAvx512}) {
    if (!kiln::cpu::philox_path_available(path)) {
      uint32_t w[4 * kiln::cpu::kPhiloxBatch];
      CHECK_ERROR_STARTS("[philox_batch]", kiln::cpu::philox_batch_with(path, 0, 0, w), "is not available");
      continue;
    }
    ++paths_run;
    // Counters that carry into the high word, and a key with both halves set.
    for (uint64_t seed : {uint64_t{0}, uint64_t{0x1234567890abcdefULL}}) {
      for (uint64_t first : {uint64_t{0}, (uint64_t{1} << 32) - 7, uint64_t{0xfffffffffffffff0ULL}}) {
        uint32_t w[4 * kiln::cpu::kPhiloxBatch];
        kiln::cpu::philox_batch_with(path, seed, first, w);
        int bad = 0;
        for (int b = 0; b < kiln::cpu::kPhiloxBatch; ++b) {
          const std::array<uint32_t, 4> ref = philox4x32(seed, first + static_cast<uint64_t>(b));
          for (int k = 0; k < 4; ++k) bad += w[4 * b + k] != ref[static_cast<size_t>(k)];
        }
        CHECK_MESSAGE(bad == 0, "path ", static_cast<int>(path), " seed ", seed, " first ", first);
      }
    }
  }
  CHECK(paths_run >= 1);
}

TEST_CASE("random numbers do not depend on the thread count") {
  int threads = get_num_threads();
  Generator g1(5), g2(5);
  set_num_threads(1);
  Tensor a = randn({200000}, {}, &g1);
  set_num_threads(std::max(2, threads));
  Tensor b = randn({200000}, {}, &g2);
  set_num_threads(threads);
  CHECK(equal(a, b));
}

// ---------------------------------------------------------------- dtypes

TEST_CASE("dtype conversions") {
  Tensor f = tensor({1.7, -1.7, 2.5, -0.2, 0});
  Tensor i = f.to(kInt64);
  CHECK(i.dtype() == kInt64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 2, 0, 0});  // truncation
  Tensor b = tensor({0, 0.5, -2, std::nan("")}).to(kBool);
  CHECK(b.dtype() == kBool);
  CHECK(b.to_vector<bool>() == std::vector<bool>{false, true, true, true});
  CHECK(i.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, true, false, false});
  CHECK(vec(b.to(kFloat32)) == std::vector<double>{0, 1, 1, 1});
  CHECK(vec(i.to(kFloat64)) == std::vector<double>{1, -1, 2, 0, 0});
  Tensor d = f.to(kFloat64);
  CHECK(d.dtype() == kFloat64);
  CHECK(d.at({0}) == static_cast<double>(1.7f));
  // to() of the same dtype is the same tensor; a conversion is a copy.
  CHECK(f.to(kFloat32).same_storage(f));
  CHECK_FALSE(d.same_storage(f));
  // Large values survive int64 <-> float64.
  Tensor big = from_vector<int64_t>({(int64_t{1} << 52) + 1}, {1});
  CHECK(big.to(kFloat64).to(kInt64).to_vector<int64_t>()[0] == (int64_t{1} << 52) + 1);
  // to_vector converts to the asked type.
  CHECK(tensor({1.9, -2.9}).to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  CHECK(dtype_name(kFloat32) == std::string("float32"));
  CHECK(promote_types(kInt64, kFloat32) == kFloat32);
  CHECK(promote_types(kBool, kInt64) == kInt64);
  CHECK(promote_types(kFloat64, kFloat32) == kFloat64);
  CHECK((ones({2}, kInt64) + ones({2})).dtype() == kFloat32);
  CHECK((ones({2}, kInt64) * 2.5).dtype() == kFloat32);
  CHECK((ones({2}, kInt64) * 2.0).dtype() == kInt64);
  CHECK((ones({2}, kInt64) / ones({2}, kInt64)).dtype() == kFloat32);
}

// ---------------------------------------------------------------- views

TEST_CASE("view and reshape: copy versus view") {
  Tensor a = arange(0, 12, 1, kFloat32);
  Tensor v = a.view({3, 4});
  CHECK(v.same_storage(a));
  CHECK(v.strides() == Strides{4, 1});
  CHECK(a.view({2, -1, 3}).shape() == Shape{2, 2, 3});
  Tensor r = a.reshape({4, 3});
  CHECK(r.same_storage(a));  // contiguous: a view
  Tensor t = v.t();          // (4, 3), strides (1, 4)
  Tensor rt = t.reshape({12});
  CHECK_FALSE(rt.same_storage(a));  // transposed: a copy
  CHECK(rt.is_contiguous());
  CHECK(vec(rt) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  // A reshape that only splits a dim of a transposed tensor is still a view.
  Tensor split_dim = t.reshape({2, 2, 3});
  CHECK(split_dim.same_storage(a));
  CHECK(split_dim.at({1, 0, 2}) == t.at({2, 2}));
  // Reshape to the same shape returns the tensor itself.
  CHECK(t.reshape({4, 3}).same_storage(a));
  // Writes through a view are seen by the base.
  v.set({1, 1}, -1);
  CHECK(a.at({5}) == -1);
  CHECK(a.flatten().shape() == Shape{12});
  CHECK(ones({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(ones({2, 3, 4}).flatten(0, 1).shape() == Shape{6, 4});
  CHECK(scalar_tensor(1.0).flatten().shape() == Shape{1});
  CHECK(scalar_tensor(1.0).reshape({1, 1}).shape() == Shape{1, 1});
}

TEST_CASE("transpose and permute strides") {
  Tensor x = arange(0, 24, 1, kFloat32).reshape({2, 3, 4});
  CHECK(x.strides() == Strides{12, 4, 1});
  Tensor t = x.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.strides() == Strides{1, 4, 12});
  CHECK(t.same_storage(x));
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.at({3, 1, 1}) == x.at({1, 1, 3}));
  CHECK(x.transpose(-1, -2).shape() == Shape{2, 4, 3});
  Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK(p.at({2, 1, 0}) == x.at({1, 0, 2}));
  CHECK(x.permute({0, 1, 2}).is_contiguous());
  CHECK(x.permute({-1, 0, 1}).shape() == Shape{4, 2, 3});
  Tensor m = ones({2, 5});
  CHECK(m.t().shape() == Shape{5, 2});
  CHECK(m.t().strides() == Strides{1, 5});
  CHECK(ones({3}).t().shape() == Shape{3});
}

TEST_CASE("squeeze and unsqueeze") {
  Tensor x = ones({1, 3, 1, 2});
  CHECK(x.squeeze().shape() == Shape{3, 2});
  CHECK(x.squeeze(0).shape() == Shape{3, 1, 2});
  CHECK(x.squeeze(2).shape() == Shape{1, 3, 2});
  CHECK(x.squeeze(1).shape() == Shape{1, 3, 1, 2});  // not of size 1: unchanged
  CHECK(x.squeeze(-2).shape() == Shape{1, 3, 2});
  CHECK(x.squeeze().same_storage(x));
  Tensor v = arange(0, 3, 1, kFloat32);
  CHECK(v.unsqueeze(0).shape() == Shape{1, 3});
  CHECK(v.unsqueeze(1).shape() == Shape{3, 1});
  CHECK(v.unsqueeze(-1).shape() == Shape{3, 1});
  CHECK(v.unsqueeze(1).strides()[0] == 1);
  CHECK(v.unsqueeze(1).is_contiguous());
  CHECK(scalar_tensor(2.0).unsqueeze(0).shape() == Shape{1});
  CHECK(ones({1, 1}).squeeze().dim() == 0);
}

TEST_CASE("expand gives stride 0") {
  Tensor c = from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = c.expand({3, 4});
  CHECK(e.shape() == Shape{3, 4});
  CHECK(e.strides() == Strides{1, 0});
  CHECK(e.same_storage(c));
  CHECK(e.at({2, 3}) == 3.0);
  Tensor r = tensor({1.0, 2.0, 3.0}).expand({2, 3});
  CHECK(r.strides() == Strides{0, 1});
  CHECK(vec(r) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(c.expand({2, -1, 5}).shape() == Shape{2, 3, 5});
  CHECK(c.expand({2, -1, 5}).strides() == Strides{0, 1, 0});
  CHECK(scalar_tensor(4.0).expand({2, 2}).strides() == Strides{0, 0});
  CHECK(c.expand_as(ones({3, 2})).shape() == Shape{3, 2});
  CHECK(vec(e.contiguous()) == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
}

TEST_CASE("slice with step, narrow, select") {
  Tensor a = arange(0, 10, 1, kFloat32);
  Tensor s = a.slice(0, 1, 8, 3);
  CHECK(vec(s) == std::vector<double>{1, 4, 7});
  CHECK(s.strides() == Strides{3});
  CHECK(s.offset() == 1);
  CHECK(s.same_storage(a));
  CHECK(vec(a.slice(0, -3, 10)) == std::vector<double>{7, 8, 9});
  CHECK(vec(a.slice(0, 8, 100)) == std::vector<double>{8, 9});  // clamped like Python
  CHECK(a.slice(0, 5, 2).numel() == 0);
  CHECK(vec(a.slice(0, 0, 10, 4)) == std::vector<double>{0, 4, 8});
  Tensor m = arange(0, 12, 1, kFloat32).reshape({3, 4});
  Tensor cols = m.slice(1, 1, 4, 2);  // columns 1 and 3
  CHECK(cols.shape() == Shape{3, 2});
  CHECK(cols.strides() == Strides{4, 2});
  CHECK(vec(cols) == std::vector<double>{1, 3, 5, 7, 9, 11});

  Tensor n = a.narrow(0, 2, 3);
  CHECK(vec(n) == std::vector<double>{2, 3, 4});
  CHECK(n.offset() == 2);
  CHECK(vec(m.narrow(1, -2, 2)) == std::vector<double>{2, 3, 6, 7, 10, 11});

  Tensor row = m.select(0, 1);
  CHECK(row.shape() == Shape{4});
  CHECK(vec(row) == std::vector<double>{4, 5, 6, 7});
  Tensor col = m.select(1, -1);
  CHECK(col.shape() == Shape{3});
  CHECK(col.strides() == Strides{4});
  CHECK(vec(col) == std::vector<double>{3, 7, 11});
  CHECK(col.same_storage(m));
  CHECK(a.select(0, 4).dim() == 0);
  CHECK(a.select(0, 4).item() == 4.0);
}

TEST_CASE("split and chunk sizes") {
  auto sizes = [](const std::vector<Tensor>& parts, int64_t dim = 0) {
    std::vector<int64_t> s;
    for (const Tensor& p : parts) s.push_back(p.size(dim));
    return s;
  };
  Tensor a = arange(10);
  CHECK(sizes(a.split(4)) == std::vector<int64_t>{4, 4, 2});
  CHECK(sizes(a.split(5)) == std::vector<int64_t>{5, 5});
  CHECK(sizes(a.split(20)) == std::vector<int64_t>{10});
  CHECK(sizes(split(a, std::vector<int64_t>{1, 6, 3})) == std::vector<int64_t>{1, 6, 3});
  CHECK(sizes(a.chunk(3)) == std::vector<int64_t>{4, 4, 2});
  CHECK(sizes(a.chunk(4)) == std::vector<int64_t>{3, 3, 3, 1});     // as torch.chunk
  CHECK(sizes(a.chunk(6)) == std::vector<int64_t>{2, 2, 2, 2, 2});  // fewer than asked
  CHECK(sizes(a.chunk(20)) == std::vector<int64_t>(10, 1));
  // A zero-size dim: as many empty parts as asked, as torch.chunk (split gives one).
  CHECK(sizes(zeros({0, 3}).chunk(2)) == std::vector<int64_t>{0, 0});
  CHECK(sizes(zeros({0, 3}).chunk(3)) == std::vector<int64_t>{0, 0, 0});
  CHECK(zeros({0, 3}).chunk(2)[1].shape() == Shape{0, 3});
  CHECK(sizes(zeros({0}).split(4)) == std::vector<int64_t>{0});
  std::vector<Tensor> parts = a.split(4);
  CHECK(parts[2].to_vector<int64_t>() == std::vector<int64_t>{8, 9});
  CHECK(parts[1].same_storage(a));
  Tensor m = ones({3, 7});
  CHECK(sizes(m.chunk(2, 1), 1) == std::vector<int64_t>{4, 3});
  CHECK(sizes(m.split(3, -1), 1) == std::vector<int64_t>{3, 3, 1});
  CHECK(m.chunk(2, 1)[0].shape() == Shape{3, 4});
}

TEST_CASE("contiguous() copies only when needed") {
  Tensor a = arange(0, 6, 1, kFloat32).reshape({2, 3});
  CHECK(a.contiguous().same_storage(a));
  Tensor t = a.t();
  Tensor c = t.contiguous();
  CHECK_FALSE(c.same_storage(a));
  CHECK(c.is_contiguous());
  CHECK(c.strides() == Strides{2, 1});
  CHECK(vec(c) == vec(t));
  CHECK(vec(c) == std::vector<double>{0, 3, 1, 4, 2, 5});
  // Size-1 dims don't break contiguity.
  CHECK(ones({3, 1}).t().is_contiguous());
  CHECK(a.slice(0, 0, 2).is_contiguous());
  CHECK_FALSE(a.slice(1, 0, 2).is_contiguous());
  CHECK(a.slice(1, 0, 2).contiguous().is_contiguous());
}

namespace {

// The value each element of `view` has when its base is arange (element k holds k): the
// storage index the view's strides and offset lead to, in the view's own order.
std::vector<double> arange_view_values(const Tensor& view) {
  std::vector<double> out;
  std::vector<int64_t> idx(static_cast<size_t>(view.dim()), 0);
  for (int64_t n = 0; n < view.numel(); ++n) {
    int64_t at = view.offset();
    for (int64_t d = 0; d < view.dim(); ++d) at += idx[static_cast<size_t>(d)] * view.stride(d);
    out.push_back(static_cast<double>(at));
    for (int64_t d = view.dim() - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < view.size(d)) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("copies of transposed layouts: every element where it belongs, any thread count") {
  // Transposes walked in tiles (one side contiguous along another dim than the other's),
  // with sizes that leave partial tiles and blocks, planes of other dims around them, and
  // layouts that take the element walk (too small, strided on both sides).
  struct Case {
    const char* name;
    Shape base;
    std::function<Tensor(const Tensor&)> view;
  };
  const std::vector<Case> cases = {
      {"(37, 45).t()", {37, 45}, [](const Tensor& x) { return x.t(); }},
      {"(300, 530).t()", {300, 530}, [](const Tensor& x) { return x.t(); }},
      {"(3, 20, 300).transpose(1, 2)", {3, 20, 300}, [](const Tensor& x) { return x.transpose(1, 2); }},
      {"(2, 17, 5, 33).permute(0, 3, 2, 1)", {2, 17, 5, 33}, [](const Tensor& x) { return x.permute({0, 3, 2, 1}); }},
      {"(40, 3, 48).transpose(0, 2)", {40, 3, 48}, [](const Tensor& x) { return x.transpose(0, 2); }},
      {"(10, 5).t()", {10, 5}, [](const Tensor& x) { return x.t(); }},
      {"(64, 600) every other column, t()", {64, 600}, [](const Tensor& x) { return x.slice(1, 0, 600, 2).t(); }},
      {"(20, 70) from row 3, t()", {20, 70}, [](const Tensor& x) { return x.slice(0, 3, 20).t(); }},
  };
  testing::ThreadsGuard guard;
  for (int threads : {1, 4}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      CAPTURE(c.name);
      CAPTURE(threads);
      const Tensor x = arange(0, static_cast<double>(shape_numel(c.base)), 1, kFloat32).reshape(c.base);
      const Tensor v = c.view(x);
      const std::vector<double> want = arange_view_values(v);
      CHECK(vec(v.contiguous()) == want);
      Tensor as_f64 = empty(v.shape(), TensorOptions(kFloat64));
      as_f64.copy_(v);  // converted on the way
      CHECK(vec(as_f64) == want);
      const Tensor xi = x.to(kInt64);
      Tensor as_f32 = empty(v.shape(), TensorOptions(kFloat32));
      as_f32.copy_(c.view(xi));
      CHECK(vec(as_f32) == want);
    }
  }
}

TEST_CASE("item, at, set, to_vector") {
  CHECK(scalar_tensor(2.5).item() == 2.5);
  CHECK(from_vector<float>({7}, {1, 1}).item() == 7.0);
  CHECK(scalar_tensor(3.0, kInt64).item<int64_t>() == 3);
  CHECK(ones({1}, kBool).item<bool>());
  Tensor m = arange(0, 6, 1, kFloat64).reshape({2, 3});
  CHECK(m.at({1, 2}) == 5.0);
  CHECK(m.at({-1, -1}) == 5.0);
  CHECK(m.at({0, -3}) == 0.0);
  CHECK(m.t().at({2, 0}) == 2.0);
  m.set({0, 1}, 10);
  CHECK(m.at({0, 1}) == 10.0);
  CHECK(m.to_vector<double>() == std::vector<double>{0, 10, 2, 3, 4, 5});
  CHECK(m.t().to_vector<double>() == std::vector<double>{0, 3, 10, 4, 2, 5});  // row-major of the view
  CHECK(m.to_vector<float>() == std::vector<float>{0, 10, 2, 3, 4, 5});
  CHECK(zeros({0}).to_vector<float>().empty());
  // data<T>() points at element 0 of the view.
  Tensor row = m.select(0, 1);
  CHECK(row.data<double>()[0] == 3.0);
  CHECK(row.data<double>()[2] == 5.0);
}

// ---------------------------------------------------------------- printing

TEST_CASE("printing: floats, as PyTorch") {
  CHECK(tensor({1.0, 2.0, 3.0}).str() == "tensor([1., 2., 3.])");
  CHECK(tensor({{1.5, 2}, {3, 4}}).str() == "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])");
  CHECK(tensor({{1.5, -2}, {3, 4}}).str() == "tensor([[ 1.5000, -2.0000],\n        [ 3.0000,  4.0000]])");
  CHECK(tensor({-1.0, 20.0, 3.0}).str() == "tensor([-1., 20.,  3.])");
  CHECK(tensor({-0.5, 0}).str() == "tensor([-0.5000,  0.0000])");
  CHECK(zeros({3}).str() == "tensor([0., 0., 0.])");
  CHECK(ones({2, 3, 4}).str() ==
        "tensor([[[1., 1., 1., 1.],\n         [1., 1., 1., 1.],\n         [1., 1., 1., 1.]],\n\n"
        "        [[1., 1., 1., 1.],\n         [1., 1., 1., 1.],\n         [1., 1., 1., 1.]]])");
  CHECK(arange(0, 8, 1, kFloat32).reshape({2, 2, 2}).str() ==
        "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  std::ostringstream os;
  os << tensor({1.25});
  CHECK(os.str() == "tensor([1.2500])");
}

TEST_CASE("printing: scientific notation, as PyTorch") {
  CHECK(tensor({1e10, 1}).str() == "tensor([1.0000e+10, 1.0000e+00])");
  CHECK(tensor({-1e10, 1}).str() == "tensor([-1.0000e+10,  1.0000e+00])");
  CHECK(tensor({1e-5, 1}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(tensor({0.5, 1000}).str() == "tensor([5.0000e-01, 1.0000e+03])");
  CHECK(tensor({0.5, 501}).str() == "tensor([5.0000e-01, 5.0100e+02])");
  CHECK(tensor({123456.5, 1}).str() == "tensor([1.2346e+05, 1.0000e+00])");
  // Integer-valued floats switch to it too when the range passes 1000 or 1e8.
  CHECK(tensor({1000.0, 1.0}).str() == "tensor([1000.,    1.])");
  CHECK(tensor({1001.0, 1.0}).str() == "tensor([1.0010e+03, 1.0000e+00])");
  CHECK(tensor({1e8, 2e8}).str() == "tensor([1.0000e+08, 2.0000e+08])");
  CHECK(scalar_tensor(1e-7).str() == "tensor(1.0000e-07)");
}

TEST_CASE("printing: nan and inf, as PyTorch") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(tensor({nan, 1.5, inf}).str() == "tensor([   nan, 1.5000,    inf])");
  CHECK(tensor({nan, 1, -inf}).str() == "tensor([nan, 1., -inf])");
  CHECK(tensor({0, nan}).str() == "tensor([0., nan])");
  CHECK(full({}, nan).str() == "tensor(nan)");
  CHECK(full({}, -inf).str() == "tensor(-inf)");
}

TEST_CASE("printing: integers and bools, as PyTorch") {
  CHECK(tensor({1, 2, 3}, kInt64).str() == "tensor([1, 2, 3])");
  CHECK(arange(3).str() == "tensor([0, 1, 2])");
  CHECK(tensor({-1, 20, 3}, kInt64).str() == "tensor([-1, 20,  3])");
  CHECK(tensor({{1, -20}, {300, 4}}, kInt64).str() == "tensor([[  1, -20],\n        [300,   4]])");
  // PyTorch pads True to the width of False.
  CHECK(from_vector<bool>({true, false}, {2}).str() == "tensor([ True, False])");
  CHECK(ones({2, 2}, kBool).str() == "tensor([[True, True],\n        [True, True]])");
  CHECK((tensor({1.0, 5.0}) > 2.0).str() == "tensor([False,  True])");
}

TEST_CASE("printing: 0-d tensors, as PyTorch") {
  CHECK(scalar_tensor(3.5).str() == "tensor(3.5000)");
  CHECK(scalar_tensor(3).str() == "tensor(3.)");
  CHECK(scalar_tensor(-2.5).str() == "tensor(-2.5000)");
  CHECK(scalar_tensor(0).str() == "tensor(0.)");
  CHECK(scalar_tensor(3, kInt64).str() == "tensor(3)");
  CHECK(scalar_tensor(1, kBool).str() == "tensor(True)");
  CHECK(scalar_tensor(3.0, kFloat64).str() == "tensor(3., dtype=kiln.float64)");
}

TEST_CASE("printing: dtype, requires_grad and grad_fn suffixes, as PyTorch") {
  CHECK(tensor({1, 2}, kFloat64).str() == "tensor([1., 2.], dtype=kiln.float64)");
  CHECK(tensor({1.5, 2.25}, kFloat64).str() == "tensor([1.5000, 2.2500], dtype=kiln.float64)");
  Tensor x = tensor({1.0, 2.0}, TensorOptions().requires_grad());
  CHECK(x.str() == "tensor([1., 2.], requires_grad=True)");
  CHECK((x * 2.0).str() == "tensor([2., 4.], grad_fn=<MulBackward>)");
  CHECK((x * x).str() == "tensor([1., 4.], grad_fn=<MulBackward>)");
  CHECK((x + 1.0).str() == "tensor([2., 3.], grad_fn=<AddBackward>)");
  CHECK(x.sum().str() == "tensor(3., grad_fn=<SumBackward>)");
  CHECK(x.tanh().str() == "tensor([0.7616, 0.9640], grad_fn=<TanhBackward>)");
  CHECK(log_softmax(x, 0).str().find("grad_fn=<LogSoftmaxBackward>)") != std::string::npos);
  CHECK(x.detach().str() == "tensor([1., 2.])");
  {
    NoGradGuard no_grad;
    CHECK((x * 2.0).str() == "tensor([2., 4.])");
  }
  CHECK(tensor({1, 2}, TensorOptions(kFloat64).requires_grad()).str() ==
        "tensor([1., 2.], dtype=kiln.float64, requires_grad=True)");
  CHECK(scalar_tensor(3.0, TensorOptions(kFloat64).requires_grad()).str() ==
        "tensor(3., dtype=kiln.float64, requires_grad=True)");
  // Printing doesn't touch the graph or the version.
  Tensor y = x * 3.0;
  uint64_t v = y.version();
  (void)y.str();
  CHECK(y.version() == v);
  CHECK(y.grad_fn() != nullptr);
}

TEST_CASE("printing: empty tensors, as PyTorch") {
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({2, 0}).str() == "tensor([], size=(2, 0))");
  CHECK(zeros({2, 1, 0}).str() == "tensor([], size=(2, 1, 0))");
  CHECK(zeros({0}, kInt64).str() == "tensor([], dtype=kiln.int64)");
  CHECK(zeros({0}, kBool).str() == "tensor([], dtype=kiln.bool)");
  CHECK(zeros({0}, kFloat64).str() == "tensor([], dtype=kiln.float64)");
  CHECK(zeros({0, 3}, TensorOptions(kFloat64).requires_grad()).str() ==
        "tensor([], size=(0, 3), dtype=kiln.float64, requires_grad=True)");
  CHECK(arange(3, 3).str() == "tensor([], dtype=kiln.int64)");
}

TEST_CASE("printing: long rows wrap at 80 columns, as PyTorch") {
  CHECK((arange(0, 30, 1, kFloat32) / 3.0).str() ==
        "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,\n"
        "        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,\n"
        "        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000, 8.3333, 8.6667,\n"
        "        9.0000, 9.3333, 9.6667])");
  CHECK(arange(40).str() ==
        "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
        "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35,\n"
        "        36, 37, 38, 39])");
  CHECK(arange(-15, 15).str() ==
        "tensor([-15, -14, -13, -12, -11, -10,  -9,  -8,  -7,  -6,  -5,  -4,  -3,  -2,\n"
        "         -1,   0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,\n"
        "         13,  14])");
  CHECK(ones({30}, kBool).str() ==
        "tensor([True, True, True, True, True, True, True, True, True, True, True, True,\n"
        "        True, True, True, True, True, True, True, True, True, True, True, True,\n"
        "        True, True, True, True, True, True])");
  // Suffixes that don't fit on the last line go on a new one.
  CHECK((arange(0, 8, 1, kFloat64) / 3.0).str() ==
        "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333],\n"
        "       dtype=kiln.float64)");
  CHECK(full({9}, 0.1, TensorOptions(kFloat64).requires_grad()).str() ==
        "tensor([0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000],\n"
        "       dtype=kiln.float64, requires_grad=True)");
  CHECK(full({12}, 0.1, TensorOptions(kFloat64).requires_grad()).str() ==
        "tensor([0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000, 0.1000,\n"
        "        0.1000, 0.1000, 0.1000], dtype=kiln.float64, requires_grad=True)");
}

TEST_CASE("printing: large tensors are summarised, as PyTorch") {
  CHECK(arange(1001).str() == "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  CHECK(arange(1000).str().find("...") == std::string::npos);  // 1000 is not above the threshold
  CHECK(arange(2000, kFloat32).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
        "        1.9990e+03])");
  CHECK(arange(2000, kFloat32).reshape({2, 1000}).str() ==
        "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.9700e+02, 9.9800e+02,\n"
        "         9.9900e+02],\n"
        "        [1.0000e+03, 1.0010e+03, 1.0020e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
        "         1.9990e+03]])");
  CHECK(arange(2000).reshape({1000, 2}).str() ==
        "tensor([[   0,    1],\n        [   2,    3],\n        [   4,    5],\n        ...,\n"
        "        [1994, 1995],\n        [1996, 1997],\n        [1998, 1999]])");
  CHECK(arange(2400).reshape({100, 3, 8}).str() ==
        "tensor([[[   0,    1,    2,  ...,    5,    6,    7],\n"
        "         [   8,    9,   10,  ...,   13,   14,   15],\n"
        "         [  16,   17,   18,  ...,   21,   22,   23]],\n\n"
        "        [[  24,   25,   26,  ...,   29,   30,   31],\n"
        "         [  32,   33,   34,  ...,   37,   38,   39],\n"
        "         [  40,   41,   42,  ...,   45,   46,   47]],\n\n"
        "        [[  48,   49,   50,  ...,   53,   54,   55],\n"
        "         [  56,   57,   58,  ...,   61,   62,   63],\n"
        "         [  64,   65,   66,  ...,   69,   70,   71]],\n\n"
        "        ...,\n\n"
        "        [[2328, 2329, 2330,  ..., 2333, 2334, 2335],\n"
        "         [2336, 2337, 2338,  ..., 2341, 2342, 2343],\n"
        "         [2344, 2345, 2346,  ..., 2349, 2350, 2351]],\n\n"
        "        [[2352, 2353, 2354,  ..., 2357, 2358, 2359],\n"
        "         [2360, 2361, 2362,  ..., 2365, 2366, 2367],\n"
        "         [2368, 2369, 2370,  ..., 2373, 2374, 2375]],\n\n"
        "        [[2376, 2377, 2378,  ..., 2381, 2382, 2383],\n"
        "         [2384, 2385, 2386,  ..., 2389, 2390, 2391],\n"
        "         [2392, 2393, 2394,  ..., 2397, 2398, 2399]]])");
}

TEST_CASE("printing: views print their own elements") {
  Tensor m = arange(0, 6, 1, kFloat32).reshape({2, 3});
  CHECK(m.t().str() == "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
  CHECK(m.select(1, 2).str() == "tensor([2., 5.])");
  CHECK(tensor({7.0}).expand({2, 2}).str() == "tensor([[7., 7.],\n        [7., 7.]])");
}

TEST_CASE("the CPU allocator keeps freed blocks by size class and hands them back") {
  empty_cache();
  CHECK(memory_stats().cached_bytes == 0);
  { Tensor a = Tensor::empty({1000}, kFloat32); }  // 4000 bytes -> class 4096
  const MemoryStats kept = memory_stats();
  CHECK(kept.cached_bytes == 4096);
  // A request of a nearby size in the same class is served from the cache...
  { Tensor b = Tensor::empty({1010}, kFloat32); }
  MemoryStats s = memory_stats();
  CHECK(s.system_allocations == kept.system_allocations);
  CHECK(s.cached_bytes == 4096);
  // ...one of another class is not.
  { Tensor c = Tensor::empty({1100}, kFloat32); }  // 4400 bytes -> class 4608
  s = memory_stats();
  CHECK(s.system_allocations == kept.system_allocations + 1);
  CHECK(s.cached_bytes == 4096 + 4608);
  empty_cache();
  CHECK(memory_stats().cached_bytes == 0);
}

// The CUDA kernels' index division (backend/cuda/fast_div.h) is host and device code: its
// formula is checked here, on the CPU, against '/' for divisors and dividends at the
// edges of its range [1, 2^31) and [0, 2^31), and a pseudo-random spread between.
TEST_CASE("FastDiv divides as '/' for every divisor and dividend below 2^31") {
  constexpr uint32_t kTop = 0x7FFFFFFFu;
  std::vector<uint32_t> divisors, dividends;
  for (uint32_t d = 1; d <= 4200; ++d) divisors.push_back(d);
  for (uint32_t s = 1; s < 31; ++s)
    for (uint32_t e : {(1u << s) - 1, 1u << s, (1u << s) + 1}) divisors.push_back(e);
  for (uint32_t d : {6400u, 51200u, 100000u, 1000003u, kTop - 1, kTop}) divisors.push_back(d);
  uint64_t h = 0x9E3779B97F4A7C15ull;
  auto next = [&h] {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    return static_cast<uint32_t>(h >> 33);  // [0, 2^31)
  };
  for (int i = 0; i < 2000; ++i) divisors.push_back(std::max(1u, next()));
  for (uint32_t n = 0; n < 300; ++n) dividends.push_back(n);
  for (uint32_t n : {kTop, kTop - 1, 1u << 30, (1u << 30) - 1}) dividends.push_back(n);
  for (int i = 0; i < 300; ++i) dividends.push_back(next());
  int64_t wrong = 0;
  for (uint32_t d : divisors) {
    const kiln::cuda::FastDiv f(d);
    auto check = [&](uint32_t n) {
      if (f.div(n) != n / d) ++wrong;
    };
    for (uint32_t n : dividends) check(n);
    // Around multiples of d: q·d - 1, q·d, q·d + 1 for a few q, and the last multiple.
    for (uint32_t q : {1u, 2u, 3u, 1000u, kTop / d})
      if (static_cast<uint64_t>(q) * d <= kTop)
        for (int64_t n : {int64_t{q} * d - 1, int64_t{q} * d, int64_t{q} * d + 1})
          if (n >= 0 && n <= kTop) check(static_cast<uint32_t>(n));
  }
  CHECK(wrong == 0);
  CHECK(kiln::cuda::FastDiv(7).div(kTop) == kTop / 7);
}

// ================================================================ operators, in-place autograd, literals, int dims

TEST_CASE("a shape prints like torch.Size, as kiln.Size, with or without using namespace kiln") {
  CHECK(user_code::print_sizes(zeros({2, 3})) == "kiln.Size([2, 3]) other");
  CHECK(user_code::print_sizes(zeros({})) == "kiln.Size([]) other");
  CHECK(user_code::print_sizes(zeros({0, 4, 1})) == "kiln.Size([0, 4, 1]) other");
  std::ostringstream os;
  os << Shape{5};
  CHECK(os.str() == "kiln.Size([5])");
}

TEST_CASE("Shape is a vector: every use of one still works, both ways") {
  Shape s = {2, 3};
  std::vector<int64_t> v = s;  // to a vector
  Shape back = v;              // and back
  CHECK(back == s);
  CHECK(s == std::vector<int64_t>{2, 3});
  s.push_back(4);
  CHECK(s.size() == 3);
  CHECK(Shape(s.begin(), s.end() - 1) == Shape{2, 3});
  CHECK(Shape(3, 1) == Shape{1, 1, 1});
  CHECK(shape_str(s) == "(2, 3, 4)");
  CHECK(zeros(v).shape() == Shape{2, 3});
}

// ------------------------------------------------------------------ operators
TEST_CASE("== and != are elementwise, with tensors and with scalars on either side") {
  Tensor a = tensor({1, 0, 3});
  Tensor b = tensor({1, 2, 3});
  Tensor eq_t = a == b;
  CHECK(eq_t.dtype() == kBool);
  CHECK(vec(eq_t) == std::vector<double>{1, 0, 1});
  CHECK(vec(a != b) == std::vector<double>{0, 1, 0});
  CHECK(vec(a == 0) == std::vector<double>{0, 1, 0});
  CHECK(vec(0 == a) == std::vector<double>{0, 1, 0});
  CHECK(vec(a != 0) == std::vector<double>{1, 0, 1});
  CHECK(vec(3 != a) == std::vector<double>{1, 1, 0});
  // Broadcasting, and a mask the way a padding mask is built.
  Tensor src = tensor({{5, 0, 0}, {7, 8, 0}});
  Tensor pad_mask = (src != 0).unsqueeze(1);
  CHECK(pad_mask.shape() == Shape{2, 1, 3});
  CHECK(vec(pad_mask) == std::vector<double>{1, 0, 0, 1, 1, 0});
  CHECK(vec(tensor({{1}, {2}}) == tensor({1, 2})) == std::vector<double>{1, 0, 0, 1});
  // NaN is unequal to everything, itself included; -0 equals 0.
  Tensor f = tensor({std::nan(""), -0.0, 1.5});
  CHECK(vec(f == f) == std::vector<double>{0, 1, 1});
  CHECK(vec(f != f) == std::vector<double>{1, 0, 0});
  CHECK(vec(f == 0) == std::vector<double>{0, 1, 0});
}

TEST_CASE("comparisons with the scalar on the left, and the scalar methods") {
  Tensor x = tensor({-1.0, 0.5, 2.0});
  CHECK(vec(0.5 < x) == std::vector<double>{0, 0, 1});
  CHECK(vec(0.5 <= x) == std::vector<double>{0, 1, 1});
  CHECK(vec(0.5 > x) == std::vector<double>{1, 0, 0});
  CHECK(vec(0.5 >= x) == std::vector<double>{1, 1, 0});
  CHECK(vec(x.eq(0.5)) == std::vector<double>{0, 1, 0});
  CHECK(vec(x.ne(0.5)) == std::vector<double>{1, 0, 1});
  CHECK(vec(x.lt(0)) == std::vector<double>{1, 0, 0});
  CHECK(vec(x.le(0.5)) == std::vector<double>{1, 1, 0});
  CHECK(vec(x.gt(0)) == std::vector<double>{0, 1, 1});
  CHECK(vec(x.ge(2)) == std::vector<double>{0, 0, 1});
  CHECK(x.eq(0).dtype() == kBool);
  // An int tensor against a fractional scalar compares as float, as in torch.
  CHECK(vec(tensor({0, 1, 2}) < 1.5) == std::vector<double>{1, 1, 0});
  CHECK(vec(-x) == std::vector<double>{1, -0.5, -2});
}

TEST_CASE("in-place operators with a tensor and with a scalar") {
  Tensor x = tensor({1.0, 2.0, 3.0});
  x += tensor({1.0, 1.0, 1.0});
  CHECK(vec(x) == std::vector<double>{2, 3, 4});
  x -= 1;
  CHECK(vec(x) == std::vector<double>{1, 2, 3});
  x *= tensor({2.0});  // broadcast
  CHECK(vec(x) == std::vector<double>{2, 4, 6});
  x /= 2;
  CHECK(vec(x) == std::vector<double>{1, 2, 3});
  x -= tensor({1.0, 1.0, 1.0});
  x *= 3;
  x += 0.5;
  x /= tensor({1.0, 2.0, 4.0});
  CHECK(vec(x) == std::vector<double>{0.5, 3.5 / 2, 6.5 / 4});
  // On a temporary view, as x.narrow(0, 0, 2) += 1 in libtorch: writes through to x.
  Tensor y = zeros({2, 3});
  y.narrow(0, 1, 1) += 1;
  y.select(1, 2) *= 0;
  CHECK(vec(y) == std::vector<double>{0, 0, 0, 1, 1, 0});
  CHECK(y.version() == 2);
  // An int tensor takes an integer update; /= into it is true division, refused.
  Tensor i = tensor({1, 2});
  i += 1;
  CHECK(i.dtype() == kInt64);
  CHECK(vec(i) == std::vector<double>{2, 3});
  CHECK(error_of([&] { i /= 2; }).find("[div_] true division into a int64 tensor") == 0);
  CHECK(error_of([&] { i += tensor({0.5, 0.5}); }).find("[add_] result type float32 can't be cast") == 0);
}

// ------------------------------------------------------------------ in-place under autograd
TEST_CASE("masked_fill_ on a matmul output is recorded (the seed notebooks' attention scores)") {
  Tensor q = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor k = leaf({1, -1, 0, 2, 1, 1}, {2, 3});
  Tensor mask = tensor({{false, true}, {false, false}});
  Tensor scores = matmul(q, k.t());
  auto* old_fn = scores.grad_fn().get();
  scores.masked_fill_(mask, -1e9);
  CHECK(scores.grad_fn().get() != old_fn);
  CHECK(std::string(scores.grad_fn()->name()) == "masked_fill_");
  CHECK(scores.grad_fn()->next[0].get() == old_fn);  // the edge to matmul
  softmax(scores, -1).select(1, 0).sum().backward();

  // The same through the out-of-place op.
  Tensor q2 = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor k2 = leaf({1, -1, 0, 2, 1, 1}, {2, 3});
  softmax(masked_fill(matmul(q2, k2.t()), mask, -1e9), -1).select(1, 0).sum().backward();
  CHECK(allclose(q.grad(), q2.grad(), 1e-12, 1e-12));
  CHECK(allclose(k.grad(), k2.grad(), 1e-12, 1e-12));
  CHECK(vec(q.grad()).size() == 6);
}

TEST_CASE("an operand that requires grad makes self part of the graph") {
  SUBCASE("copy_") {
    Tensor y = leaf({1, 2, 3}, {3});
    Tensor x = zeros({3}, kFloat64);
    x.copy_(y);
    CHECK(x.requires_grad());
    CHECK_FALSE(x.is_leaf());
    (x * tensor({1.0, 2.0, 3.0}, kFloat64)).sum().backward();
    CHECK(vec(y.grad()) == std::vector<double>{1, 2, 3});
  }
  SUBCASE("add_ with a broadcast operand of another dtype") {
    Tensor y = from_vector<float>({1, 2}, {2, 1}, TensorOptions(kFloat32).requires_grad());
    Tensor x = ones({2, 3}, kFloat64);
    x.add_(y, 2.0);
    CHECK(x.requires_grad());
    x.sum().backward();
    CHECK(y.grad().dtype() == kFloat32);
    CHECK(y.grad().shape() == Shape{2, 1});
    CHECK(vec(y.grad()) == std::vector<double>{6, 6});
  }
  SUBCASE("copy_ from another dtype") {
    Tensor y = leaf({1, 2}, {2});
    Tensor x = zeros({2});  // float32
    x.copy_(y);
    (x * 3.0).sum().backward();
    CHECK(y.grad().dtype() == kFloat64);
    CHECK(vec(y.grad()) == std::vector<double>{3, 3});
  }
}

TEST_CASE("in-place ops on a non-leaf give the right gradients") {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor b = leaf({4, 5, 6}, {3});
  Tensor y = a * 2.0;
  y.mul_(b);   // y = 2ab
  y.add_(a);   // y = 2ab + a
  y.sub_(b, 0.5);
  y.div_(2.0);  // y = ab + a/2 - b/4
  y += 1.0;
  y.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{4.5, 5.5, 6.5});     // b + 1/2
  CHECK(vec(b.grad()) == std::vector<double>{0.75, 1.75, 2.75});  // a - 1/4
  CHECK(vec(y.detach()) == std::vector<double>{1 * 4 + 0.5 - 1 + 1, 2 * 5 + 1 - 1.25 + 1, 3 * 6 + 1.5 - 1.5 + 1});
}

TEST_CASE("an op's result is its own base even when its forward made it as a view under NoGradGuard") {
  // flip runs its gathers under NoGradGuard, then records its node on their result.
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor y = flip(a, {0});
  y.mul_(2.0);
  y.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{2, 2, 2});
  // The same when the input needs no gradient (the op records nothing) and the in-place
  // operand does, and for index_select's result made under NoGradGuard: each is a fresh
  // tensor, as in torch, so the in-place op is recorded on it.
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor f = flip(from_vector<double>({4, 5, 6}, {3}), {0});
  f.mul_(w);
  f.sum().backward();
  CHECK(vec(w.grad()) == std::vector<double>{6, 5, 4});
  Tensor picked;
  {
    NoGradGuard no_grad;
    picked = index_select(from_vector<double>({4, 5, 6}, {3}), 0, from_vector<int64_t>({2, 0}, {2}));
  }
  Tensor v = leaf({1, 2}, {2});
  picked.mul_(v);
  picked.sum().backward();
  CHECK(vec(v.grad()) == std::vector<double>{6, 4});
}

TEST_CASE("fill_ and zero_ on a non-leaf cut the old value's gradient to zero") {
  Tensor a = leaf({1, 2}, {2});
  Tensor y = a * 3.0;
  y.zero_();
  (y + a).sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{1, 1});  // only the `+ a`
  Tensor b = leaf({1, 2}, {2});
  Tensor z = b * b;
  z.fill_(7.0);
  CHECK(std::string(z.grad_fn()->name()) == "fill_");
  (z * b).sum().backward();
  CHECK(vec(b.grad()) == std::vector<double>{7, 7});
}

TEST_CASE("in-place on a view rebases its base's history (CopySlices)") {
  SUBCASE("y.narrow(0, 0, 1).mul_(2)") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor y = x * 1.0;
    y.narrow(0, 0, 1).mul_(2.0);
    CHECK(vec(y.detach()) == std::vector<double>{2, 4, 6, 4, 5, 6});
    (y * y).sum().backward();  // d/dx of (2x)^2 = 8x on row 0, 2x on row 1
    CHECK(vec(x.grad()) == std::vector<double>{8, 16, 24, 8, 10, 12});
  }
  SUBCASE("y.select(1, 0).zero_()") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor y = x * 2.0;
    y.select(1, 0).zero_();
    y.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{0, 2, 2, 0, 2, 2});
  }
  SUBCASE("the view itself carries on from the base's new history") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor w = leaf({10, 20}, {2});
    Tensor y = x * 1.0;
    Tensor row = y.select(0, 1);
    row.mul_(w);  // row = x[1] * w
    CHECK(std::string(row.grad_fn()->name()) == "as_strided");
    CHECK(std::string(y.grad_fn()->name()) == "mul_");
    row.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{0, 0, 10, 20});
    CHECK(vec(w.grad()) == std::vector<double>{3, 4});
  }
  SUBCASE("a base that did not require grad joins the graph") {
    Tensor w = leaf({1, 2, 3}, {3});
    Tensor buf = zeros({2, 3}, kFloat64);
    buf.select(0, 1).copy_(w * 2.0);
    CHECK(buf.requires_grad());
    (buf * buf).sum().backward();  // (2w)^2 -> 8w
    CHECK(vec(w.grad()) == std::vector<double>{8, 16, 24});
  }
  SUBCASE("a transposed view, written through the base's non-contiguous window") {
    Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor o = leaf({1, 1, 1, 2, 2, 2}, {3, 2});
    Tensor y = x * 1.0;
    y.t().mul_(o);  // y[i][j] *= o[j][i]
    y.sum().backward();
    CHECK(vec(x.grad()) == std::vector<double>{1, 1, 2, 1, 2, 2});
    CHECK(vec(o.grad()) == std::vector<double>{1, 4, 2, 5, 3, 6});
  }
}

TEST_CASE("a view made before its base was changed in place sees the new history") {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2});
  Tensor y = x * 1.0;
  Tensor row0 = y.select(0, 0);  // a view, made before
  y.mul_(3.0);
  CHECK(vec(row0.detach()) == std::vector<double>{3, 6});
  row0.sum().backward();  // torch: 3 on row 0, nothing on row 1
  CHECK(vec(x.grad()) == std::vector<double>{3, 3, 0, 0});
  // And through another view of the same base.
  Tensor a = leaf({1, 2, 3, 4}, {2, 2});
  Tensor b = a * 1.0;
  Tensor col = b.select(1, 1);
  b.select(0, 1).mul_(10.0);
  col.sum().backward();
  CHECK(vec(a.grad()) == std::vector<double>{0, 1, 0, 10});
}

TEST_CASE("retain_grad follows a tensor through an in-place op") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 2.0;
  y.retain_grad();
  y.mul_(3.0);
  (y * 5.0).sum().backward();
  CHECK(vec(y.grad()) == std::vector<double>{5, 5});
  CHECK(vec(x.grad()) == std::vector<double>{30, 30});
}

TEST_CASE("a leaf that requires grad cannot be changed in place under grad mode") {
  Tensor w = ones({3}, TensorOptions().requires_grad());
  const char* leaf_msg = "a leaf tensor that requires grad is being used in an in-place operation";
  CHECK(error_of([&] { w.add_(1.0); }) == std::string("[add_] ") + leaf_msg);
  CHECK(error_of([&] { w.mul_(ones({3})); }) == std::string("[mul_] ") + leaf_msg);
  CHECK(error_of([&] { w.fill_(0.0); }) == std::string("[fill_] ") + leaf_msg);
  CHECK(error_of([&] { w.zero_(); }) == std::string("[zero_] ") + leaf_msg);
  CHECK(error_of([&] { w.copy_(zeros({3})); }) == std::string("[copy_] ") + leaf_msg);
  CHECK(error_of([&] { w.normal_(); }) == std::string("[normal_] ") + leaf_msg);
  CHECK(error_of([&] { w -= 1.0; }) == std::string("[sub_] ") + leaf_msg);
  CHECK(error_of([&] { w.narrow(0, 0, 2).zero_(); }) ==
        "[zero_] a view of a leaf tensor that requires grad is being used in an in-place operation");
  CHECK(error_of([&] { w.clamp_(0.0, 0.5); }).find("[clamp_] a leaf tensor") == 0);
  CHECK(vec(w) == std::vector<double>{1, 1, 1});
  CHECK(w.version() == 0);  // nothing was written
  // The old advice (wrap it in NoGradGuard) is gone: it silently dropped graph ops.
  CHECK(error_of([&] { w.add_(1.0); }).find("NoGradGuard") == std::string::npos);
  // Under NoGradGuard (an optimizer step) it is allowed, and nothing is recorded.
  {
    NoGradGuard no_grad;
    w.add_(1.0);
    w.narrow(0, 0, 1).mul_(3.0);
  }
  CHECK(vec(w) == std::vector<double>{6, 2, 2});
  CHECK(w.is_leaf());
  CHECK(w.version() == 2);
  // A non-leaf modified under NoGradGuard is not recorded either (as torch).
  Tensor y = w * 1.0;
  auto* fn = y.grad_fn().get();
  {
    NoGradGuard no_grad;
    y.add_(1.0);
  }
  CHECK(y.grad_fn().get() == fn);
}

TEST_CASE("a tensor saved for backward and modified afterwards: torch's error") {
  SUBCASE("a saved input") {
    Tensor x = leaf({1, 2, 3}, {3});
    Tensor c = full({3}, 2.0, kFloat32);
    Tensor y = (x * c).sum();  // mul saves c for x's gradient
    c.add_(1.0);
    CHECK(error_of([&] { y.backward(); }) ==
          "[mul] one of the variables needed for gradient computation has been modified by an inplace operation: "
          "float32 tensor of shape (3,), is at version 1; expected version 0 instead");
  }
  SUBCASE("a saved output, modified by a recorded in-place op") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor e = exp(x);  // saves its output
    e.mul_(2.0);
    CHECK(error_of([&] { e.sum().backward(); }) ==
          "[exp] one of the variables needed for gradient computation has been modified by an inplace operation: "
          "float64 tensor of shape (2, 2), is at version 1; expected version 0 instead");
  }
  SUBCASE("through a view, twice") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor s = sigmoid(x);
    Tensor loss = s.sum();
    s.select(0, 0).zero_();
    s.select(0, 1).zero_();
    std::string msg = error_of([&] { loss.backward(); });
    CHECK(msg.find("[sigmoid] one of the variables") == 0);
    CHECK(msg.find("is at version 2; expected version 0 instead") != std::string::npos);
  }
  SUBCASE("mul_ of a tensor by itself saves the operand before the write") {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * 1.0;
    y.mul_(y);
    CHECK(error_of([&] { y.sum().backward(); }).find("[mul_] one of the variables needed") == 0);
  }
  SUBCASE("the scaled dot product attention's float mask") {
    Tensor q = leaf({1, 2, 3, 4}, {1, 2, 2});
    Tensor m = zeros({2, 2}, kFloat64);
    Tensor out = scaled_dot_product_attention(q, q, q, m);
    m.fill_(1.0);
    CHECK(error_of([&] { out.sum().backward(); }).find("[scaled_dot_product_attention] one of the variables") == 0);
  }
}

TEST_CASE("in-place errors name the op and what was given") {
  SUBCASE("a tensor whose elements share memory") {
    Tensor e = zeros({3}).expand({2, 3});
    CHECK(error_of([&] { e.add_(1.0); }).find("[add_] unsupported operation: more than one element of the "
                                              "written-to tensor (shape (2, 3), strides (0, 1))") == 0);
    CHECK(error_of([&] { e.fill_(1.0); }).find("[fill_] unsupported operation") == 0);
  }
  SUBCASE("a view made under NoGradGuard, written with grad mode on") {
    Tensor x = leaf({1, 2, 3, 4}, {2, 2});
    Tensor y = x * 1.0;
    Tensor v;
    {
      NoGradGuard no_grad;
      v = y.select(0, 0);
    }
    CHECK(error_of([&] { v.mul_(leaf({1, 1}, {2})); })
              .find("[mul_] a view made under NoGradGuard is being modified in place with grad mode on") == 0);
  }
  SUBCASE("an op without a derivative yet") {
    Tensor x = leaf({1, 2}, {2});
    Tensor y = x * 1.0;
    bool wrote = false;
    std::string msg = error_of([&] { detail::apply_inplace("scatter_", y, {}, [&] { wrote = true; }); });
    CHECK(msg == "[scatter_] the derivative for scatter_ is not implemented (self or an operand requires grad)");
    CHECK_FALSE(wrote);
    CHECK(y.version() == 0);
    // Outside the graph it runs.
    Tensor z = zeros({2});
    detail::apply_inplace("scatter_", z, {}, [&] { wrote = true; });
    CHECK(wrote);
    CHECK(z.version() == 1);
  }
  SUBCASE("bad operands") {
    Tensor y = zeros({2, 3});
    CHECK(error_of([&] { y.add_(ones({3, 3})); }).find("[add_]") == 0);
    CHECK(error_of([&] { y.mul_(ones({2, 3, 1})); }).find("[mul_]") == 0);
    CHECK(error_of([&] { y.copy_(ones({4})); }).find("[copy_] shapes (2, 3) and (4,) cannot be broadcast") == 0);
    CHECK(error_of([&] { y.masked_fill_(ones({2, 3}), 0.0); }).find("[masked_fill] mask must be a bool tensor") == 0);
    CHECK(error_of([&] { y.clamp_(std::nullopt, std::nullopt); }).find("[clamp_] at least one") == 0);
    CHECK(error_of([&] { Tensor().add_(1.0); }).find("[add_] input is an undefined tensor") == 0);
    CHECK(error_of([&] { y.add_(Tensor()); }).find("[add_] operand is an undefined tensor") == 0);
    CHECK(error_of([&] { tensor({true}).add_(1.0); }).find("[add_] not defined for bool tensors") == 0);
  }
}

TEST_CASE("check_inplace, for in-place ops not yet on apply_inplace, refuses tensors in the graph") {
  Tensor w = leaf({1, 2}, {2});
  CHECK(error_of([&] { detail::check_inplace("scatter_", w); })
            .find("[scatter_] a leaf tensor that requires grad is being used in an in-place operation") == 0);
  Tensor y = w * 2.0;
  CHECK(error_of([&] { detail::check_inplace("scatter_", y); })
            .find("[scatter_] does not record in-place changes yet") == 0);
  CHECK(error_of([&] { detail::check_inplace("scatter_", zeros({2})); }).empty());
  NoGradGuard no_grad;
  CHECK(error_of([&] { detail::check_inplace("scatter_", w); }).empty());
  CHECK(error_of([&] { detail::check_inplace("scatter_", y); }).empty());
}

// ------------------------------------------------------------------ tensor literals
TEST_CASE("tensor literals: each spelling, its dtype and shape, as torch.tensor") {
  struct Case {
    const char* spelling;
    Tensor t;
    DType dtype;
    Shape shape;
  };
  const Case cases[] = {
      {"tensor(3.5)", tensor(3.5), kFloat32, {}},
      {"tensor(3)", tensor(3), kInt64, {}},
      {"tensor(true)", tensor(true), kBool, {}},
      {"tensor(2.5f)", tensor(2.5f), kFloat32, {}},
      {"tensor({1, 2, 3})", tensor({1, 2, 3}), kInt64, {3}},
      {"tensor({1.5, 2})", tensor({1.5, 2}), kFloat32, {2}},
      {"tensor({1.5, 2}, kFloat64)", tensor({1.5, 2}, kFloat64), kFloat64, {2}},
      {"tensor({true, false})", tensor({true, false}), kBool, {2}},
      {"tensor({true, 2})", tensor({true, 2}), kInt64, {2}},
      {"tensor({{1, 2}, {3, 4}})", tensor({{1, 2}, {3, 4}}), kInt64, {2, 2}},
      {"tensor({{1, 2.5}, {3, 4}})", tensor({{1, 2.5}, {3, 4}}), kFloat32, {2, 2}},
      {"tensor({{0}}, kInt64)", tensor({{0}}, kInt64), kInt64, {1, 1}},
      {"tensor({{0}})", tensor({{0}}), kInt64, {1, 1}},
      {"tensor({7})", tensor({7}), kInt64, {1}},
      {"tensor({{1, 2}}, kFloat32)", tensor({{1, 2}}, kFloat32), kFloat32, {1, 2}},
      {"tensor({{{1}, {2}}, {{3}, {4}}})", tensor({{{1}, {2}}, {{3}, {4}}}), kInt64, {2, 2, 1}},
      {"4-D", tensor({{{{1.0, 2.0}}, {{3.0, 4.0}}}}), kFloat32, {1, 2, 1, 2}},
      {"tensor({})", tensor({}), kFloat32, {0}},
      {"tensor({{}, {}})", tensor({{}, {}}), kFloat32, {2, 0}},
      {"tensor({}, kInt64)", tensor({}, kInt64), kInt64, {0}},
      {"tensor({1, 2}, kBool)", tensor({0, 2}, kBool), kBool, {2}},
      {"tensor({1, 2}, TensorOptions(kFloat64).requires_grad())",
       tensor({1, 2}, TensorOptions(kFloat64).requires_grad()), kFloat64, {2}},
      {"tensor({1.0, 2.0}, TensorOptions().requires_grad())", tensor({1.0, 2.0}, TensorOptions().requires_grad()),
       kFloat32, {2}},
      {"int64 beyond 2^53 stays exact", tensor({int64_t{9007199254740993}}), kInt64, {1}},
  };
  for (const Case& c : cases) {
    INFO(c.spelling);
    CHECK(c.t.dtype() == c.dtype);
    CHECK(c.t.shape() == c.shape);
  }
  CHECK(vec(tensor({{1, 2}, {3, 4}})) == std::vector<double>{1, 2, 3, 4});
  CHECK(tensor(3.5).item() == 3.5);
  CHECK(vec(tensor({{{{1.0, 2.0}}, {{3.0, 4.0}}}})) == std::vector<double>{1, 2, 3, 4});
  CHECK(tensor({int64_t{9007199254740993}}).to_vector<int64_t>()[0] == 9007199254740993);
  CHECK(tensor({1, 2}, TensorOptions(kFloat64).requires_grad()).requires_grad());
  CHECK(vec(tensor({true, false})) == std::vector<double>{1, 0});
  CHECK(vec(tensor({0, 2}, kBool)) == std::vector<double>{0, 1});
  Tensor special = tensor({-0.0, std::numeric_limits<double>::infinity(), std::nan("")});
  std::vector<double> sv = vec(special);
  CHECK(std::signbit(sv[0]));
  CHECK(std::isinf(sv[1]));
  CHECK(std::isnan(sv[2]));
}

TEST_CASE("tensor literals: ragged nesting and integer gradients are errors naming the position") {
  CHECK(error_of([] { tensor({{1, 2}, {3}}); }) ==
        "[tensor] expected a sequence of length 2 at dim 1, got 1 (at position [1])");
  CHECK(error_of([] { tensor({{{1}, {2, 3}}}); }) ==
        "[tensor] expected a sequence of length 1 at dim 2, got 2 (at position [0][1])");
  CHECK(error_of([] { tensor({1, {2}}); }) == "[tensor] expected a number at dim 1, got a sequence (at position [1])");
  CHECK(error_of([] { tensor({{1}, 2}); }) == "[tensor] expected a sequence at dim 1, got a number (at position [1])");
  CHECK(error_of([] { tensor({{}, {1}}); }) ==
        "[tensor] expected a sequence of length 0 at dim 1, got 1 (at position [1])");
  CHECK(error_of([] { tensor({1, 2}, TensorOptions().requires_grad()); })
            .find("[tensor] only floating-point tensors can require gradients, got int64") == 0);
}

// ------------------------------------------------------------------ single int dims
TEST_CASE("reductions take a single int dim, and braced lists keep meaning lists of dims") {
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}});
  CHECK(vec(x.sum(-1)) == std::vector<double>{9, 12});
  CHECK(vec(sum(x, -1)) == std::vector<double>{9, 12});
  CHECK(vec(x.sum(0)) == std::vector<double>{5, 7, 9});
  CHECK(x.sum(0, true).shape() == Shape{1, 3});
  CHECK(vec(x.mean(1)) == std::vector<double>{3, 4});
  CHECK(vec(mean(x, 0)) == std::vector<double>{2.5, 3.5, 4.5});
  CHECK(vec(x.amax(-1)) == std::vector<double>{5, 6});
  CHECK(vec(amin(x, 1)) == std::vector<double>{1, 2});
  CHECK(vec(x.amin(0, true)) == std::vector<double>{1, 2, 3});
  CHECK(vec(amax(x, 0)) == std::vector<double>{4, 5, 6});
  CHECK(allclose(x.logsumexp(1), logsumexp(x, {1})));
  CHECK(allclose(logsumexp(x, -1, true), logsumexp(x, {1}, true)));
  CHECK(vec(x.var(1)) == std::vector<double>{4, 4});
  CHECK(vec(var(x, 1, 0)) == vec(var(x, {1}, 0)));
  CHECK(vec(x.var(0, 1, true)) == vec(x.var({0}, 1, true)));
  int64_t d = 1;
  CHECK(vec(x.sum(d)) == std::vector<double>{9, 12});
  // Braced lists: {0, 1} and {} reduce over all dims, {0} over dim 0.
  CHECK(x.sum({0, 1}).item() == 21);
  CHECK(x.sum({}).item() == 21);
  CHECK(sum(x, {}, true).shape() == Shape{1, 1});
  CHECK(x.sum({0}).shape() == Shape{3});
  CHECK(mean(x, {}).item() == 3.5);
  CHECK(x.amax({}).item() == 6);
  CHECK(error_of([&] { x.sum(2); }).find("[sum] dim 2 out of range") == 0);
  CHECK(error_of([&] { mean(x, -3); }).find("[mean] dim -3 out of range") == 0);
  // Gradients flow through the int forms like the list forms.
  Tensor w = leaf({1, 2, 3, 4}, {2, 2});
  w.sum(-1).mean(0).backward();
  CHECK(vec(w.grad()) == std::vector<double>{0.5, 0.5, 0.5, 0.5});
}
