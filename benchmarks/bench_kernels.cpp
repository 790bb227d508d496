// Memory-bound kernels in GB/s next to a plain memory copy measured in the same run:
// softmax, layer_norm, add_layer_norm, cross_entropy (forward and backward) and
// elementwise add and gelu, float32, at attention- and activation-like shapes.
//
//   bench_kernels [--threads N] [--min-time S] [--device cpu|cuda:N]
//
// Bytes are the minimum a kernel must move (inputs read once, outputs written once);
// the copy reference is std::memcpy of the same number of bytes, split over the same
// threads (on a GPU: a device-to-device copy_ of a tensor that size). The ratio
// kernel/copy says how close to the memory system's speed a kernel runs (1.0 = as fast
// as a copy). On a GPU each call is timed to the end of its kernels (cuda::synchronize).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

namespace {

using Clock = std::chrono::steady_clock;

bool g_gpu = false;  // time each call until the GPU is done with it

// Median seconds per call over runs of at least min_time.
double time_it(const std::function<void()>& body, double min_time) {
  auto f = [&] {
    body();
    if (g_gpu) kiln::cuda::synchronize();
  };
  f();
  std::vector<double> per_call;
  for (int run = 0; run < 5; ++run) {
    int64_t calls = 0;
    auto t0 = Clock::now();
    double elapsed = 0;
    do {
      f();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < min_time);
    per_call.push_back(elapsed / static_cast<double>(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

double copy_gbps(size_t bytes, double min_time) {
  std::vector<char> src(bytes, 1), dst(bytes);
  const int64_t threads = kiln::get_num_threads();
  auto copy = [&] {
    kiln::cpu::parallel_for(threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        size_t begin = bytes * static_cast<size_t>(t) / static_cast<size_t>(threads);
        size_t end = bytes * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
        std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
      }
    });
  };
  // A copy reads and writes each byte.
  return 2.0 * static_cast<double>(bytes) / time_it(copy, min_time) / 1e9;
}

// The same reference on a GPU: one tensor copied into another there.
double device_copy_gbps(const kiln::Tensor& like, double min_time) {
  kiln::Tensor src = kiln::ones(like.shape(), kiln::TensorOptions(like.dtype()).device(like.device()));
  kiln::Tensor dst = kiln::empty_like(src);
  const double bytes = static_cast<double>(src.numel() * static_cast<int64_t>(src.element_size()));
  return 2.0 * bytes / time_it([&] { dst.copy_(src); }, min_time) / 1e9;
}

int run(double min_time, kiln::Device device);

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.2;
  std::string device = "cpu";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--threads") kiln::set_num_threads(std::stoi(argv[i + 1]));
    else if (f == "--min-time") min_time = std::stod(argv[i + 1]);
    else if (f == "--device") device = argv[i + 1];
  }
  try {
    return run(min_time, kiln::Device(device));
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}

namespace {

int run(double min_time, kiln::Device device) {
  g_gpu = !device.is_cpu();
  std::printf("%s\n", kiln::config().c_str());
  kiln::manual_seed(0);
  using kiln::Tensor;
  const kiln::TensorOptions on(device);
  const int64_t rows = 64 * 100, width = 512;           // activations (batch·seq, d_model)
  Tensor act = kiln::randn({rows, width}, on);
  Tensor act2 = kiln::randn({rows, width}, on);
  Tensor scores = kiln::randn({64 * 8, 100, 100}, on);   // attention scores
  Tensor logits = kiln::randn({rows, 5000}, on);         // (tokens, vocab)
  Tensor targets = kiln::randint(0, 5000, {rows}, kiln::TensorOptions(kiln::kInt64).device(device));
  Tensor w = kiln::ones({width}, on), b = kiln::zeros({width}, on);
  Tensor g_scores = kiln::randn(scores.shape(), on);
  const double f4 = 4.0;

  struct Case {
    std::string name;
    double bytes;
    std::function<void()> run;
  };
  Tensor sm = kiln::softmax(scores, -1);
  std::vector<Case> cases = {
      {"add (6400x512) + (6400x512)", 3 * f4 * act.numel(), [&] { kiln::add(act, act2); }},
      {"gelu (6400x512)", 2 * f4 * act.numel(), [&] { kiln::gelu(act); }},
      {"relu (6400x512)", 2 * f4 * act.numel(), [&] { kiln::relu(act); }},
      {"softmax (512x100x100, last dim)", 2 * f4 * scores.numel(), [&] { kiln::softmax(scores, -1); }},
      {"layer_norm (6400x512)", 2 * f4 * act.numel(), [&] { kiln::layer_norm(act, {width}, w, b); }},
      {"cross_entropy (6400x5000) fwd", f4 * logits.numel(), [&] { kiln::cross_entropy(logits, targets); }},
  };
  // Backward passes, through autograd as a user runs them.
  Tensor sm_in = scores.detach().requires_grad_(), ln_in = act.detach().requires_grad_(),
         ce_in = logits.detach().requires_grad_();
  cases.push_back({"softmax fwd+bwd", 5 * f4 * scores.numel(), [&] {
                     kiln::softmax(sm_in, -1).backward(g_scores);
                     sm_in.zero_grad();
                   }});
  cases.push_back({"layer_norm fwd+bwd", 5 * f4 * act.numel(), [&] {
                     kiln::layer_norm(ln_in, {width}, w, b).backward(act2);
                     ln_in.zero_grad();
                   }});
  // A post-norm residual block's end, unfused and fused (add_layer_norm): forward alone
  // (read x and r, write y), then forward and backward with every input and the weight
  // and bias needing gradients (forward also writes the sum; backward reads g and the
  // sum, writes one gradient for x and r).
  cases.push_back({"add then layer_norm (6400x512)", 3 * f4 * act.numel(),
                   [&] { kiln::layer_norm(kiln::add(act, act2), {width}, w, b); }});
  cases.push_back({"add_layer_norm (6400x512)", 3 * f4 * act.numel(),
                   [&] { kiln::add_layer_norm(act, act2, {width}, w, b); }});
  Tensor res_in = act2.detach().requires_grad_(), w_in = w.detach().requires_grad_(),
         b_in = b.detach().requires_grad_();
  auto zero_grads = [&] {
    for (Tensor* t : {&ln_in, &res_in, &w_in, &b_in}) t->zero_grad();
  };
  cases.push_back({"add then layer_norm fwd+bwd, all grads", 7 * f4 * act.numel(), [&] {
                     kiln::layer_norm(kiln::add(ln_in, res_in), {width}, w_in, b_in).backward(act2);
                     zero_grads();
                   }});
  cases.push_back({"add_layer_norm fwd+bwd, all grads", 7 * f4 * act.numel(), [&] {
                     kiln::add_layer_norm(ln_in, res_in, {width}, w_in, b_in).backward(act2);
                     zero_grads();
                   }});
  cases.push_back({"cross_entropy fwd+bwd", 3 * f4 * logits.numel(), [&] {
                     kiln::cross_entropy(ce_in, targets).backward();
                     ce_in.zero_grad();
                   }});

  double copy = 0;
  if (device.is_cpu()) {
    copy = copy_gbps(static_cast<size_t>(f4 * act.numel()), min_time);
    std::printf("\nthreads %d; memcpy reference: %.1f GB/s (read + write)\n\n", kiln::get_num_threads(), copy);
  } else {
    copy = device_copy_gbps(act, min_time);
    std::printf("\ndevice %s; copy reference: %.1f GB/s (read + write)\n\n", device.str().c_str(), copy);
  }
  std::printf("| kernel | GB/s | / %s |\n| --- | ---: | ---: |\n", device.is_cpu() ? "memcpy" : "copy");
  for (const Case& c : cases) {
    double gbps = c.bytes / time_it(c.run, min_time) / 1e9;
    std::printf("| %s | %.1f | %.2f |\n", c.name.c_str(), gbps, gbps / copy);
  }
  return 0;
}

}  // namespace
