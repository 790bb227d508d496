// The fusions outside the GEMMs:
//   - add_layer_norm (a residual add and the layer norm reading its sum, one pass) and
//     add_layer_norm_with_sum (pre-norm): forward and gradients with the bits of
//     layer_norm(add(x, r)), x and r given one gradient tensor, errors;
//   - the decoders' KVCache, which appends into room that doubles instead of
//     concatenating onto the whole cache each step: its views, growth and beam
//     reordering, and 220 decoded tokens equal to the uncached path's.
// (Gradient checks of add_layer_norm: the table of test_gradcheck.cpp.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "transformer/kiln_transformer.h"

using namespace kiln;
namespace tr = kiln::transformer;

namespace {

// The bytes of t (contiguous copy): equal bytes are equal bits.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  std::vector<unsigned char> b(static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

void check_bits(const std::string& what, const Tensor& got, const Tensor& want) {
  CAPTURE(what);
  REQUIRE(got.defined());
  REQUIRE(want.defined());
  CHECK(shape_str(got.shape()) == shape_str(want.shape()));
  CHECK(got.dtype() == want.dtype());
  CHECK(bytes_of(got) == bytes_of(want));
}

Tensor leaf(const Shape& shape, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator g(seed);
  return (randn(shape, TensorOptions(dt), &g) * scale + shift).detach().requires_grad_();
}

struct LnCase {
  std::string name;
  Shape shape, normalized;
  bool weight, bias;
};

// Rows shorter than one vector (3), with a tail (37), a Transformer's width past the
// kernels' parallel thresholds (300 x 512: several tasks and backward chunks), two
// normalized dims.
const std::vector<LnCase> kLnCases = {
    {"3 wide, no affine", {4, 3}, {3}, false, false},
    {"37 wide, weight and bias", {2, 5, 37}, {37}, true, true},
    {"512 wide, 300 rows", {300, 512}, {512}, true, true},
    {"two dims, weight only", {6, 4, 5}, {4, 5}, true, false},
    {"bias only", {9, 16}, {16}, false, true},
};

}  // namespace

TEST_CASE("add_layer_norm: forward and gradients have the bits of layer_norm(add(x, r))") {
  for (DType dt : {kFloat32, kFloat64}) {
    for (const LnCase& c : kLnCases) {
      SUBCASE((c.name + " " + dtype_name(dt)).c_str()) {
        uint64_t seed = 100;
        // A large mean: the two-pass variance must see the rounded sum, as the unfused one does.
        Tensor x = leaf(c.shape, dt, ++seed, 1.0, 3.0), r = leaf(c.shape, dt, ++seed, 0.5);
        Tensor w = c.weight ? leaf(c.normalized, dt, ++seed) : Tensor();
        Tensor b = c.bias ? leaf(c.normalized, dt, ++seed) : Tensor();
        Tensor R = randn(c.shape, TensorOptions(dt));
        auto grads = [&](const Tensor& y) {
          for (Tensor* t : {&x, &r, &w, &b})
            if (t->defined()) t->zero_grad();
          sum(mul(y, R)).backward();
          std::vector<Tensor> g;
          for (Tensor* t : {&x, &r, &w, &b}) g.push_back(t->defined() ? t->grad().clone() : Tensor());
          return g;
        };
        Tensor want = layer_norm(add(x, r), c.normalized, w, b, 1e-5);
        std::vector<Tensor> want_g = grads(want);
        Tensor got = add_layer_norm(x, r, c.normalized, w, b, 1e-5);
        CHECK(got.requires_grad());
        check_bits("output", got, want);
        std::vector<Tensor> got_g = grads(got);
        const char* names[] = {"grad x", "grad residual", "grad weight", "grad bias"};
        for (size_t i = 0; i < 4; ++i)
          if (want_g[i].defined()) check_bits(names[i], got_g[i], want_g[i]);
        // d(x + r)/dx = d(x + r)/dr: one gradient.
        check_bits("grad x = grad residual", got_g[0], got_g[1]);
        // Without a graph the sum is not kept; the values are the same.
        NoGradGuard no_grad;
        Tensor plain = add_layer_norm(x, r, c.normalized, w, b, 1e-5);
        CHECK_FALSE(plain.requires_grad());
        check_bits("output without grad", plain, want.detach());
      }
    }
  }
}

TEST_CASE("add_layer_norm: strided inputs, some inputs without grad, empty input, big eps") {
  Tensor xt = leaf({24, 10}, kFloat32, 1).t();  // (10, 24), not contiguous
  Tensor r = leaf({10, 24}, kFloat32, 2);
  Tensor w = leaf({24}, kFloat32, 3);
  check_bits("transposed x", add_layer_norm(xt, r, {24}, w, Tensor(), 0.5),
             layer_norm(add(xt, r), {24}, w, Tensor(), 0.5));
  check_bits("transposed residual", add_layer_norm(r, xt, {24}), layer_norm(add(r, xt), {24}));
  {
    NoGradGuard no_grad;
    check_bits("transposed, no grad", add_layer_norm(xt, r, {24}, w), layer_norm(add(xt, r), {24}, w));
  }
  // Only the weight needs a gradient: the sum is still kept for it.
  Tensor x = randn({10, 24}), rd = r.detach();
  Tensor R = randn({10, 24});
  w.zero_grad();
  sum(mul(layer_norm(add(x, rd), {24}, w), R)).backward();
  Tensor want = w.grad().clone();
  w.zero_grad();
  sum(mul(add_layer_norm(x, rd, {24}, w), R)).backward();
  check_bits("grad weight alone", w.grad(), want);
  // Only the residual: x (a constant) gets nothing.
  r.zero_grad();
  sum(mul(add_layer_norm(x, r, {24}), R)).backward();
  CHECK_FALSE(x.grad().defined());
  CHECK(r.grad().defined());
  // No rows: an empty result, and a zero weight gradient.
  Tensor e = add_layer_norm(empty({0, 24}), empty({0, 24}), {24}, w);
  CHECK(shape_str(e.shape()) == "(0, 24)");
  w.zero_grad();
  sum(e).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().abs().sum().item() == 0.0);
}

TEST_CASE("add_layer_norm_with_sum: the sum and the norm of add then layer_norm, bits and gradients") {
  for (const LnCase& c : kLnCases) {
    SUBCASE(c.name.c_str()) {
      Tensor x = leaf(c.shape, kFloat32, 7), r = leaf(c.shape, kFloat32, 8);
      Tensor w = c.weight ? leaf(c.normalized, kFloat32, 9) : Tensor();
      Tensor b = c.bias ? leaf(c.normalized, kFloat32, 10) : Tensor();
      Tensor R1 = randn(c.shape), R2 = randn(c.shape);
      // A pre-norm block: the sum goes on as the residual stream, the norm to the next sub-layer.
      auto run = [&](bool fused) {
        for (Tensor* t : {&x, &r, &w, &b})
          if (t->defined()) t->zero_grad();
        Tensor s, n;
        if (fused) {
          SumAndNorm o = add_layer_norm_with_sum(x, r, c.normalized, w, b);
          s = o.sum, n = o.norm;
        } else {
          s = add(x, r);
          n = layer_norm(s, c.normalized, w, b);
        }
        add(sum(mul(s, R1)), sum(mul(mul(n, n), R2))).backward();
        std::vector<Tensor> out{s.detach(), n.detach()};
        for (Tensor* t : {&x, &r, &w, &b}) out.push_back(t->defined() ? t->grad().clone() : Tensor());
        return out;
      };
      std::vector<Tensor> want = run(false), got = run(true);
      const char* names[] = {"sum", "norm", "grad x", "grad residual", "grad weight", "grad bias"};
      for (size_t i = 0; i < want.size(); ++i)
        if (want[i].defined()) check_bits(names[i], got[i], want[i]);
    }
  }
}

TEST_CASE("add_layer_norm: bad input names the op and what was given") {
  using kiln::testing::error_of;
  Tensor x = ones({2, 3});
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({3, 2}), {3}), "residual", "(3, 2)", "(2, 3)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({3}), {3}), "residual", "(3,)", "(2, 3)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, ones({2, 3}, kFloat64), {3}), "residual", "float64",
                     "float32");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, Tensor(), {3}), "residual", "undefined");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(ones({2, 3}, kInt64), ones({2, 3}, kInt64), {3}), "int64");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {4}), "(2, 3)", "(4,)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, ones({4})), "weight", "(4,)", "(3,)");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, Tensor(), ones({3}, kFloat64)), "bias",
                     "float64");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm(x, x, {3}, Tensor(), Tensor(), -1.0), "eps", "-1");
  CHECK_ERROR_STARTS("[add_layer_norm]", add_layer_norm_with_sum(x, ones({2, 4}), {3}), "residual", "(2, 4)");
}

// ====================================================================== KVCache

namespace {

// (N, L, E) values numbered from `start`, so every position is recognisable.
Tensor positions(int64_t N, int64_t L, int64_t E, double start) {
  return arange(start, start + static_cast<double>(N * L * E), 1.0).reshape({N, L, E});
}

}  // namespace

TEST_CASE("KVCache: appends into room that doubles; the views see the filled part; beams reorder it") {
  tr::KVCache c;
  CHECK(c.empty());
  CHECK(c.length() == 0);
  CHECK_FALSE(c.k().defined());
  std::vector<Tensor> ks, vs;
  std::vector<int64_t> capacities;
  const void* data = nullptr;
  int64_t moves = 0;
  for (int64_t step = 0; step < 40; ++step) {
    const int64_t L = step == 0 ? 3 : 1;  // a prompt of three positions, then one at a time
    Tensor k = positions(2, L, 4, 1000.0 * static_cast<double>(step)), v = mul(k, -1.0);
    c.append(k, v);
    ks.push_back(k);
    vs.push_back(v);
    if (capacities.empty() || capacities.back() != c.capacity()) capacities.push_back(c.capacity());
    if (c.k().data_ptr() != data) ++moves;
    data = c.k().data_ptr();
  }
  CHECK(c.length() == 42);
  CHECK(c.batch() == 2);
  // The first append keeps the given tensors; then 16, doubled as it fills.
  CHECK(capacities == std::vector<int64_t>{3, 16, 32, 64});
  CHECK(moves == 4);  // the keys moved only when the room grew
  check_bits("keys", c.k(), cat(ks, 1));
  check_bits("values", c.v(), cat(vs, 1));
  // A view taken earlier still shows its positions after later appends.
  Tensor early = c.k();
  c.append(positions(2, 1, 4, -5.0), positions(2, 1, 4, -6.0));
  check_bits("an earlier view", early, cat(ks, 1));
  ks.push_back(positions(2, 1, 4, -5.0));
  vs.push_back(positions(2, 1, 4, -6.0));
  // Beams: rows picked (and repeated) by index, negative ones from the end, the room
  // kept, appends go on.
  Tensor index = from_vector<int64_t>({1, -1, 0}, {3});
  c.select_batch(index);
  CHECK(c.batch() == 3);
  CHECK(c.length() == 43);
  CHECK(c.capacity() == 64);
  check_bits("reordered keys", c.k(), index_select(cat(ks, 1), 0, index));
  check_bits("reordered values", c.v(), index_select(cat(vs, 1), 0, index));
  CHECK_ERROR_STARTS("[KVCache::select_batch]", c.select_batch(from_vector<int64_t>({0, 3}, {2})), "index 3",
                     "3 rows");
  CHECK_ERROR_STARTS("[KVCache::select_batch]", c.select_batch(from_vector<int64_t>({0, 1}, {1, 2})), "(1, 2)");
  CHECK_ERROR_STARTS("[KVCache::select_batch]", c.select_batch(from_vector<double>({0}, {1})), "float64");
  CHECK(c.batch() == 3);  // unchanged by the refused calls
  const void* before = c.k().data_ptr();
  c.append(positions(3, 2, 4, 7.0), positions(3, 2, 4, 8.0));
  CHECK(c.k().data_ptr() == before);
  check_bits("keys after reorder and append", c.k(),
             cat({index_select(cat(ks, 1), 0, index), positions(3, 2, 4, 7.0)}, 1));
  // assign: contents replaced, as given.
  Tensor mk = positions(3, 5, 4, 0.0);
  c.assign(mk, mk);
  CHECK(c.length() == 5);
  CHECK(c.k().data_ptr() == mk.data_ptr());
  // Appends that do not fit the cache are errors naming both shapes.
  CHECK_ERROR_STARTS("[KVCache::append]", c.append(positions(2, 1, 4, 0), positions(2, 1, 4, 0)), "(2, 1, 4)",
                     "(3, 5, 4)");
  CHECK_ERROR_STARTS("[KVCache::append]", c.append(positions(3, 1, 5, 0), positions(3, 1, 4, 0)), "(3, 1, 5)");
  CHECK_ERROR_STARTS("[KVCache::append]", c.append(ones({3, 4}), ones({3, 4})), "(3, 4)");
}

TEST_CASE("KVCache: under grad mode the new positions keep their gradient (concatenated, no in-place write)") {
  manual_seed(3);
  tr::MultiheadAttention mha(8, 2, {.batch_first = true});
  tr::KVCache cache;
  Tensor x = randn({2, 3, 8}).requires_grad_();
  Tensor total;
  for (int64_t i = 0; i < 3; ++i) {
    Tensor xi = x.narrow(1, i, 1);
    Tensor out = mha.forward_cached(xi, xi, cache, /*static_kv=*/false).output;
    total = total.defined() ? add(total, sum(out)) : sum(out);
  }
  CHECK(cache.length() == 3);
  total.backward();  // no step's saved keys were overwritten
  REQUIRE(x.grad().defined());
  // The same as attention over the whole prefix with a causal mask, summed.
  Tensor xr = x.detach().requires_grad_();
  Tensor full = mha.forward(xr, xr, xr, Tensor(), false, tr::causal_mask(3)).output;
  sum(full).backward();
  CHECK(max(abs(sub(x.grad(), xr.grad()))).item() < 1e-5);
}

TEST_CASE("cached decoding of 220 tokens gives the tokens of the uncached path (greedy and beam search)") {
  // A random float64 model (no near-ties between cached and uncached logits) whose end
  // token never wins, so every sentence runs the whole max_len.
  tr::Seq2SeqOptions o;
  o.src_vocab_size = 30;
  o.tgt_vocab_size = 40;
  o.d_model = 16;
  o.nhead = 2;
  o.num_encoder_layers = 1;
  o.num_decoder_layers = 2;
  o.dim_feedforward = 32;
  o.dropout = 0.0;
  o.max_len = 256;
  manual_seed(17);
  tr::Seq2SeqTransformer model(o);
  model.to(kFloat64);
  tr::DecodeOptions d;
  d.bos_id = 1;
  d.eos_id = 2;
  d.max_len = 220;
  {
    NoGradGuard no_grad;
    model.generator->bias.narrow(0, d.eos_id, 1).fill_(-1e9);
  }
  Tensor src = data::pad_sequences({{4, 5, 6, 7, 8}, {9, 10, 11}});
  std::vector<std::vector<int64_t>> cached = tr::greedy_decode(model, src, d);
  d.use_cache = false;
  std::vector<std::vector<int64_t>> full = tr::greedy_decode(model, src, d);
  REQUIRE(cached.size() == 2);
  CHECK(cached[0].size() == 220);
  CHECK(cached[1].size() == 220);
  CHECK(cached == full);
  tr::BeamOptions b;
  static_cast<tr::DecodeOptions&>(b) = d;
  b.beam_width = 3;
  Tensor one = src.narrow(0, 0, 1);
  std::vector<tr::Hypothesis> hf = tr::beam_search(model, one, b);
  b.use_cache = true;
  std::vector<tr::Hypothesis> hc = tr::beam_search(model, one, b);
  REQUIRE(hc.size() == hf.size());
  REQUIRE_FALSE(hc.empty());
  CHECK(hc.front().tokens.size() == 220);
  for (size_t k = 0; k < hc.size(); ++k) {
    CHECK(hc[k].tokens == hf[k].tokens);
    CHECK(hc[k].log_prob == doctest::Approx(hf[k].log_prob).epsilon(1e-9));
  }
}

TEST_CASE("relu_dropout of a given-up input: written over it, the bits and gradients of the copying path") {
  for (bool autocast : {false, true}) {
    CAPTURE(autocast);
    Tensor x = leaf({64, 32}, kFloat32, 21), w = leaf({48, 32}, kFloat32, 22, 0.2), b = leaf({48}, kFloat32, 23);
    Tensor w2 = leaf({8, 48}, kFloat32, 24, 0.2);
    // forward through relu_dropout and a second linear, as a feed-forward layer; returns
    // the loss and the tensor bytes allocated by relu_dropout's call
    auto run = [&](bool give_up) {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(kBFloat16);
      Generator g(5);
      Tensor h = linear(x, w, b);  // (64, 48) float32, held by h alone
      const int64_t before = memory_stats(kCPU).allocated_bytes;
      Tensor y = give_up ? relu_dropout(std::move(h), 0.3, true, &g) : relu_dropout(h, 0.3, true, &g);
      const int64_t added = memory_stats(kCPU).allocated_bytes - before;
      CHECK(give_up == !h.defined());  // the moved-from handle lets go
      Tensor loss = sum(linear(y, w2));
      return std::make_pair(std::make_pair(y.detach(), loss), added);
    };
    auto grads = [&](const Tensor& loss) {
      for (Tensor* t : {&x, &w, &b, &w2}) t->zero_grad(true);
      loss.backward();
      return std::vector<Tensor>{x.grad(), w.grad(), b.grad(), w2.grad()};
    };
    auto [copied, copied_bytes] = run(false);
    const std::vector<Tensor> want = grads(copied.second);
    auto [over, over_bytes] = run(true);
    const std::vector<Tensor> got = grads(over.second);
    check_bits("y", over.first, copied.first);
    for (size_t i = 0; i < got.size(); ++i) check_bits("grad " + std::to_string(i), got[i], want[i]);
    // one (64, 48) float32 tensor fewer: y is h's memory
    CHECK(copied_bytes - over_bytes == 64 * 48 * 4);
  }
}

TEST_CASE("relu_dropout of a given-up input that something else reaches: not written over") {
  Generator g(3);
  Tensor x = leaf({16, 8}, kFloat32, 31);
  Tensor h = x * 2.0;
  Tensor kept = h;                     // a second handle
  const Tensor before = kept.detach().clone();
  Tensor y = relu_dropout(std::move(h), 0.5, true, &g);
  check_bits("the other handle's values", kept.detach(), before);
  CHECK(y.data_ptr() != kept.data_ptr());
  Tensor base = x * 4.0;
  const Tensor base_before = base.detach().clone();
  Tensor yv = relu_dropout(base.narrow(0, 0, 8), 0.5, true, &g);
  check_bits("the base of a view", base.detach(), base_before);
  // a leaf that requires grad keeps its values and gets its gradient
  Tensor leaf_in = leaf({4, 4}, kFloat32, 32);
  const Tensor leaf_before = leaf_in.detach().clone();
  Tensor copy = leaf_in;
  sum(relu_dropout(std::move(copy), 0.5, true, &g)).backward();
  check_bits("a leaf's values", leaf_in.detach(), leaf_before);
  CHECK(leaf_in.grad().defined());
  CHECK(yv.data_ptr() != base.data_ptr());
}

TEST_CASE("linear of a given-up input under autocast: its float32 memory goes before the output; same bits") {
  Tensor w = leaf({24, 32}, kFloat32, 41, 0.2), b = leaf({24}, kFloat32, 42), x = leaf({64, 32}, kFloat32, 43);
  auto run = [&](bool give_up) {
    for (Tensor* t : {&w, &b, &x}) t->zero_grad(true);
    AutocastGuard autocast(kBFloat16);
    Tensor h = x * 1.5;  // (64, 32) float32, a result held by h alone
    reset_peak_memory(kCPU);
    const int64_t before = memory_stats(kCPU).allocated_bytes;
    Tensor y = give_up ? linear(std::move(h), w, b) : linear(h, w, b);
    const int64_t peak = memory_stats(kCPU).peak_bytes - before;
    CHECK(give_up == !h.defined());
    sum(y * y).backward();
    return std::make_tuple(y.detach(), x.grad(), w.grad(), b.grad(), peak);
  };
  auto [y0, gx0, gw0, gb0, peak0] = run(false);
  auto [y1, gx1, gw1, gb1, peak1] = run(true);
  check_bits("output", y1, y0);
  check_bits("grad x", gx1, gx0);
  check_bits("grad w", gw1, gw0);
  check_bits("grad b", gb1, gb0);
  // Beyond what was held before: the bfloat16 copies of the input and the weight, then the
  // (64, 24) float32 output (and, where the bfloat16 GEMM is not oneDNN's, the float32
  // operands it widens into); given up, the input's 64 x 32 float32 went first, so the
  // peak is lower by what it freed, as far as what came after the copies used it: with
  // oneDNN the output fits in it and the copies are the peak.
  const int64_t copies = 64 * 32 * 2 + 24 * 32 * 2, output = 64 * 24 * 4, input = 64 * 32 * 4;
  CHECK(peak0 >= copies + output);
  CHECK(peak1 == copies + std::max<int64_t>(0, peak0 - copies - input));
}

TEST_CASE("linear of a given-up input: a leaf, a view and another handle keep theirs; a subclass's forward runs") {
  AutocastGuard autocast(kBFloat16);
  Tensor w = leaf({3, 4}, kFloat32, 51);
  // a leaf that requires grad, given up: its gradient still reaches it
  Tensor l = leaf({2, 4}, kFloat32, 52);
  Tensor copy = l;
  sum(linear(std::move(copy), w)).backward();
  REQUIRE(l.grad().defined());
  CHECK(l.grad().shape() == Shape{2, 4});
  // another handle to the same tensor keeps its values
  Tensor h = l * 2.0;
  Tensor other = h;
  const Tensor h_before = h.detach().clone();
  (void)linear(std::move(h), w);
  check_bits("the other handle", other.detach(), h_before);
  // a view of a larger result keeps its base's memory
  Tensor base = l * 3.0;
  const Tensor base_before = base.detach().clone();
  (void)linear(base.narrow(0, 0, 1), w);
  check_bits("a view's base", base.detach(), base_before);
  // nn::Linear's rvalue forward still runs a subclass's own forward
  struct Doubling : nn::Linear {
    using nn::Linear::Linear;
    using nn::Linear::forward;
    Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
  };
  Doubling d(4, 3);
  nn::Linear& as_linear = d;
  Tensor in = l.detach();
  check_bits("subclass forward", as_linear.forward(in * 1.0), d.nn::Linear::forward(in) * 2.0);
}
