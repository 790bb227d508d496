// bfloat16 autocast (autograd/autocast.h). Under AutocastGuard the products
// (matmul, mm, bmm, linear, einsum, scaled_dot_product_attention) take bfloat16 operands
// with float32 accumulation and output, forward and backward; everything else stays
// float32.
//
// Two kinds of checks:
//   - that a product really read bfloat16: the result equals the float32 product of the
//     bfloat16-ROUNDED operands within float32 summation noise (K · 2^-23 of Σ|a||b|:
//     bfloat16 products are exact in float32, only the order of the sums differs), and
//     differs from the float32 product of the unrounded operands by far more than that;
//   - that results stay close to float32: within 1e-2 relative (norm-wise). bfloat16
//     keeps 8 significant bits, a relative rounding error of at most 2^-9 ≈ 2e-3 per
//     operand, so a product's terms are off by up to 2^-8 ≈ 4e-3 and a sum of them
//     usually by less (the errors have random signs); 1e-2 leaves room for the few
//     roundings a forward and backward pass chain, and is still 10x below what a
//     wrong operand, a lost term or a transposed gradient gives.
// Run twice by meson: as is (oneDNN's native bf16 GEMM where the CPU has one) and with
// ONEDNN_MAX_CPU_ISA=AVX512_CORE, where Kiln takes its fallback (OpenBLAS on the widened
// bfloat16 values): the same checks hold on both paths. (On a CPU without AVX512_BF16 the
// second run is skipped: both would take the fallback.)
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "test_util.h"
#include "toy_task.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;

namespace {

// t's values rounded to bfloat16, held in float32 (no history).
Tensor r16(const Tensor& t) { return t.detach().to(kBFloat16).to(kFloat32); }

// ||got - want|| / ||want|| (Frobenius).
double rel_norm(const Tensor& got, const Tensor& want) {
  AutocastGuard off(kBFloat16, false);
  const Tensor g = got.detach().to(kFloat64), w = want.detach().to(kFloat64);
  return std::sqrt(sum(mul(sub(g, w), sub(g, w))).item() / sum(mul(w, w)).item());
}

// The largest |got - want| / scale, elementwise.
double max_scaled(const Tensor& got, const Tensor& want, const Tensor& scale) {
  AutocastGuard off(kBFloat16, false);
  return max(div(abs(sub(got.detach().to(kFloat64), want.detach().to(kFloat64))),
                 add(scale.detach().to(kFloat64), 1e-30)))
      .item();
}

// got = a @ b computed by a GEMM that read bfloat16 a and b, in float32 (see the top).
void check_bf16_product(const std::string& what, const Tensor& got, const Tensor& a, const Tensor& b) {
  INFO(what);
  REQUIRE(got.defined());
  CHECK(got.dtype() == kFloat32);
  AutocastGuard off(kBFloat16, false);
  const Tensor ra = r16(a), rb = r16(b);
  const Tensor mag = matmul(abs(ra), abs(rb));  // Σ |a| |b| of each element
  const double noise = static_cast<double>(a.size(-1)) * std::ldexp(1.0, -23);
  const double vs_rounded = max_scaled(got, matmul(ra, rb), mag);
  const double vs_float = max_scaled(got, matmul(a.detach().to(kFloat32), b.detach().to(kFloat32)), mag);
  CAPTURE(noise);
  CAPTURE(vs_rounded);
  CAPTURE(vs_float);
  CHECK(vs_rounded <= noise);
  CHECK(vs_float > 10 * noise);
  CHECK(rel_norm(got, matmul(a.detach().to(kFloat32), b.detach().to(kFloat32))) <= 1e-2);
}

Tensor leaf(const Shape& shape, double scale = 1.0) { return mul(randn(shape), scale).requires_grad_(); }

}  // namespace

// ====================================================================== forward

TEST_CASE("autocast: matmul, mm, bmm, linear and einsum read bfloat16 and write float32") {
  manual_seed(1);
  const Tensor a = randn({37, 70}), b = randn({70, 45}), a3 = randn({3, 37, 70}), b3 = randn({3, 70, 45});
  const Tensor w = randn({45, 70}), bias = randn({45}), v = randn({70});
  AutocastGuard autocast(kBFloat16);
  CHECK(is_autocast_enabled());
  CHECK(get_autocast_dtype() == kBFloat16);
  check_bf16_product("matmul 2-D", matmul(a, b), a, b);
  check_bf16_product("mm", mm(a, b), a, b);
  check_bf16_product("bmm", bmm(a3, b3), a3, b3);
  check_bf16_product("matmul (…, M, K) @ (K, N)", matmul(a3, b), a3, b);
  check_bf16_product("matmul with broadcast batch", matmul(a3.unsqueeze(0), b3.narrow(0, 0, 1)), a3.unsqueeze(0),
                     b3.narrow(0, 0, 1));
  check_bf16_product("matmul transposed operands", matmul(b.t(), a.t()), b.t(), a.t());
  check_bf16_product("matrix @ vector", matmul(a, v).unsqueeze(1), a, v.unsqueeze(1));
  check_bf16_product("einsum", einsum("bij,bjk->bik", {a3, b3}), a3, b3);
  // linear: x Wᵀ, the bias added in float32 (oneDNN adds it in the GEMM).
  Tensor y = linear(a, w, bias);
  check_bf16_product("linear", sub(y, bias), a, w.t());
  CHECK(y.dtype() == kFloat32);
  // Few rows and many columns: the GEMM is cut into blocks of columns, each with its
  // stretch of the bias.
  const Tensor xs = randn({5, 128}), ws = randn({4000, 128}), bs = randn({4000});
  check_bf16_product("linear cut by columns", sub(linear(xs, ws, bs), bs), xs, ws.t());
  // No inner dimension: the bias alone.
  CHECK(equal(linear(zeros({3, 0}), zeros({4, 0}), bias.narrow(0, 0, 4)), bias.narrow(0, 0, 4).expand({3, 4})));
}

TEST_CASE("autocast: float32 and bfloat16 operands mix (both read as bfloat16); the output is float32") {
  manual_seed(2);
  const Tensor a = randn({9, 33}), b = randn({33, 7});
  AutocastGuard autocast(kBFloat16);
  check_bf16_product("float32 @ bfloat16", matmul(a, b.to(kBFloat16)), a, b);
  check_bf16_product("bfloat16 @ bfloat16", matmul(a.to(kBFloat16), b.to(kBFloat16)), a, b);
  check_bf16_product("einsum of both", einsum("ij,jk->ik", {a.to(kBFloat16), b}), a, b);
  Tensor y = linear(a.to(kBFloat16), b.t(), zeros({7}));
  check_bf16_product("linear, bfloat16 input", y, a, b);
}

TEST_CASE("autocast: everything but the products computes as without it (float32)") {
  manual_seed(3);
  const Tensor x = randn({4, 10});
  Tensor sm, ln, s;
  {
    AutocastGuard autocast(kBFloat16);
    sm = softmax(x, -1);
    ln = layer_norm(x, {10});
    s = sum(x);
  }
  CHECK(sm.dtype() == kFloat32);
  CHECK(equal(sm, softmax(x, -1)));
  CHECK(equal(ln, layer_norm(x, {10})));
  CHECK(equal(s, sum(x)));
}

// ====================================================================== backward

TEST_CASE("autocast: matmul's and linear's backward run the mixed GEMMs; float32 leaves get float32 gradients") {
  manual_seed(4);
  Tensor a = leaf({6, 40}), b = leaf({40, 12}), x = leaf({2, 5, 40}), w = leaf({12, 40}, 0.3), bias = leaf({12});
  const Tensor c1 = randn({6, 12}), c2 = randn({2, 5, 12});
  {
    AutocastGuard autocast(kBFloat16);
    Tensor loss = add(sum(mul(matmul(a, b), c1)), sum(mul(linear(x, w, bias), c2)));
    CHECK(loss.dtype() == kFloat32);
    loss.backward();  // inside the guard too: backward's products do not depend on it
  }
  for (const Tensor& t : {a, b, x, w, bias}) {
    REQUIRE(t.grad().defined());
    CHECK(t.grad().dtype() == kFloat32);
  }
  // dA = g Bᵀ, dB = Aᵀ g with g rounded once: the products of rounded operands.
  check_bf16_product("matmul grad a", a.grad(), c1, b.detach().t());
  check_bf16_product("matmul grad b", b.grad(), a.detach().t(), c1);
  const Tensor c2m = c2.reshape({10, 12}), xm = x.detach().reshape({10, 40});
  check_bf16_product("linear grad x", x.grad().reshape({10, 40}), c2m, w.detach());
  check_bf16_product("linear grad w", w.grad(), c2m.t(), xm);
  CHECK(equal(bias.grad(), sum(c2m, {0})));  // the bias gradient is float32 as without autocast
}

TEST_CASE("autocast: a linear's output gradient is rounded and summed for the bias in one pass, with sum's bits") {
  // Shapes through every split of the column sums: R cut into slices (few columns), column
  // chunks walking all rows (B > 1024), one column, one row, no rows.
  Backend& be = backend_for(Device(DeviceType::CPU));
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{
           {3000, 300}, {6400, 512}, {100, 2500}, {40, 7}, {1, 33}, {500, 1}, {0, 5}}) {
    const int64_t R = shape.first, N = shape.second;  // not a structured binding: CAPTURE's lambda takes them
    CAPTURE(R);
    CAPTURE(N);
    manual_seed(R + N);
    const Tensor x = mul(randn({R, N}), 3.0);
    const Tensor low = empty({R, N}, TensorOptions(kBFloat16)), sums = empty({N});
    be.round_bf16_and_column_sums(x, low, sums);
    CHECK(equal(low, x.to(kBFloat16)));  // bit for bit: equal() on bfloat16 compares every element
    CHECK(sums.to_vector<float>() == sum(x, {0}).to_vector<float>());
  }
  // Through linear's backward under autocast (rows 3000: the sliced sum).
  manual_seed(21);
  Tensor x = leaf({3000, 24}), w = leaf({300, 24}, 0.2), bias = leaf({300});
  const Tensor c = randn({3000, 300});
  {
    AutocastGuard autocast(kBFloat16);
    sum(mul(linear(x, w, bias), c)).backward();
  }
  CHECK(bias.grad().to_vector<float>() == sum(c, {0}).to_vector<float>());
  // Refusals name the op and what was given.
  const Tensor f = randn({4, 3});
  CHECK_ERROR_STARTS("[round_bf16_and_column_sums]",
                     be.round_bf16_and_column_sums(f.t(), empty({3, 4}, TensorOptions(kBFloat16)), empty({4})),
                     "contiguous");
  CHECK_ERROR_STARTS("[round_bf16_and_column_sums]",
                     be.round_bf16_and_column_sums(f, empty({4, 3}), empty({3})), "bfloat16", "float32");
  CHECK_ERROR_STARTS("[round_bf16_and_column_sums]",
                     be.round_bf16_and_column_sums(f, empty({4, 3}, TensorOptions(kBFloat16)), empty({4})),
                     "shape (3,)", "got shape (4,)");
}

TEST_CASE("autocast: gradients stay within bfloat16 tolerance of float32, a bfloat16 input gets bfloat16 ones") {
  manual_seed(5);
  Tensor x = leaf({3, 8, 24}), w1 = leaf({32, 24}, 0.2), w2 = leaf({24, 32}, 0.2);
  Tensor xb = x.detach().to(kBFloat16).requires_grad_();
  const Tensor c = randn({3, 8, 24});
  auto net = [&](const Tensor& in) { return sum(mul(linear(relu(linear(in, w1)), w2), c)); };
  net(x).backward();
  const Tensor gx = x.grad(), gw1 = w1.grad(), gw2 = w2.grad();
  for (Tensor t : {x, w1, w2}) t.zero_grad();
  {
    AutocastGuard autocast(kBFloat16);
    net(x).backward();
  }
  CHECK(rel_norm(x.grad(), gx) <= 1e-2);
  CHECK(rel_norm(w1.grad(), gw1) <= 1e-2);
  CHECK(rel_norm(w2.grad(), gw2) <= 1e-2);
  CHECK(rel_norm(x.grad(), gx) > 0);  // it did run in bfloat16
  {
    AutocastGuard autocast(kBFloat16);
    net(xb).backward();
  }
  CHECK(xb.grad().dtype() == kBFloat16);
  CHECK(rel_norm(xb.grad(), gx) <= 1e-2);
}

TEST_CASE("autocast: backward keeps the bfloat16 copy of an activation, not the float32 one") {
  manual_seed(6);
  Tensor w = leaf({64, 512}, 0.05);
  Tensor y;
  int64_t before = 0, x_bytes = 0;
  {
    AutocastGuard autocast(kBFloat16);
    before = memory_stats(kCPU).allocated_bytes;
    Tensor x = randn({256, 512});  // an activation: no gradient of its own
    x_bytes = x.numel() * 4;
    y = matmul(x, w.t());
  }  // x is gone, and the guard's copy of w with it
  const int64_t held = memory_stats(kCPU).allocated_bytes - before;
  CAPTURE(held);
  CAPTURE(x_bytes);
  // y (256 x 64 float32, 64 KiB) and the saved bfloat16 x (256 KiB): less than x itself.
  CHECK(held < x_bytes);
  sum(y).backward();
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("autocast: relu_dropout and attention keep the bfloat16 copy the next product reads, not float32 too") {
  manual_seed(14);
  Tensor w1 = leaf({256, 64}, 0.1), w2 = leaf({64, 256}, 0.1);
  const Tensor x = randn({512, 64});
  // The feed-forward: linear, relu_dropout, linear. Compared with float32, the graph
  // keeps bfloat16 copies of x and of the hidden activation (the second linear reads the
  // one relu_dropout made) instead of float32 ones.
  auto held_after = [&](bool autocast) {
    const int64_t before = memory_stats(kCPU).allocated_bytes;
    Tensor y;
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(kBFloat16);
      y = linear(relu_dropout(linear(x, w1), 0.25), w2);
    }
    const int64_t held = memory_stats(kCPU).allocated_bytes - before;
    sum(y).backward();
    return held;
  };
  manual_seed(15);
  const int64_t f32 = held_after(false);
  const Tensor g1 = w1.grad(), g2 = w2.grad();
  w1.zero_grad();
  w2.zero_grad();
  const int64_t hits = autocast_cache_stats().hits;
  manual_seed(15);
  const int64_t bf16 = held_after(true);
  CHECK(autocast_cache_stats().hits == hits + 1);  // the second linear's input
  const int64_t hidden = 512 * 256 * 4, out = 512 * 64 * 4, x_bytes = 512 * 64 * 4, w2_bytes = 64 * 256 * 4;
  CAPTURE(f32);
  CAPTURE(bf16);
  CHECK(f32 >= hidden + out);  // the hidden activation (float32) and y; x is the caller's
  // The hidden activation's bfloat16 copy, y, and the copies of x and w2 the linears keep.
  CHECK(bf16 <= hidden / 2 + out + x_bytes / 2 + w2_bytes / 2);
  CHECK(rel_norm(w2.grad(), g2) <= 1e-2);
  CHECK(rel_norm(w2.grad(), g2) > 0);
  // A hidden unit within rounding of 0 may fall on the other side of the relu: its whole
  // gradient comes or goes, so w1's gradient is further from float32's.
  CHECK(rel_norm(w1.grad(), g1) <= 5e-2);
}

TEST_CASE("autocast: relu_dropout's backward reads the bfloat16 copy of y as it is, with float32's bits") {
  // y (bfloat16) with the values where "y > 0" could go wrong: zeros of both signs, the
  // least subnormals, infinities, NaN; then random values, long enough to be cut in tasks.
  const std::vector<float> special = {0.0f, -0.0f, 9.2e-41f, -9.2e-41f, INFINITY, -INFINITY, NAN, 1.5f, -2.0f, 3e38f};
  manual_seed(31);
  const int64_t n = 100003;
  std::vector<float> values = randn({n}).to_vector<float>();
  std::copy(special.begin(), special.end(), values.begin());
  Tensor y = from_vector<float>(values, {n}).to(kBFloat16);
  // And bit patterns at the edges of "> 0": +inf, the least NaN (no float32 rounds to
  // it), other NaNs, the least subnormals of both signs.
  std::vector<bfloat16> low = y.to_vector<bfloat16>();
  for (const uint16_t bits : {0x7F80, 0x7F81, 0xFF81, 0x7FFF, 0xFFFF, 0x0001, 0x8001}) low.push_back(bfloat16::from_bits(bits));
  y = from_vector<bfloat16>(low, {static_cast<int64_t>(low.size())});
  const Tensor g = randn({y.numel()});
  CHECK(y.to(kFloat32).to_vector<float>()[2] > 0);  // 9.2e-41 is a bfloat16 subnormal, not 0
  Backend& be = backend_for(Device(DeviceType::CPU));
  const Tensor got = empty({y.numel()}), want = empty({y.numel()});
  be.relu_dropout_backward(g, y, 0.3, got);                  // the mixed kernel
  be.relu_dropout_backward(g, y.to(kFloat32), 0.3, want);    // float32's
  CHECK(got.to_vector<float>() == want.to_vector<float>());
  // A strided g takes the staged path, with the same values.
  const Tensor g2 = randn({y.numel(), 2}).select(1, 0);
  be.relu_dropout_backward(g2, y, 0.3, got);
  be.relu_dropout_backward(g2.contiguous(), y.to(kFloat32), 0.3, want);
  CHECK(got.to_vector<float>() == want.to_vector<float>());
}

namespace {
// The bits of a float32 or bfloat16 tensor's elements, NaNs included.
std::vector<uint32_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint32_t> out(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) {
    if (c.dtype() == kBFloat16) {
      out[i] = c.data<bfloat16>()[i].bits;
    } else {
      std::memcpy(&out[i], c.data<float>() + i, sizeof(float));
    }
  }
  return out;
}

// Under a guard, make() gives y with the bits of `plain` (the op without autocast), and a
// linear after it reads the bfloat16 copy the op wrote with y (a cache hit, no conversion
// of its own): the product of the rounded operands. Returns the linear's output.
Tensor check_next_linear_reads_copy(const std::function<Tensor()>& make, const Tensor& plain, const Tensor& w) {
  AutocastGuard guard(kBFloat16);
  const AutocastCacheStats before = autocast_cache_stats();
  const Tensor y = make();
  CHECK(bits_of(y) == bits_of(plain));
  const Tensor out = linear(y, w);
  const AutocastCacheStats after = autocast_cache_stats();
  CHECK(after.hits == before.hits + 1);
  CHECK(after.conversions == before.conversions + 2);  // y's copy (the op's) and w's
  AutocastGuard off(kBFloat16, false);
  // float32 products of the rounded operands: exact, only the sums' order differs. A
  // linear that read y unrounded would be ~2^-9 away.
  CHECK(rel_norm(out, matmul(r16(y), r16(w).t())) <= 1e-5);
  return out;
}
}  // namespace

TEST_CASE("autocast: relu_dropout writes y and its bfloat16 copy in one pass, with relu_dropout's and the copy's bits") {
  // x with the values where relu or the rounding could go wrong (zeros of both signs,
  // subnormals, a halfway case of the rounding, infinities, NaN), then random values:
  // long enough for several tasks and a last piece shorter than the others.
  const std::vector<float> special = {0.0f, -0.0f, 9.2e-41f, -9.2e-41f, 1.00390625f, INFINITY, -INFINITY, NAN, 3e38f};
  manual_seed(41);
  const int64_t n = 100003;
  std::vector<float> values = randn({n}).to_vector<float>();
  std::copy(special.begin(), special.end(), values.begin());
  const Tensor x = from_vector<float>(values, {n});
  Backend& be = backend_for(Device(DeviceType::CPU));
  for (const uint64_t block : {uint64_t{0}, uint64_t{7}}) {
    CAPTURE(block);
    const Tensor y = empty({n}), low = empty({n}, TensorOptions(kBFloat16)), want = empty({n});
    be.relu_dropout(x, 5, block, 0.3, y, low);  // the fused kernel
    be.relu_dropout(x, 5, block, 0.3, want, Tensor());
    CHECK(bits_of(y) == bits_of(want));
    CHECK(bits_of(low) == bits_of(want.to(kBFloat16)));
    // A strided x takes the default (relu_dropout, then copy): the same bits.
    const Tensor xs = from_vector<float>(values, {n, 1}).expand({n, 2}).select(1, 1);
    const Tensor y2 = empty({n}), low2 = empty({n}, TensorOptions(kBFloat16));
    be.relu_dropout(xs, 5, block, 0.3, y2, low2);
    CHECK(bits_of(y2) == bits_of(want));
    CHECK(bits_of(low2) == bits_of(low));
  }
  // The op: under autocast y has the bits it has without, and the second product reads
  // the copy written with it (a cache hit, no conversion of its own).
  const Tensor w = leaf({32, 64}, 0.1);
  const Tensor h = randn({300, 64}).requires_grad_(true);
  Generator g1(9), g2(9);
  const Tensor plain = relu_dropout(h, 0.25, true, &g1);
  check_next_linear_reads_copy([&] { return relu_dropout(h, 0.25, true, &g2); }, plain, w);
}

TEST_CASE("autocast: add_layer_norm writes y and its bfloat16 copy, with add_layer_norm's and the copy's bits") {
  manual_seed(43);
  Backend& be = backend_for(Device(DeviceType::CPU));
  for (const int64_t n : {int64_t{37}, int64_t{512}}) {
    CAPTURE(n);
    const int64_t rows = 301;  // several tasks
    const Tensor x = randn({rows, n}), r = randn({rows, n}), w = randn({n}), b = randn({n});
    for (const bool keep_sum : {true, false}) {
      CAPTURE(keep_sum);
      auto outputs = [&] {
        return std::array<Tensor, 4>{keep_sum ? empty({rows, n}) : Tensor(), empty({rows, n}), empty({rows}),
                                     empty({rows})};
      };
      const std::array<Tensor, 4> got = outputs(), want = outputs();
      const Tensor low = empty({rows, n}, TensorOptions(kBFloat16));
      be.add_layer_norm(x, r, w, b, 1e-5, got[0], got[1], got[2], got[3], low);
      be.add_layer_norm(x, r, w, b, 1e-5, want[0], want[1], want[2], want[3], Tensor());
      for (size_t i = keep_sum ? 0 : 1; i < 4; ++i) CHECK(bits_of(got[i]) == bits_of(want[i]));
      CHECK(bits_of(low) == bits_of(want[1].to(kBFloat16)));
    }
  }
  // The op: under autocast y has its bits without autocast, and the linear after it
  // reads the copy written with it (a cache hit).
  const Tensor x = randn({64, 32}).requires_grad_(true), r = randn({64, 32});
  const Tensor w = leaf({16, 32}, 0.1);
  const Tensor plain = add_layer_norm(x, r, {32});
  const Tensor out = check_next_linear_reads_copy([&] { return add_layer_norm(x, r, {32}); }, plain, w);
  // Backward through both is float32's within bfloat16's tolerance.
  sum(out).backward();
  const Tensor x32 = x.detach().requires_grad_(true);
  sum(linear(add_layer_norm(x32, r, {32}), w.detach())).backward();
  CHECK(rel_norm(x.grad(), x32.grad()) <= 1e-2);
}

// ====================================================================== attention

namespace {

// Autocast's attention recomputed by hand: float32 GEMMs on the rounded q, k, v; P rounded.
Tensor mixed_attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& masked, double scale) {
  AutocastGuard off(kBFloat16, false);
  Tensor s = mul(matmul(r16(q), r16(k).transpose(-2, -1)), scale);
  if (masked.defined()) s = masked_fill(s, masked, -INFINITY);
  return matmul(r16(softmax(s, -1)), r16(v));
}

}  // namespace

TEST_CASE("autocast: attention on chunks of a projection keeps their bfloat16 copies, not the float32 projection") {
  // Its gradients are written into the projection's buffer (ops/attention.cpp), but the
  // node must not hold the float32 projection itself: backward reads the rounded chunks.
  manual_seed(47);
  const Tensor x = randn({2, 6, 8}), w = leaf({24, 8}, 0.3);
  std::weak_ptr<Storage> projection;
  Tensor out;
  {
    AutocastGuard guard(kBFloat16);
    const Tensor proj = linear(x, w);
    projection = proj.impl()->storage;
    std::vector<Tensor> qkv = chunk(proj, 3, -1);
    auto heads = [](const Tensor& t) { return t.reshape({2, 6, 2, 4}).transpose(1, 2); };
    out = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), Tensor(), 0.0, true);
    REQUIRE(out.grad_fn()->next.size() == 1);  // the projection's gradient in one buffer
  }
  CHECK(projection.expired());
  sum(out).backward();
  CHECK(w.grad().defined());
  CHECK(w.grad().dtype() == kFloat32);
}

TEST_CASE("autocast: scaled_dot_product_attention's GEMMs read bfloat16 (q, k, v and the weights rounded)") {
  manual_seed(7);
  const int64_t N = 2, H = 3, L = 19, S = 23, E = 16;
  Tensor q = leaf({N, H, L, E}), k = leaf({N, H, S, E}), v = leaf({N, H, S, E});
  // The layout MultiheadAttention hands over: heads inside the rows.
  Tensor qh = leaf({N, L, H, E}).transpose(1, 2);
  const Tensor allowed = logical_not(gt(arange(static_cast<double>(S)).unsqueeze(0), add(arange(static_cast<double>(L)).unsqueeze(1), 4)));  // (L, S)
  const double scale = 1.0 / std::sqrt(static_cast<double>(E));
  for (const Tensor* mask : {static_cast<const Tensor*>(nullptr), &allowed}) {
    for (const Tensor* query : {&q, &qh}) {
      CAPTURE(mask != nullptr);
      CAPTURE(query == &qh);
      Tensor out;
      {
        AutocastGuard autocast(kBFloat16);
        out = scaled_dot_product_attention(*query, k, v, mask ? *mask : Tensor());
      }
      CHECK(out.dtype() == kFloat32);
      const Tensor plain = scaled_dot_product_attention(*query, k, v, mask ? *mask : Tensor());
      const Tensor ref = mixed_attention_ref(*query, k, v, mask ? logical_not(*mask) : Tensor(), scale);
      // Equal to the hand-made mixed result but for a weight now and then rounded the
      // other way (its float32 score differs in the last bits): far closer to it than to
      // float32's.
      const double vs_ref = rel_norm(out, ref), vs_float = rel_norm(out, plain);
      CAPTURE(vs_ref);
      CAPTURE(vs_float);
      CHECK(vs_ref < 1e-4);
      CHECK(vs_float > 10 * vs_ref);
      CHECK(vs_float <= 1e-2);
    }
  }
}

TEST_CASE("autocast: attention's backward within bfloat16 tolerance of float32, float32 gradients") {
  manual_seed(8);
  const int64_t N = 2, H = 2, L = 11, S = 13, E = 8;
  Tensor q = leaf({N, H, L, E}), k = leaf({N, H, S, E}), v = leaf({N, H, S, E});
  const Tensor c = randn({N, H, L, E});
  sum(mul(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, /*is_causal=*/true), c)).backward();
  const Tensor gq = q.grad(), gk = k.grad(), gv = v.grad();
  for (Tensor t : {q, k, v}) t.zero_grad();
  {
    AutocastGuard autocast(kBFloat16);
    sum(mul(scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true), c)).backward();
  }
  for (const auto& [got, want] : {std::pair{q.grad(), gq}, std::pair{k.grad(), gk}, std::pair{v.grad(), gv}}) {
    CHECK(got.dtype() == kFloat32);
    const double err = rel_norm(got, want);
    CAPTURE(err);
    CHECK(err <= 1e-2);
    CHECK(err > 1e-6);  // bfloat16, not float32
  }
  // grad_v = P'ᵀ g: both rounded, P' as forward rebuilt it.
  const Tensor p = softmax(masked_fill(mul(matmul(r16(q), r16(k).transpose(-2, -1)), 1 / std::sqrt(8.0)),
                                       gt(arange(static_cast<double>(S)).unsqueeze(0), arange(static_cast<double>(L)).unsqueeze(1)), -INFINITY),
                           -1);
  CHECK(rel_norm(v.grad(), matmul(r16(p).transpose(-2, -1), r16(c))) < 1e-4);
}

TEST_CASE("autocast: MultiheadAttention and the seeds' attention() (need_weights) run their GEMMs in bfloat16") {
  manual_seed(9);
  tr::MultiheadAttention mha(32, 4, {.batch_first = true});
  const Tensor x = randn({2, 7, 32});
  const tr::AttentionOutput plain_fused = mha.forward(x, x, x, Tensor(), /*need_weights=*/false);
  const tr::AttentionOutput plain_weights = mha.forward(x, x, x, Tensor(), /*need_weights=*/true);
  AutocastGuard autocast(kBFloat16);
  const tr::AttentionOutput fused = mha.forward(x, x, x, Tensor(), false);
  const tr::AttentionOutput weights = mha.forward(x, x, x, Tensor(), true);
  for (const auto& [got, want] :
       {std::pair{fused.output, plain_fused.output}, std::pair{weights.output, plain_weights.output},
        std::pair{weights.weights, plain_weights.weights}}) {
    CHECK(got.dtype() == kFloat32);
    const double err = rel_norm(got, want);
    CAPTURE(err);
    CHECK(err <= 1e-2);
    CHECK(err > 1e-6);
  }
}

// ====================================================================== the cache

TEST_CASE("autocast: a weight is converted once per outermost guard, again after it changes, dropped at exit") {
  manual_seed(10);
  Tensor w = leaf({16, 24});
  const Tensor x = randn({5, 24});
  const AutocastCacheStats s0 = autocast_cache_stats();
  Tensor y1;
  {
    AutocastGuard autocast(kBFloat16);
    y1 = linear(x, w);
    // Views of w (its transpose, a slice, as MultiheadAttention's projections take them)
    // read the same copy.
    Tensor y2 = linear(x, w), y3 = matmul(x, w.t()), y4 = linear(x, w.narrow(0, 4, 8));
    const AutocastCacheStats s = autocast_cache_stats();
    CHECK(s.conversions == s0.conversions + 1);
    CHECK(s.hits == s0.hits + 3);
    CHECK(s.entries == 1);
    CHECK(equal(y1, y2));
    CHECK(equal(y1, y3));
    CHECK(equal(y4, y1.narrow(1, 4, 8)));
    {
      AutocastGuard inner(kBFloat16);
      linear(x, w);
      AutocastGuard off(kBFloat16, false);  // nested and disabled: the cache still lives
      CHECK(!is_autocast_enabled());
    }
    CHECK(autocast_cache_stats().entries == 1);
    CHECK(autocast_cache_stats().hits == s0.hits + 4);
    // An optimizer step writes w (its version moves on): the next use converts it again.
    sum(y1).backward();
    optim::SGD sgd({w}, optim::SGDOptions{0.5});
    sgd.step();
    Tensor y5 = linear(x, w);
    CHECK(autocast_cache_stats().conversions == s0.conversions + 2);
    check_bf16_product("linear after the step", y5, x, w.detach().t());
    CHECK(!equal(y5, y1));
    // Activations (no grad, or not leaves) are never kept.
    Tensor h = mul(leaf({5, 24}), 2.0);
    linear(h, w);
    linear(x, randn({3, 24}));
    CHECK(autocast_cache_stats().entries == 1);
  }
  CHECK(autocast_cache_stats().entries == 0);
  CHECK(!is_autocast_enabled());
  {
    AutocastGuard autocast(kBFloat16);
    linear(x, w);
    CHECK(autocast_cache_stats().conversions == s0.conversions + 3);
  }
}

TEST_CASE("autocast: guards nest and restore; a disabled one computes float32") {
  manual_seed(11);
  const Tensor a = randn({8, 20}), b = randn({20, 6});
  const Tensor plain = matmul(a, b);
  CHECK(!is_autocast_enabled());
  {
    AutocastGuard outer(kBFloat16);
    {
      AutocastGuard off(kBFloat16, false);
      CHECK(!is_autocast_enabled());
      CHECK(equal(matmul(a, b), plain));
      {
        AutocastGuard on(kBFloat16);
        CHECK(is_autocast_enabled());
        check_bf16_product("innermost", matmul(a, b), a, b);
      }
      CHECK(!is_autocast_enabled());
    }
    CHECK(is_autocast_enabled());
    check_bf16_product("outer", matmul(a, b), a, b);
  }
  CHECK(!is_autocast_enabled());
  CHECK(equal(matmul(a, b), plain));
}

TEST_CASE("autocast: the state is per thread") {
  manual_seed(12);
  const Tensor a = randn({8, 20}), b = randn({20, 6});
  const Tensor plain = matmul(a, b);
  AutocastGuard autocast(kBFloat16);
  bool other_enabled = true, other_plain = false;
  std::thread([&] {
    other_enabled = is_autocast_enabled();
    other_plain = equal(matmul(a, b), plain);
  }).join();
  CHECK(!other_enabled);
  CHECK(other_plain);
  // And a guard on another thread does not reach this one's products.
  AutocastGuard off(kBFloat16, false);
  std::thread([&] {
    AutocastGuard on(kBFloat16);
    other_enabled = is_autocast_enabled();
  }).join();
  CHECK(other_enabled);
  CHECK(!is_autocast_enabled());
  CHECK(equal(matmul(a, b), plain));
}

TEST_CASE("autocast: the same bits at 1, 2 and 4 threads (work cut by shape, as float32's)") {
  manual_seed(17);
  Tensor a = leaf({700, 300}), w = leaf({520, 300}, 0.1), bias = leaf({520});
  const Tensor q = randn({4, 4, 60, 32}), c = randn({700, 520});
  testing::ThreadsGuard guard;
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    for (Tensor t : {a, w, bias}) t.zero_grad();
    Tensor y, att;
    {
      AutocastGuard autocast(kBFloat16);
      y = linear(a, w, bias);
      att = scaled_dot_product_attention(q, q, q, Tensor(), 0.0, true);
    }
    sum(mul(y, c)).backward();
    std::vector<float> bits = y.to_vector<float>();
    for (const Tensor& t : {att, a.grad(), w.grad(), bias.grad()}) {
      const std::vector<float> v = t.to_vector<float>();
      bits.insert(bits.end(), v.begin(), v.end());
    }
    runs.push_back(bits);
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE("autocast: float64 is never cast") {
  manual_seed(13);
  Tensor a = leaf({5, 9}).to(kFloat64), w = leaf({4, 9}).to(kFloat64).detach().requires_grad_();
  const Tensor q = randn({1, 2, 5, 4}, kFloat64);
  const Tensor mm64 = matmul(a, w.t()), lin64 = linear(a, w), att64 = scaled_dot_product_attention(q, q, q);
  AutocastGuard autocast(kBFloat16);
  const int64_t entries = autocast_cache_stats().entries;
  CHECK(matmul(a, w.t()).dtype() == kFloat64);
  CHECK(equal(matmul(a, w.t()), mm64));
  CHECK(equal(linear(a, w), lin64));
  CHECK(equal(scaled_dot_product_attention(q, q, q), att64));
  CHECK(autocast_cache_stats().entries == entries);
  // float64 with float32: refused as without autocast.
  CHECK_ERROR_STARTS("[matmul]", matmul(a, randn({9, 2})), "same dtype", "float64", "float32");
  CHECK_ERROR_STARTS("[linear]", linear(randn({5, 9}), w), "float32", "float64");
}

TEST_CASE("autocast: errors name autocast and the dtype") {
  CHECK_ERROR_STARTS("[autocast]", AutocastGuard(kFloat32), "bfloat16", "float32");
  CHECK_ERROR_STARTS("[autocast]", AutocastGuard(kFloat64, false), "float64");
  CHECK_ERROR_STARTS("[autocast]", AutocastGuard(kInt64), "int64");
  CHECK(!is_autocast_enabled());  // a refused guard changed nothing
  tr::Seq2SeqOptions o;
  o.src_vocab_size = o.tgt_vocab_size = 8;
  o.d_model = 8;
  o.nhead = 2;
  o.num_encoder_layers = o.num_decoder_layers = 1;
  o.dim_feedforward = 8;
  tr::Seq2SeqTransformer model(o);
  tr::TrainerOptions t;
  t.autocast = kFloat32;
  CHECK_ERROR_STARTS("[Trainer]", tr::Trainer(model, t), "autocast", "float32");
}

TEST_CASE("autocast: kiln::config() says how the CPU runs the bfloat16 products") {
  const std::string c = config();
  const bool native = c.find("  - autocast bf16: oneDNN native\n") != std::string::npos;
  const bool fallback = c.find("  - autocast bf16: fp32 compute on bf16-rounded inputs (") != std::string::npos;
  CHECK(native == cpu::onednn::has_native_bf16());
  CHECK(fallback == !cpu::onednn::has_native_bf16());
  CHECK(c.find(cpu::autocast_bf16_path()) != std::string::npos);
}

// ====================================================================== training

namespace {

// The tiny configuration of benchmarks/train_config.h (vocab 16, d_model 64, 4 heads, 2
// layers, feed-forward 128, batch 2, length 6) on one fixed batch, Adam at 1e-4: the
// losses of `steps` steps. Without dropout: the loss of 12 tokens under dropout swings by
// several percent from step to step on the smallest change of the logits (the masks are
// the same in both runs, the weights they drop are not quite), which would measure that
// noise, not bfloat16 (benchmarks/history/ has the small configuration with dropout).
std::vector<double> tiny_losses(bool autocast, int steps) {
  manual_seed(0);
  tr::Seq2SeqOptions o;
  o.src_vocab_size = o.tgt_vocab_size = 16;
  o.d_model = 64;
  o.nhead = 4;
  o.num_encoder_layers = o.num_decoder_layers = 2;
  o.dim_feedforward = 128;
  o.dropout = 0.0;
  tr::Seq2SeqTransformer model(o);
  model.train();
  optim::Adam opt(model.parameters(), optim::AdamOptions{1e-4, 0.9, 0.98, 1e-9, 0.0, false});
  const Tensor src = tensor({{3, 9, 4, 12, 7, 5}, {8, 2, 15, 6, 11, 0}});
  const Tensor tgt = tensor({{1, 5, 13, 7, 9, 3}, {1, 14, 4, 10, 2, 0}});
  const Tensor labels = tensor({{5, 13, 7, 9, 3, 2}, {14, 4, 10, 2, 6, 0}});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Tensor loss;
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(kBFloat16);
      loss = cross_entropy(model.forward(src, tgt).reshape({-1, 16}), labels.reshape({-1}), 0);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("autocast: 200 steps of the tiny configuration follow float32's loss within 2% at every step") {
  const std::vector<double> f32 = tiny_losses(false, 200), bf16 = tiny_losses(true, 200);
  for (size_t s = 0; s < f32.size(); ++s) {
    CAPTURE(s);
    CAPTURE(f32[s]);
    CAPTURE(bf16[s]);
    CHECK(std::abs(bf16[s] - f32[s]) <= 0.02 * f32[s]);
  }
  CHECK(bf16.back() < 0.1 * bf16.front());  // it learns
  CHECK(bf16 != f32);                        // in bfloat16
}

TEST_CASE("autocast: the toy translator trains under the Trainer's autocast and gets both pairs right") {
  const testing::ToyTask t =
      testing::toy_task({{"ich mochte ein bier", "i want a beer ."}, {"ich mochte ein cola", "i want a coke ."}});
  manual_seed(7);
  tr::Seq2SeqTransformer model(testing::toy_model(t, 16, 2, 1, 32, 0.0));
  data::PairDataLoader loader(t.pairs, {.batch_size = 2, .shuffle = true, .seed = 3});
  tr::TrainerOptions opts;
  opts.epochs = 100;
  opts.lr_factor = 0.5;
  opts.warmup_steps = 10;
  opts.label_smoothing = 0.0;
  opts.progress = false;
  opts.autocast = kBFloat16;
  tr::Trainer trainer(model, loader, nullptr, opts);
  const std::vector<tr::EpochSummary> epochs = trainer.fit();
  CHECK(epochs.back().train_loss < 0.1);
  for (const Tensor& p : model.parameters()) CHECK(p.dtype() == kFloat32);  // master weights
  std::vector<std::vector<int64_t>> sources;
  for (const data::TokenPair& p : t.pairs) sources.push_back(p.source);
  tr::DecodeOptions d;
  d.bos_id = t.tgt_vocab.bos_id();
  d.eos_id = t.tgt_vocab.eos_id();
  d.max_len = 10;
  for (bool autocast_decode : {false, true}) {
    CAPTURE(autocast_decode);
    std::optional<AutocastGuard> guard;
    if (autocast_decode) guard.emplace(kBFloat16);
    const std::vector<std::vector<int64_t>> out = tr::greedy_decode(model, data::pad_sequences(sources), d);
    REQUIRE(out.size() == t.pairs.size());
    for (size_t i = 0; i < out.size(); ++i) CHECK(t.tgt_vocab.decode(out[i]) == t.targets[i]);
  }
}
