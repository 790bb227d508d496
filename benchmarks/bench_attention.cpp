// scaled_dot_product_attention forward and backward on one device, for the GPU's two
// attention kernels (kiln::cuda::set_attention_kernel): time and the tensor memory it
// adds, at a sequence length where the (N, H, L, L) scores are large.
//
//   bench_attention [--batch N] [--heads H] [--seq L] [--head-dim E] [--device cuda:0]
//                   [--attention auto|tiled|materialized] [--steps S]
//
// Prints one JSON line: the median ms of forward + backward (with dropout 0.1 and a
// causal mask, as a decoder's self-attention) and peak_mb, the most tensor bytes held
// during a step beyond the inputs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "train_step_setup.h"

namespace {

struct Args {
  int batch = 8, heads = 8, seq = 2048, head_dim = 64, steps = 10;
  std::string device = "cuda:0", attention = "auto";
};

int run(const Args& a) {
  const kiln::Device device(a.device);
  kiln::cuda::set_attention_kernel(bench::attention_option(a.attention));
  kiln::manual_seed(0);
  const kiln::Shape shape{a.batch, a.heads, a.seq, a.head_dim};
  auto input = [&] { return kiln::randn(shape).to(device).requires_grad_(); };
  kiln::Tensor q = input(), k = input(), v = input();
  std::vector<double> ms;
  int64_t peak = 0;
  for (int i = 0; i < a.steps + 1; ++i) {  // the first is a warm-up
    kiln::reset_peak_memory(device);
    const int64_t before = kiln::memory_stats(device).allocated_bytes;
    const auto t0 = std::chrono::steady_clock::now();
    kiln::Tensor out = kiln::scaled_dot_product_attention(q, k, v, kiln::Tensor(), 0.1, true);
    out.sum().backward();
    (void)q.grad().sum().item();  // waits for the device
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) ms.push_back(t);
    peak = std::max(peak, kiln::memory_stats(device).peak_bytes - before);
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "{\"bench\": \"attention\", \"device\": \"%s\", \"attention\": \"%s\", \"batch\": %d, \"heads\": %d, "
      "\"seq\": %d, \"head_dim\": %d, \"ms\": %.3f, \"peak_mb\": %.1f}\n",
      device.str().c_str(), a.attention.c_str(), a.batch, a.heads, a.seq, a.head_dim, ms[ms.size() / 2],
      static_cast<double>(peak) / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string f = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument(f + " needs a value");
      const std::string v = argv[++i];
      if (f == "--batch") a.batch = bench::int_option(f, v, 1);
      else if (f == "--heads") a.heads = bench::int_option(f, v, 1);
      else if (f == "--seq") a.seq = bench::int_option(f, v, 1);
      else if (f == "--head-dim") a.head_dim = bench::int_option(f, v, 1);
      else if (f == "--steps") a.steps = bench::int_option(f, v, 1);
      else if (f == "--device") a.device = v;
      else if (f == "--attention") a.attention = v;
      else throw std::invalid_argument("unknown option " + f);
    }
    return run(a);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
