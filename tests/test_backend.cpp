// The kernel interface (backend/backend.h): every fused kernel's composed default (run by
// the reference backend, which implements only the required core) against the CPU
// backend's fused kernel on the same tensors; supports(); and the choice of the CPU's
// backend (KILN_CPU_BACKEND, register_backend).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/reference/reference_backend.h"
#include "test_util.h"

using namespace kiln;
using kiln::testing::Tol;

namespace {

// The two backends compared: the CPU's fused kernels, the base class's composed defaults.
Backend& fused() { return cpu::cpu_backend(); }
Backend& composed() { return reference_backend(); }

Tol tol_for(DType t) { return t == kFloat64 ? Tol{1e-12, 1e-13} : Tol{2e-5, 2e-6}; }

Tensor out_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype())); }

// The outputs of one kernel call on each backend, compared element by element.
void check_same(const std::string& what, const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    testing::check_matches(what + " output " + std::to_string(i), got[i], want[i], tol_for(want[i].dtype()));
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  const Tensor f = t.to(kFloat32).contiguous();
  std::vector<uint32_t> bits(static_cast<size_t>(f.numel()));
  std::memcpy(bits.data(), f.data<float>(), bits.size() * sizeof(float));
  return bits;
}

const std::vector<DType> kFloats = {kFloat32, kFloat64};

}  // namespace

TEST_CASE("composed softmax and log_softmax, forward and backward, match the fused kernels") {
  manual_seed(1);
  // (2, 5, 150) over dim 1: 150 neighbouring lines, more than one block of them.
  for (DType dt : kFloats) {
    for (const bool log : {false, true}) {
      for (const auto& case_ : std::vector<std::pair<Shape, int64_t>>{{{3, 4, 7}, 0}, {{3, 4, 7}, 2},
                                                                        {{2, 5, 150}, 1}}) {
        const Shape shape = case_.first;
        const int64_t dim = case_.second;
        CAPTURE(dt);
        CAPTURE(log);
        CAPTURE(dim);
        CAPTURE(shape_str(shape));
        const Tensor x = mul(randn(shape, dt), 3.0), g = randn(shape, dt);
        std::vector<Tensor> y(2);
        for (int b = 0; b < 2; ++b) {
          y[b] = out_like(x);
          (b ? composed() : fused()).softmax(x, dim, log, y[b]);
        }
        check_same("softmax", {y[1]}, {y[0]});
        std::vector<Tensor> gx(2);
        for (int b = 0; b < 2; ++b) {
          gx[b] = out_like(x);
          (b ? composed() : fused()).softmax_backward(y[0], g, dim, log, gx[b]);
        }
        check_same("softmax_backward", {gx[1]}, {gx[0]});
      }
    }
  }
}

TEST_CASE("composed layer_norm, its backward and add_layer_norm match the fused kernels") {
  manual_seed(2);
  const int64_t rows = 6, n = 10;
  for (DType dt : kFloats) {
    for (const bool affine : {true, false}) {
      CAPTURE(dt);
      CAPTURE(affine);
      const Tensor x = add(mul(randn({rows, n}, dt), 2.0), 0.5), r = randn({rows, n}, dt), g = randn({rows, n}, dt);
      const Tensor w = affine ? randn({n}, dt) : Tensor(), b = affine ? randn({n}, dt) : Tensor();
      std::vector<std::vector<Tensor>> out(2);
      for (int k = 0; k < 2; ++k) {
        out[k] = {out_like(x), empty({rows}, TensorOptions(dt)), empty({rows}, TensorOptions(dt))};
        (k ? composed() : fused()).layer_norm(x, w, b, 1e-5, out[k][0], out[k][1], out[k][2]);
      }
      check_same("layer_norm", out[1], out[0]);
      std::vector<std::vector<Tensor>> grads(2);
      for (int k = 0; k < 2; ++k) {
        grads[k] = {out_like(x), affine ? out_like(w) : Tensor(), affine ? out_like(b) : Tensor()};
        (k ? composed() : fused()).layer_norm_backward(g, x, w, out[0][1], out[0][2], grads[k][0], grads[k][1],
                                                        grads[k][2]);
      }
      check_same("layer_norm_backward grad_x", {grads[1][0]}, {grads[0][0]});
      if (affine) check_same("layer_norm_backward grad_weight, grad_bias", {grads[1][1], grads[1][2]},
                             {grads[0][1], grads[0][2]});
      std::vector<std::vector<Tensor>> sums(2);
      for (int k = 0; k < 2; ++k) {
        sums[k] = {out_like(x), out_like(x), empty({rows}, TensorOptions(dt)), empty({rows}, TensorOptions(dt))};
        (k ? composed() : fused()).add_layer_norm(x, r, w, b, 1e-5, sums[k][0], sums[k][1], sums[k][2], sums[k][3],
                                                   Tensor());
      }
      check_same("add_layer_norm", sums[1], sums[0]);
    }
  }
  // The bfloat16 copy: y rounded, whoever writes it.
  const Tensor x = randn({rows, n}), r = randn({rows, n});
  const Tensor y = out_like(x), mean = empty({rows}), rstd = empty({rows});
  const Tensor low = empty({rows, n}, TensorOptions(kBFloat16));
  composed().add_layer_norm(x, r, Tensor(), Tensor(), 1e-5, Tensor(), y, mean, rstd, low);
  CHECK(bits_of(low) == bits_of(y.to(kBFloat16)));
}

TEST_CASE("composed rms_norm and rotary match the fused kernels") {
  manual_seed(9);
  for (DType dt : kFloats) {
    CAPTURE(dt);
    const Tensor x = randn({6, 37}, dt) * 3.0, w = randn({37}, dt);
    for (const Tensor& weight : {w, Tensor()}) {
      std::vector<Tensor> y = {out_like(x), out_like(x)};
      for (int b = 0; b < 2; ++b) (b ? composed() : fused()).rms_norm(x, weight, 1e-5, y[b]);
      check_same("rms_norm", {y[1]}, {y[0]});
    }
    // (B, T, H, d) with (T, 1, d/2) tables broadcast over the batch and the heads.
    const Tensor q = randn({2, 5, 3, 8}, dt), angles = randn({5, 1, 4}, dt);
    const Tensor c = cos(angles).expand({2, 5, 3, 4}), s = sin(angles).expand({2, 5, 3, 4});
    for (const bool interleaved : {true, false}) {
      CAPTURE(interleaved);
      std::vector<Tensor> y = {out_like(q), out_like(q)};
      for (int b = 0; b < 2; ++b) (b ? composed() : fused()).rotary(q, c, s, interleaved, y[b]);
      check_same("rotary", {y[1]}, {y[0]});
    }
  }
}

TEST_CASE("composed embedding and its backward match the fused kernels, and refuse bad indices alike") {
  manual_seed(3);
  for (DType dt : kFloats) {
    CAPTURE(dt);
    const Tensor weight = randn({9, 5}, dt);
    const Tensor idx = tensor({3, 0, 8, 3, 1, 3}).reshape({2, 3});
    std::vector<Tensor> out(2);
    for (int k = 0; k < 2; ++k) {
      out[k] = empty({2, 3, 5}, TensorOptions(dt));
      (k ? composed() : fused()).embedding(weight, idx, out[k]);
    }
    check_same("embedding", {out[1]}, {out[0]});
    const Tensor g = randn({2, 3, 5}, dt);
    for (const int64_t padding : {int64_t{-1}, int64_t{3}}) {
      CAPTURE(padding);
      std::vector<Tensor> gw(2);
      for (int k = 0; k < 2; ++k) {
        gw[k] = zeros({9, 5}, dt);
        (k ? composed() : fused()).embedding_backward(g, idx, padding, gw[k]);
      }
      check_same("embedding_backward", {gw[1]}, {gw[0]});
    }
  }
  const Tensor weight = randn({4, 2}), bad = tensor({1, 4});
  for (Backend* be : {&fused(), &composed()}) {
    const std::string msg = testing::error_of([&] { be->embedding(weight, bad, empty({2, 2})); });
    CHECK(msg == "[embedding] index 4 out of range for an embedding of 4 rows (at position 1)");
  }
}

TEST_CASE("composed cross_entropy and its backward match the fused kernels") {
  manual_seed(4);
  const int64_t N = 7, C = 5;
  const Tensor targets = tensor({0, 4, -100, 2, 2, 1, 3});
  for (DType dt : kFloats) {
    for (const bool weighted : {false, true}) {
      for (const double smoothing : {0.0, 0.2}) {
        CAPTURE(dt);
        CAPTURE(weighted);
        CAPTURE(smoothing);
        const Tensor logits = mul(randn({N, C}, dt), 2.0), g_row = randn({N}, dt);
        const Tensor w = weighted ? add(rand({C}, dt), 0.5) : Tensor();
        std::vector<std::vector<Tensor>> out(2);
        for (int k = 0; k < 2; ++k) {
          out[k] = {empty({N}, TensorOptions(dt)), empty({N}, TensorOptions(dt)), empty({N}, TensorOptions(dt))};
          (k ? composed() : fused()).cross_entropy(logits, targets, w, -100, smoothing, out[k][0], out[k][1], out[k][2]);
        }
        check_same("cross_entropy", out[1], out[0]);
        std::vector<Tensor> grad(2);
        for (int k = 0; k < 2; ++k) {
          grad[k] = out_like(logits);
          (k ? composed() : fused()).cross_entropy_backward(logits, targets, w, -100, smoothing, out[0][2], g_row,
                                                             grad[k]);
        }
        check_same("cross_entropy_backward", {grad[1]}, {grad[0]});
      }
    }
  }
  const Tensor logits = randn({2, 3});
  for (Backend* be : {&fused(), &composed()}) {
    const std::string msg = testing::error_of([&] {
      be->cross_entropy(logits, tensor({1, 3}), Tensor(), -100, 0.0, empty({2}), empty({2}), empty({2}));
    });
    CHECK(msg == "[cross_entropy] target 3 out of range for 3 classes (at position 1)");
  }
}

TEST_CASE("composed Adam gives the fused kernel's bits: the same arithmetic, step by step") {
  manual_seed(5);
  for (DType dt : kFloats) {
    for (const int variant : {0, 1, 2, 3}) {
      CAPTURE(dt);
      CAPTURE(variant);
      AdamStepParams hp;
      hp.lr = 0.01;
      hp.step = 3;
      hp.weight_decay = variant == 0 ? 0.0 : 0.1;
      hp.decoupled = variant == 2;
      hp.amsgrad = variant == 3;
      hp.maximize = variant == 3;
      const Tensor p0 = randn({33}, dt), g = randn({33}, dt), m0 = randn({33}, dt), v0 = rand({33}, dt);
      const Tensor vmax0 = rand({33}, dt);
      std::vector<std::vector<Tensor>> state(2);
      for (int k = 0; k < 2; ++k) {
        state[k] = {p0.clone(), m0.clone(), v0.clone(), hp.amsgrad ? vmax0.clone() : Tensor()};
        (k ? composed() : fused()).adam_step(state[k][0], g, state[k][1], state[k][2], state[k][3], hp);
      }
      for (size_t i = 0; i < 3; ++i) CHECK(equal(state[1][i], state[0][i]));
      if (hp.amsgrad) CHECK(equal(state[1][3], state[0][3]));
    }
  }
}

TEST_CASE("composed dropout and relu_dropout give the fused kernels' bits: the same mask stream") {
  manual_seed(6);
  for (DType dt : kFloats) {
    CAPTURE(dt);
    const Tensor x = randn({1001}, dt);
    std::vector<Tensor> y(2), r(2), gx(2);
    for (int k = 0; k < 2; ++k) {
      y[k] = out_like(x);
      r[k] = out_like(x);
      (k ? composed() : fused()).dropout(x, 11, 5, 0.3, y[k]);
      (k ? composed() : fused()).relu_dropout(x, 11, 5, 0.3, r[k], Tensor());
    }
    CHECK(equal(y[1], y[0]));
    CHECK(equal(r[1], r[0]));
    const Tensor g = randn({1001}, dt);
    for (int k = 0; k < 2; ++k) {
      gx[k] = out_like(x);
      (k ? composed() : fused()).relu_dropout_backward(g, r[0], 0.3, gx[k]);
    }
    CHECK(equal(gx[1], gx[0]));
  }
}

TEST_CASE("composed attention and its backward match the fused kernels: masks, dropout, dead rows") {
  manual_seed(7);
  const int64_t N = 2, H = 3, S = 5, E = 6;
  // 4 queries take the CPU's few-query path (dot products), 12 its GEMMs.
  for (const int64_t L : {int64_t{4}, int64_t{12}})
  for (DType dt : kFloats) {
    for (const int mask_kind : {0, 1, 2}) {  // none, bool (one row fully masked), float
      for (const double p : {0.0, 0.25}) {
        CAPTURE(L);
        CAPTURE(dt);
        CAPTURE(mask_kind);
        CAPTURE(p);
        const Tensor q = randn({N, H, L, E}, dt), k = randn({N, H, S, E}, dt), v = randn({N, H, S, E}, dt);
        Tensor mask;
        if (mask_kind == 1) {
          mask = gt(rand({N, H, L, S}), 0.6);
          mask.select(0, 1).select(0, 2).select(0, 3).fill_(1.0);  // nothing to attend to
        } else if (mask_kind == 2) {
          mask = randn({1, 1, L, S}, dt).expand({N, H, L, S});
        }
        std::vector<std::vector<Tensor>> out(2);
        for (int b = 0; b < 2; ++b) {
          out[b] = {empty({N, H, L, E}, TensorOptions(dt)), empty({N, H, L}, TensorOptions(dt))};
          (b ? composed() : fused()).attention(q, k, v, mask, 0.4, p, 13, 2, out[b][0], out[b][1]);
        }
        check_same("attention", out[1], out[0]);
        const Tensor g = randn({N, H, L, E}, dt);
        std::vector<std::vector<Tensor>> grads(2);
        for (int b = 0; b < 2; ++b) {
          grads[b] = {out_like(q), out_like(k), out_like(v)};
          (b ? composed() : fused()).attention_backward(g, q, k, v, mask, out[0][0], out[0][1], 0.4, p, 13, 2,
                                                         grads[b][0], grads[b][1], grads[b][2]);
        }
        check_same("attention_backward", grads[1], grads[0]);
      }
    }
  }
}

TEST_CASE("supports: the base takes no bfloat16 form, the CPU autocast's, the wrapper every one") {
  for (const Kernel kernel : {Kernel::Matmul, Kernel::Attention, Kernel::AddLayerNorm, Kernel::ReluDropout}) {
    CAPTURE(static_cast<int>(kernel));
    CHECK(composed().supports(kernel, kFloat32, kFloat32));
    CHECK_FALSE(composed().supports(kernel, kBFloat16, kFloat32));
    CHECK_FALSE(composed().supports(kernel, kFloat32, kBFloat16));
    CHECK(fused().supports(kernel, kFloat64, kFloat64));
    CHECK_FALSE(fused().supports(kernel, kBFloat16, kBFloat16));
    CHECK(backend_for(kCPU).supports(kernel, kBFloat16, kBFloat16));
  }
  CHECK(fused().supports(Kernel::Matmul, kBFloat16, kFloat32));
  CHECK(fused().supports(Kernel::Attention, kBFloat16, kFloat32));
  CHECK_FALSE(fused().supports(Kernel::Matmul, kFloat32, kBFloat16));
  CHECK(fused().supports(Kernel::AddLayerNorm, kFloat32, kBFloat16));
  CHECK(fused().supports(Kernel::ReluDropout, kFloat32, kBFloat16));
  CHECK_FALSE(fused().supports(Kernel::ReluDropout, kBFloat16, kFloat32));
}

namespace {

// A backend of the required core that forwards to the reference backend and counts the
// calls: proof that ops reach a registered backend, fused kernels through the defaults.
class CountingBackend final : public Backend {
 public:
  int calls = 0;
  Device device() const override { return kCPU; }
  void copy(const Tensor& s, const Tensor& d) override { ++calls, ref().copy(s, d); }
  void fill(const Tensor& d, double v) override { ++calls, ref().fill(d, v); }
  void arange(const Tensor& o, double s, double st) override { ++calls, ref().arange(o, s, st); }
  void unary(UnaryOp op, const Tensor& x, const Tensor& o, double a, double b) override { ++calls, ref().unary(op, x, o, a, b); }
  void binary(BinaryOp op, const Tensor& x, const Tensor& y, const Tensor& o) override { ++calls, ref().binary(op, x, y, o); }
  void where(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& o) override { ++calls, ref().where(c, a, b, o); }
  void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& o, const Tensor* i) override {
    ++calls, ref().reduce(op, x, dims, o, i);
  }
  using Backend::matmul;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& o, bool acc) override { ++calls, ref().matmul(a, b, o, acc); }
  void uniform(const Tensor& o, uint64_t s, uint64_t b, double lo, double hi) override { ++calls, ref().uniform(o, s, b, lo, hi); }
  void normal(const Tensor& o, uint64_t s, uint64_t b, double m, double sd) override { ++calls, ref().normal(o, s, b, m, sd); }
  void bernoulli(const Tensor& o, uint64_t s, uint64_t b, double p) override { ++calls, ref().bernoulli(o, s, b, p); }
  void randint(const Tensor& o, uint64_t s, uint64_t b, int64_t lo, int64_t hi) override { ++calls, ref().randint(o, s, b, lo, hi); }

 private:
  static Backend& ref() { return reference_backend(); }
};

}  // namespace

TEST_CASE("register_backend replaces the CPU's backend until it is given back; KILN_CPU_BACKEND names it") {
  const char* env = std::getenv("KILN_CPU_BACKEND");
  const bool reference = env && std::string(env) == "reference";
  CHECK(std::string(cpu_backend_name()) == (reference ? "reference (the required kernels in plain loops)" : "cpu"));
  CHECK(config().find(std::string("CPU backend: ") + cpu_backend_name()) != std::string::npos);
  manual_seed(8);
  const Tensor x = randn({4, 6});
  const Tensor want = softmax(x, 1);
  CountingBackend counting;
  register_backend(DeviceType::CPU, &counting);
  const Tensor got = softmax(x, 1);
  CHECK(counting.calls >= 5);  // max, sub, exp, sum, div: composed from the core
  CHECK(std::string(cpu_backend_name()) == "registered");
  register_backend(DeviceType::CPU, nullptr);
  const int after = counting.calls;
  softmax(x, 1);
  CHECK(counting.calls == after);
  testing::check_matches("softmax on the counting backend", got, want, {1e-6, 1e-7});
}
