// Tensor::register_post_accumulate_grad_hook and queue_backward_callback (what
// DistributedDataParallel starts its bucket all-reduces from, during backward).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "test_util.h"

using namespace kiln;

TEST_CASE("post-accumulate-grad hook: runs once per backward, after the gradient is in .grad()") {
  Tensor w = tensor({1.0, 2.0, 3.0}, TensorOptions(kFloat64).requires_grad());
  std::vector<std::vector<double>> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    CHECK(t.impl() == w.impl());  // the leaf itself
    seen.push_back(t.grad().to_vector<double>());
  });
  (w * w).sum().backward();  // grad 2w
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{2, 4, 6});
  (w * 3.0).sum().backward();  // accumulates: 2w + 3
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{5, 7, 9});
}

TEST_CASE("post-accumulate-grad hook: a leaf used twice gets one call with the sum; hooks in order") {
  Tensor w = tensor({1.0, -1.0}, TensorOptions(kFloat64).requires_grad());
  std::vector<std::string> calls;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) { calls.push_back("a " + std::to_string(t.grad().sum().item())); });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { calls.push_back("b"); });
  (w * 2.0 + w * 5.0).sum().backward();
  CHECK(calls == std::vector<std::string>{"a " + std::to_string(14.0), "b"});
}

TEST_CASE("post-accumulate-grad hook: runs during backward, before the gradients of earlier layers exist") {
  manual_seed(3);
  Tensor x = randn({4, 3});
  Tensor w1 = randn({3, 5}, TensorOptions().requires_grad());
  Tensor w2 = randn({5, 2}, TensorOptions().requires_grad());
  bool w1_grad_when_w2_ready = true;
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { w1_grad_when_w2_ready = w1.grad().defined(); });
  matmul(relu(matmul(x, w1)), w2).sum().backward();
  CHECK_FALSE(w1_grad_when_w2_ready);
  CHECK(w1.grad().defined());
}

TEST_CASE("post-accumulate-grad hook: it may change the gradient; a leaf without gradient gets no call") {
  Tensor w = tensor({1.0, 2.0}, TensorOptions(kFloat64).requires_grad());
  Tensor unused = tensor({1.0}, TensorOptions(kFloat64).requires_grad());
  int unused_calls = 0;
  w.register_post_accumulate_grad_hook([](const Tensor& t) { t.grad().mul_(10.0); });
  unused.register_post_accumulate_grad_hook([&](const Tensor&) { ++unused_calls; });
  (w * w).sum().backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{20, 40});
  CHECK(unused_calls == 0);
}

TEST_CASE("post-accumulate-grad hook: remove() stops it, twice is harmless, the handle outlives the tensor") {
  int calls = 0;
  HookHandle h;
  {
    Tensor w = ones({2}, TensorOptions().requires_grad());
    h = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
    HookHandle self;
    self = w.register_post_accumulate_grad_hook([&](const Tensor&) { self.remove(); });  // removes itself
    w.sum().backward();
    CHECK(calls == 1);
    CHECK(w.impl()->post_accumulate_grad_hooks.size() == 1);
    h.remove();
    h.remove();
    w.sum().backward();
    CHECK(calls == 1);
    h = w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  }
  h.remove();  // the tensor is gone
  CHECK(calls == 1);
}

TEST_CASE("post-accumulate-grad hook: errors") {
  Tensor leaf = ones({2}, TensorOptions().requires_grad());
  Tensor y = leaf * 2.0;
  auto noop = [](const Tensor&) {};
  CHECK_ERROR(y.register_post_accumulate_grad_hook(noop),
              "[register_post_accumulate_grad_hook] post accumulate grad hooks cannot be registered on non-leaf tensors");
  CHECK_ERROR(ones({2}).register_post_accumulate_grad_hook(noop),
              "[register_post_accumulate_grad_hook] cannot register a hook on a tensor that doesn't require gradient");
  CHECK_ERROR(Tensor().register_post_accumulate_grad_hook(noop), "[register_post_accumulate_grad_hook] the tensor is undefined");
  CHECK_ERROR(leaf.register_post_accumulate_grad_hook(nullptr), "[register_post_accumulate_grad_hook] the hook is an empty function");
}

TEST_CASE("queue_backward_callback: runs after the last node, in order, before backward returns") {
  Tensor a = ones({2}, TensorOptions().requires_grad());
  Tensor b = ones({2}, TensorOptions().requires_grad());
  std::vector<std::string> log;
  b.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("hook b");
    queue_backward_callback([&] {
      log.push_back(std::string("first, a.grad ") + (a.grad().defined() ? "set" : "unset"));
      queue_backward_callback([&] { log.push_back("queued by the first"); });
    });
    queue_backward_callback([&] { log.push_back("second"); });
  });
  // b's gradient is ready before a's: a is used first in forward.
  Tensor h = a * 3.0;
  (h * b).sum().backward();
  log.push_back("returned");
  CHECK(log == std::vector<std::string>{"hook b", "first, a.grad set", "second", "queued by the first", "returned"});
}

TEST_CASE("queue_backward_callback: outside backward an error; one that throws ends backward with its error") {
  CHECK_ERROR(queue_backward_callback([] {}), "[queue_backward_callback] no backward pass is running on this thread");
  Tensor w = ones({2}, TensorOptions().requires_grad());
  HookHandle h = w.register_post_accumulate_grad_hook(
      [](const Tensor&) { queue_backward_callback([] { KILN_FAIL("my_callback", "failed on purpose"); }); });
  CHECK_ERROR(w.sum().backward(), "[my_callback] failed on purpose");
  CHECK_ERROR(queue_backward_callback([] {}), "no backward pass is running");  // the list is gone
  h.remove();
  w.zero_grad();
  w.sum().backward();
  CHECK(w.grad().sum().item() == 2.0);
}
