// Bad input: each documented error is a kiln::Error (never a crash, abort or garbage)
// whose message starts with the op in brackets and shows what was given.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "test_util.h"

using namespace kiln;
using kiln::testing::error_of;

TEST_CASE("every message starts with the op in brackets") {
  std::string msg = error_of([] { matmul(ones({2, 3}), ones({4, 5})); });
  CHECK(msg.rfind("[matmul] ", 0) == 0);
  CHECK(msg.find("[matmul] shapes (2, 3) and (4, 5) cannot be multiplied") == 0);
}

TEST_CASE("shapes that don't fit") {
  SUBCASE("broadcast in arithmetic") {
    CHECK_ERROR(add(ones({2, 3}), ones({4, 5})), "[add]", "(2, 3)", "(4, 5)", "broadcast");
    CHECK_ERROR(ones({2, 3}) * ones({3, 2}), "[mul]", "(2, 3)", "(3, 2)");
    CHECK_ERROR(ones({3}) - ones({4}), "[sub]", "(3,)", "(4,)");  // sub names itself, not the add it is built on
    CHECK_ERROR(div(ones({2, 3}), ones({2})), "[div]", "(2, 3)", "(2,)");
    CHECK_ERROR(where(ones({2}) > 0.0, ones({3}), ones({2})), "[where]", "(2,)", "(3,)");
    CHECK_ERROR(masked_fill(ones({2}), ones({3, 2}) > 0.0, 0.0), "[masked_fill]", "(3, 2)", "(2,)");
  }
  SUBCASE("matmul") {
    CHECK_ERROR(matmul(ones({2, 3}), ones({4, 5})), "[matmul] shapes (2, 3) and (4, 5) cannot be multiplied");
    CHECK_ERROR(matmul(ones({3}), ones({4})), "[matmul]", "(3,)", "(4,)");
    CHECK_ERROR(matmul(ones({2, 3}), ones({4})), "[matmul]", "(2, 3)", "(4,)");
    CHECK_ERROR(matmul(ones({5, 2, 3}), ones({4, 5})), "[matmul]", "(5, 2, 3)", "(4, 5)");
    CHECK_ERROR(matmul(ones({2, 2, 3}), ones({3, 3, 4})), "[matmul]", "(2,)", "(3,)", "broadcast");
    CHECK_ERROR(matmul(scalar_tensor(1.0), ones({3})), "[matmul]", "()", "(3,)");
    CHECK_ERROR(mm(ones({2, 3, 4}), ones({4, 2})), "[mm]", "(2, 3, 4)", "(4, 2)");
    CHECK_ERROR(bmm(ones({2, 3, 4}), ones({3, 4, 2})), "[bmm]", "(2, 3, 4)", "(3, 4, 2)");
  }
  SUBCASE("cat and stack") {
    CHECK_ERROR(cat({ones({2, 3}), ones({2, 4})}, 0), "[cat]", "(2, 3)", "(2, 4)");
    CHECK_ERROR(cat({ones({2, 3}), ones({2})}, 0), "[cat]", "1 dimensions", "expected 2");
    CHECK_ERROR(cat({}, 0), "[cat]", "non-empty");
    CHECK_ERROR(cat({ones({2, 3}), ones({2, 3})}, 2), "[cat]", "dim 2", "2 dimensions");
    CHECK_ERROR(stack({ones({2, 3}), ones({3, 2})}), "[stack]", "(2, 3)", "(3, 2)");
  }
  SUBCASE("expand") {
    CHECK_ERROR(ones({2, 3}).expand({4, 5}), "[expand]", "(4, 5)", "(2, 3)");
    CHECK_ERROR(ones({2, 3}).expand({3}), "[expand]", "(1)", "(2)");
    CHECK_ERROR(ones({3}).expand({-1, 3}), "[expand]", "-1", "(-1, 3)");
  }
  SUBCASE("view and reshape with the wrong number of elements") {
    CHECK_ERROR(ones({2, 3}).view({4, 4}), "[view]", "(4, 4)", "(2, 3)", "6 elements");
    CHECK_ERROR(ones({2, 3}).reshape({4, -1}), "[reshape]", "(4, -1)", "(2, 3)");
    CHECK_ERROR(ones({2, 3}).view({-1, -1}), "[view]", "(-1, -1)", "only one");
    CHECK_ERROR(ones({2, 3}).view({-2, 3}), "[view]", "-2");
    CHECK_ERROR(zeros({2, -1}), "[empty]", "(2, -1)");
  }
  SUBCASE("layer_norm") {
    CHECK_ERROR(layer_norm(ones({2, 3}), {4}), "[layer_norm]", "(2, 3)", "(4,)");
    CHECK_ERROR(layer_norm(ones({2, 3}), {2, 3, 4}), "[layer_norm]", "(2, 3, 4)", "(2, 3)");
    CHECK_ERROR(layer_norm(ones({2, 3}), {3}, ones({4})), "[layer_norm]", "weight", "(4,)", "(3,)");
    CHECK_ERROR(layer_norm(ones({2, 3}), {3}, ones({3}), ones({2, 3})), "[layer_norm]", "bias", "(2, 3)",
                "(3,)");
    CHECK_ERROR(layer_norm(ones({2, 3}), {3}, ones({3}, kFloat64)), "[layer_norm]", "float64", "float32");
  }
  SUBCASE("cross_entropy target shape") {
    CHECK_ERROR(cross_entropy(ones({4, 3}), zeros({5}, kInt64)), "[cross_entropy]", "(4,)", "(5,)", "(4, 3)");
  }
  SUBCASE("backward with a gradient of the wrong shape") {
    Tensor x = ones({2, 3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.backward(ones({3, 2})), "[backward]", "(3, 2)", "(2, 3)");
  }
  SUBCASE("split, chunk, narrow, permute, in-place") {
    CHECK_ERROR(split(ones({5}), std::vector<int64_t>{2, 2}), "[split]", "(2, 2)", "5");
    CHECK_ERROR(ones({5}).chunk(0), "[chunk]", "0");
    CHECK_ERROR(ones({5}).split(0), "[split]", "0");
    CHECK_ERROR(ones({5}).narrow(0, 3, 3), "[narrow]", "3", "5");
    CHECK_ERROR(ones({2, 3}).permute({0, 0}), "[permute]", "repeated");
    CHECK_ERROR(ones({2, 3}).permute({0}), "[permute]", "1", "2");
    Tensor a = ones({2, 3});
    CHECK_ERROR(a.add_(ones({4, 3})), "[add_]", "(2, 3)", "(4, 3)");
    CHECK_ERROR(a.add_(ones({2, 2, 3})), "[add_]", "(2, 3)", "(2, 2, 3)");
    CHECK_ERROR(a.copy_(ones({4})), "[copy_]", "(4,)", "(2, 3)");
  }
}

TEST_CASE("wrong dtypes") {
  SUBCASE("embedding with float indices") {
    CHECK_ERROR(embedding(ones({5, 4}), zeros({3})), "[embedding]", "int64", "float32");
    CHECK_ERROR(embedding(ones({5, 4}, kInt64), zeros({3}, kInt64)), "[embedding]", "weight", "int64");
    CHECK_ERROR(embedding(ones({5}), zeros({3}, kInt64)), "[embedding]", "2-D", "(5,)");
  }
  SUBCASE("cross_entropy with float targets") {
    CHECK_ERROR(cross_entropy(ones({4, 3}), zeros({4})), "[cross_entropy]", "int64", "float32");
    CHECK_ERROR(cross_entropy(ones({4, 3}, kInt64), zeros({4}, kInt64)), "[cross_entropy]", "int64");
  }
  SUBCASE("matmul with a bool operand") {
    CHECK_ERROR(matmul(ones({2, 2}, kBool), ones({2, 2})), "[matmul]", "bool", "float32");
    CHECK_ERROR(matmul(ones({2, 2}, kInt64), ones({2, 2}, kInt64)), "[matmul]", "int64");
  }
  SUBCASE("requires_grad_ on an integer or bool tensor") {
    Tensor i = ones({3}, kInt64);
    CHECK_ERROR(i.requires_grad_(), "[requires_grad_]", "int64");
    Tensor b = ones({3}, kBool);
    CHECK_ERROR(b.requires_grad_(), "[requires_grad_]", "bool");
    CHECK_ERROR(ones({3}, TensorOptions(kInt64).requires_grad()), "[requires_grad_]", "int64");
    CHECK_FALSE(i.requires_grad());
  }
  SUBCASE("float32 with float64 in matmul") {
    CHECK_ERROR(matmul(ones({2, 2}), ones({2, 2}, kFloat64)), "[matmul]", "float32", "float64");
  }
  SUBCASE("arithmetic on two bool tensors") {
    Tensor b = ones({3}, kBool);
    CHECK_ERROR(b + b, "[add]", "bool");
    CHECK_ERROR(b * b, "[mul]", "bool");
    CHECK_ERROR(b / b, "[div]", "bool");
    CHECK_ERROR(-b, "[neg]", "bool");
    CHECK_ERROR(maximum(b, b), "[maximum]", "bool");
  }
  SUBCASE("floating-only ops on integers") {
    CHECK_ERROR(exp(ones({3}, kInt64)), "[exp]", "int64");
    CHECK_ERROR(softmax(ones({3}, kInt64), 0), "[softmax]", "int64");
    CHECK_ERROR(mean(ones({3}, kBool)), "[mean]", "bool");
    CHECK_ERROR(layer_norm(ones({2, 3}, kInt64), {3}), "[layer_norm]", "int64");
    CHECK_ERROR(rand({3}, kInt64), "[rand]", "int64");
    CHECK_ERROR(randn({3}, kBool), "[randn]", "bool");
  }
  SUBCASE("masks and conditions must be bool") {
    CHECK_ERROR(where(ones({3}), ones({3}), ones({3})), "[where]", "bool", "float32");
    CHECK_ERROR(masked_fill(ones({3}), ones({3}, kInt64), 0.0), "[masked_fill]", "bool", "int64");
    CHECK_ERROR(logical_not(ones({3})), "[logical_not]", "bool", "float32");
  }
  SUBCASE("data<T>() of the wrong type") {
    CHECK_ERROR(ones({3}).data<double>(), "[data]", "float32", "float64");
  }
  SUBCASE("an in-place result that can't hold the value") {
    Tensor i = zeros({3}, kInt64);
    CHECK_ERROR(i.add_(ones({3})), "[add_]", "float32", "int64");
    CHECK_ERROR(i.div_(2.0), "[div_]", "int64");
  }
}

TEST_CASE("dims and indices out of range") {
  Tensor x = ones({2, 3});
  CHECK_ERROR(sum(x, {2}), "[sum]", "dim 2", "2 dimensions");
  CHECK_ERROR(sum(x, {-3}), "[sum]", "dim -3", "2 dimensions");
  CHECK_ERROR(sum(x, {0, 0}), "[sum]", "dim 0", "more than once");
  CHECK_ERROR(mean(x, {5}), "[mean]", "dim 5");
  CHECK_ERROR(amax(x, {2}), "[amax]", "dim 2");
  CHECK_ERROR(max(x, 2), "[max]", "dim 2");
  CHECK_ERROR(argmax(x, -3), "[argmax]", "dim -3");
  CHECK_ERROR(softmax(x, 2), "[softmax]", "dim 2", "2 dimensions");
  CHECK_ERROR(log_softmax(x, -3), "[log_softmax]", "dim -3");
  CHECK_ERROR(x.transpose(0, 2), "[transpose]", "dim 2", "2 dimensions");
  CHECK_ERROR(x.transpose(-3, 0), "[transpose]", "dim -3");
  CHECK_ERROR(x.select(0, 2), "[select]", "index 2", "dim 0", "size 2");
  CHECK_ERROR(x.select(1, -4), "[select]", "index -4", "dim 1", "size 3");
  CHECK_ERROR(x.select(2, 0), "[select]", "dim 2");
  CHECK_ERROR(scalar_tensor(1.0).select(0, 0), "[select]", "0-d");
  CHECK_ERROR(x.unsqueeze(3), "[unsqueeze]", "dim 3", "3 dimensions");
  CHECK_ERROR(x.squeeze(2), "[squeeze]", "dim 2");
  CHECK_ERROR(x.slice(2, 0, 1), "[slice]", "dim 2");
  CHECK_ERROR(x.slice(0, 0, 1, 0), "[slice]", "step", "0");
  CHECK_ERROR(x.flatten(1, 0), "[flatten]", "start_dim 1", "end_dim 0");
  CHECK_ERROR(x.size(2), "[size]", "dim 2");
  CHECK_ERROR(x.at({2, 0}), "[at]", "index 2", "size 2");
  CHECK_ERROR(x.at({0}), "[at]", "expected 2 indices", "(2, 3)");
  CHECK_ERROR(x.set({0, 3}, 1.0), "[set]", "index 3", "size 3");
}

TEST_CASE("0-d tensors have no dim to index, but reductions over dim 0 / -1 are allowed") {
  Tensor s = scalar_tensor(2.5);
  CHECK_ERROR(s.size(0), "[size]", "no dimensions");
  CHECK_ERROR(s.stride(-1), "[stride]", "no dimensions");
  CHECK_ERROR(s.narrow(0, 0, 1), "[narrow]", "0-d");
  CHECK_ERROR(s.split(1), "[split]", "0-d");
  CHECK_ERROR(split(s, std::vector<int64_t>{1}), "[split]", "0-d");
  CHECK_ERROR(s.chunk(1), "[chunk]", "0-d");
  CHECK_ERROR(s.sum({1}), "[sum]", "dim 1", "0 dimensions");
  CHECK_ERROR(s.sum({0, -1}), "[sum]", "more than once");
  // As PyTorch: reducing a 0-d tensor over dim 0 or -1 gives it back.
  CHECK(s.sum({0}).item() == 2.5);
  CHECK(s.sum({0}).dim() == 0);
  CHECK(s.mean({-1}, true).item() == 2.5);
  CHECK(s.amax({0}).item() == 2.5);
  CHECK(logsumexp(s, {0}).item() == doctest::Approx(2.5));
  CHECK(max(s, 0).values.item() == 2.5);
  Tensor g = scalar_tensor(2.0, TensorOptions().requires_grad());
  (g.sum({0}) * 3.0).backward();
  CHECK(g.grad().item() == 3.0);
}

TEST_CASE("sizes that overflow or are negative") {
  CHECK_ERROR(ones({1}).expand({-2}), "[expand]", "-2");
  CHECK_ERROR(ones({1, 3}).expand({-5, 3}), "[expand]", "-5");
  CHECK_ERROR(ones({5}).narrow(0, 2, INT64_MAX), "[narrow]", "exceeds", "5");
  CHECK_ERROR(ones({3}).select(0, INT64_MIN), "[select]", "out of range");
  CHECK_ERROR(Device("cuda:99999999999"), "[device]", "'cuda:99999999999'");
}

TEST_CASE("embedding index out of range") {
  Tensor w = randn({5, 4});
  CHECK_ERROR(embedding(w, from_vector<int64_t>({0, 5}, {2})), "[embedding]", "index 5", "5 rows");
  CHECK_ERROR(embedding(w, from_vector<int64_t>({0, 1, -1}, {3})), "[embedding]", "index -1", "5 rows");
  CHECK_ERROR(embedding(w, from_vector<int64_t>({100000000000LL}, {1})), "[embedding]", "100000000000");
  CHECK_ERROR(embedding(w, zeros({2}, kInt64), 5), "[embedding]", "padding_idx 5", "5");
  // With a graph: the check comes before anything is recorded.
  Tensor wg = randn({5, 4}).requires_grad_();
  CHECK_ERROR(embedding(wg, from_vector<int64_t>({7}, {1})), "[embedding]", "index 7");
}

TEST_CASE("cross_entropy target out of range") {
  Tensor logits = randn({4, 3});
  CHECK_ERROR(cross_entropy(logits, from_vector<int64_t>({0, 1, 3, 2}, {4})), "[cross_entropy]", "target 3",
              "3 classes");
  CHECK_ERROR(cross_entropy(logits, from_vector<int64_t>({0, -1, 1, 2}, {4})), "[cross_entropy]", "target -1",
              "3 classes");
  // The ignore index itself is fine, any other negative is not.
  CHECK(error_of([&] { cross_entropy(logits, from_vector<int64_t>({0, -100, 1, 2}, {4})); }).empty());
  CHECK_ERROR(cross_entropy(logits, from_vector<int64_t>({0, -100, 1, 2}, {4}), -1), "[cross_entropy]",
              "target -100");
  CHECK_ERROR(cross_entropy(logits, zeros({4}, kInt64), -100, 1.5), "[cross_entropy]", "label_smoothing", "1.5");
}

TEST_CASE("view of a non-contiguous tensor that needs a copy") {
  Tensor x = arange(0, 6, 1, kFloat32).reshape({2, 3});
  CHECK_ERROR(x.t().view({6}), "[view]", "(6,)", "(3, 2)", "(1, 3)", "reshape");
  CHECK_ERROR(x.t().view({-1}), "[view]", "(6,)", "(3, 2)");
  // reshape copies instead, and a view that keeps the layout is fine.
  CHECK(x.t().reshape({6}).to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(error_of([&] { x.t().view({3, 2}); }).empty());
}

TEST_CASE("backward misuse") {
  SUBCASE("a non-scalar without a gradient") {
    Tensor x = ones({2, 3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.backward(), "[backward]", "scalar", "(2, 3)");
    CHECK(x.grad().defined() == false);
  }
  SUBCASE("a second backward without retain_graph") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    Tensor y = (x * x).sum();
    y.backward();
    CHECK_ERROR(y.backward(), "[backward]", "second time", "retain_graph");
    // The first backward's gradient is intact.
    CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2, 2});
  }
  SUBCASE("a tensor that doesn't require grad") {
    CHECK_ERROR(ones({1}).backward(), "[backward]", "does not require grad");
    Tensor x = ones({1}, TensorOptions().requires_grad());
    Tensor y;
    {
      NoGradGuard no_grad;
      y = x * 2.0;
    }
    CHECK_ERROR(y.backward(), "[backward]", "does not require grad");
  }
  SUBCASE("retain_grad on a tensor that doesn't require grad") {
    Tensor x = ones({3});
    CHECK_ERROR(x.retain_grad(), "[retain_grad]");
  }
  SUBCASE("requires_grad_(false) on a non-leaf") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    Tensor y = x * 2.0;
    CHECK_ERROR(y.requires_grad_(false), "[requires_grad_]", "leaf");
  }
  SUBCASE("set_grad of the wrong shape") {
    Tensor x = ones({3}, TensorOptions().requires_grad());
    CHECK_ERROR(x.set_grad(ones({4})), "[set_grad]", "(4,)", "(3,)");
  }
}

TEST_CASE("in-place modification under grad mode") {
  Tensor w = ones({3}, TensorOptions().requires_grad());
  CHECK_ERROR(w.add_(1.0), "[add_]", "leaf", "requires grad", "in-place operation");
  CHECK_ERROR(w.mul_(ones({3})), "[mul_]", "leaf");
  CHECK_ERROR(w.fill_(0.0), "[fill_]", "leaf");
  CHECK_ERROR(w.zero_(), "[zero_]", "leaf");
  CHECK_ERROR(w.copy_(zeros({3})), "[copy_]", "leaf");
  CHECK_ERROR(w.normal_(), "[normal_]", "leaf");
  CHECK(w.to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(w.version() == 0);
  // A non-leaf is recorded instead (tests/test_core_api.cpp).
  // Under NoGradGuard it is allowed (an optimizer step).
  {
    NoGradGuard no_grad;
    w.add_(1.0);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("a tensor saved for backward modified in place is caught at backward time") {
  Tensor x = ones({3}, TensorOptions().requires_grad());
  Tensor c = full({3}, 2.0);
  Tensor y = (x * c).sum();  // mul saves c for x's gradient
  c.add_(1.0);
  CHECK_ERROR(y.backward(), "[mul]", "modified by an inplace operation", "is at version 1", "expected version 0");
  CHECK_FALSE(x.grad().defined());

  // The same through a view of the saved tensor (views share the version counter).
  Tensor a = ones({2, 3}, TensorOptions().requires_grad());
  Tensor e = exp(a);  // exp saves its output
  Tensor loss = e.sum();
  {
    NoGradGuard no_grad;
    e.select(0, 1).mul_(0.0);
  }
  CHECK_ERROR(loss.backward(), "[exp]", "modified by an inplace operation");
}

TEST_CASE("bad linear arguments") {
  CHECK_ERROR(linear(ones({2, 3}), ones({3})), "[linear]", "weight", "2-D", "(3,)");
  CHECK_ERROR(linear(ones({2, 3}), ones({4, 5})), "[linear]", "(2, 3)", "in_features = 5");
  CHECK_ERROR(linear(ones({2, 3}), ones({4, 3}, kFloat64)), "[linear]", "float32", "float64");
  CHECK_ERROR(linear(ones({2, 3}), ones({4, 3}), ones({5})), "[linear]", "bias", "(4)", "(5,)");
  CHECK_ERROR(linear(ones({2, 3}, kInt64), ones({4, 3})), "[linear]", "int64");
}

TEST_CASE("bad scaled_dot_product_attention arguments") {
  const Tensor q = ones({2, 3, 4}), k = ones({2, 5, 4}), v = ones({2, 5, 6});
  const char* op = "[scaled_dot_product_attention]";
  CHECK_ERROR(scaled_dot_product_attention(q, ones({2, 5, 3}), v), op, "(2, 3, 4)", "(2, 5, 3)", "(2, 5, 6)");
  CHECK_ERROR(scaled_dot_product_attention(q, k, ones({2, 4, 6})), op, "(2, 4, 6)", "do not match");
  CHECK_ERROR(scaled_dot_product_attention(q, ones({3, 5, 4}), ones({3, 5, 6})), op, "(3, 5, 4)", "batch");
  CHECK_ERROR(scaled_dot_product_attention(ones({4}), ones({4}), ones({4})), op, "rank", "(4,)");
  CHECK_ERROR(scaled_dot_product_attention(q, k.to(kFloat64), v), op, "float32", "float64");
  CHECK_ERROR(scaled_dot_product_attention(q.to(kInt64), k, v), op, "int64");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, zeros({3, 5}, kInt64)), op, "attn_mask", "int64");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, ones({4, 5}, kBool)), op, "(4, 5)", "(2, 3, 5)");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, ones({3, 5}, kBool), 0.0, true), op, "not both");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, Tensor(), 1.5), op, "dropout_p", "1.5");
}

TEST_CASE("bad factory arguments") {
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "[from_vector]", "3 values", "(2, 2)", "4 elements");
  CHECK_ERROR(from_vector<int64_t>({1, 2, 3, 4, 5}, {2, 2}), "[from_vector]", "5 values", "(2, 2)");
  CHECK_ERROR(tensor({{1, 2}, {3}}), "[tensor]", "2", "1");
  CHECK_ERROR(arange(0, 10, 0), "[arange]", "step");
  CHECK_ERROR(arange(0, 10, -1), "[arange]", "start 0", "end 10", "step -1");
  CHECK_ERROR(eye(-1), "[eye]", "-1");
  CHECK_ERROR(randint(5, 5, {3}), "[randint]", "low=5", "high=5");
  CHECK_ERROR(bernoulli({3}, 1.5), "[bernoulli]", "1.5");
  CHECK_ERROR(dropout(ones({3}), 1.5), "[dropout]", "1.5");
  CHECK_ERROR(relu_dropout(ones({3}), -0.5), "[relu_dropout]", "-0.5");
  CHECK_ERROR(relu_dropout(ones({3}, kInt64), 0.5), "[relu_dropout]", "int64");
  Tensor u = zeros({3});
  CHECK_ERROR(u.uniform_(1.0, 0.0), "[uniform_]", "from=1", "to=0");
  CHECK_ERROR(u.normal_(0.0, -1.0), "[normal_]", "-1");
  CHECK_ERROR(reduction_from_string("avg"), "[reduction]", "'avg'");
}

TEST_CASE("item() of a multi-element tensor") {
  CHECK_ERROR(ones({2, 3}).item(), "[item]", "6 elements", "(2, 3)");
  CHECK_ERROR(zeros({0}).item(), "[item]", "0 elements", "(0,)");
  CHECK(ones({1, 1}).item() == 1.0);
}

TEST_CASE("devices") {
  CHECK_ERROR(Device("tpu"), "[device]", "'tpu'");
  CHECK_ERROR(Device("cuda:x"), "[device]", "'cuda:x'");
  CHECK_ERROR(Device("cpu:0x"), "[device]", "'cpu:0x'");
  CHECK_ERROR(Device(""), "[device]", "''");
  CHECK(Device("cpu") == kCPU);
  // Without a CUDA backend, asking for one is an error that names the device, not a crash.
  std::string cuda = error_of([] { (void)ones({2}, Device("cuda")); });
  if (!cuda.empty()) {
    CHECK(cuda.rfind("[device] ", 0) == 0);
    CHECK(cuda.find("cuda:0") != std::string::npos);
    CHECK_ERROR(ones({2}).to(Device("cuda:1")), "[device]", "cuda:1");
  }
}

TEST_CASE("set_num_threads(0)") {
  int before = get_num_threads();
  CHECK_ERROR(set_num_threads(0), "[set_num_threads]", "got 0");
  CHECK_ERROR(set_num_threads(-3), "[set_num_threads]", "got -3");
  CHECK(get_num_threads() == before);
}

TEST_CASE("undefined tensors") {
  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK(u.str() == "tensor(undefined)");
  CHECK_ERROR(u.shape(), "[tensor]", "undefined");
  CHECK_ERROR(u.numel(), "[tensor]", "undefined");
  CHECK_ERROR(u.item(), "[tensor]", "undefined");
  CHECK_ERROR(u.requires_grad_(), "[tensor]", "undefined");
  CHECK_ERROR(u.backward(), "[tensor]", "undefined");
  CHECK_ERROR(u.grad(), "[tensor]", "undefined");
  CHECK_ERROR(u.detach(), "[tensor]", "undefined");
  CHECK_ERROR(u.to_vector<float>(), "undefined");
  CHECK_ERROR(add(u, ones({2})), "[add]", "undefined");
  CHECK_ERROR(ones({2}) * u, "[mul]", "undefined");
  CHECK_ERROR(u + 1.0, "[add]", "undefined");
  CHECK_ERROR(matmul(ones({2, 2}), u), "[matmul]", "undefined");
  CHECK_ERROR(sum(u), "[sum]", "undefined");
  CHECK_ERROR(exp(u), "[exp]", "undefined");
  CHECK_ERROR(relu(u), "undefined");
  CHECK_ERROR(u.view({2}), "[view]", "undefined");
  CHECK_ERROR(u.t(), "undefined");
  CHECK_ERROR(cat({ones({2}), u}), "[cat]", "undefined");
  CHECK_ERROR(softmax(u, 0), "[softmax]", "undefined");
  CHECK_ERROR(embedding(ones({3, 2}), u), "[embedding]", "undefined");
  CHECK_ERROR(cross_entropy(ones({2, 3}), u), "[cross_entropy]", "undefined");
  Tensor a = ones({2});
  CHECK_ERROR(a.copy_(u), "[copy_]", "undefined");
  CHECK_ERROR(a.add_(u), "[add_]", "undefined");
  CHECK_ERROR(u.zero_(), "undefined");
  CHECK_ERROR(a.same_storage(u), "undefined");
}
