// quantized_linear (weights kept in ggml's blocks, 8-bit activations dotted in integers)
// against float32 linear on the dequantised weight (Kiln's GEMM: OpenBLAS / oneDNN), for
// SmolLM2-135M's projections: decode (1 row) and a 128-token prompt (128 rows).
//
//   bench_quantized [--threads N] [--runs R] [--min-time S]
//
// Each case and implementation runs R times for at least S seconds after a warm-up,
// rounds alternating; the table shows the median microseconds per call and, for the
// quantized forms, the weight bytes read per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "backend/cpu/quant_matmul.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  const char* name;
  int64_t n, k;
  kiln::GGMLType type;
};

double seconds_of(const std::function<void()>& f, double min_time) {
  int64_t calls = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < min_time);
  return elapsed / static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, runs = 5;
  double min_time = 0.2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--min-time" && i + 1 < argc) min_time = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_quantized [--threads N] [--runs R] [--min-time S]\n");
      return 2;
    }
  }
  kiln::set_num_threads(threads);
  kiln::manual_seed(0);
  std::printf("bench_quantized: %d threads, %d rounds of >= %.2f s; dot path %s\n", threads, runs, min_time,
              kiln::cpu::quant_dot_path_name());
  const std::vector<Case> cases = {
      {"attn q/o 576x576 q4_1", 576, 576, kiln::GGMLType::Q4_1},
      {"attn k/v 192x576 q4_1", 192, 576, kiln::GGMLType::Q4_1},
      {"ffn up 1536x576 q4_1", 1536, 576, kiln::GGMLType::Q4_1},
      {"ffn down 576x1536 q4_1", 576, 1536, kiln::GGMLType::Q4_1},
      {"lm head 49152x576 q8_0", 49152, 576, kiln::GGMLType::Q8_0},
      {"ffn up 1536x576 q4_0", 1536, 576, kiln::GGMLType::Q4_0},
  };
  std::printf("%-24s %5s %14s %14s %8s %12s\n", "weight", "rows", "quantized us", "float32 us", "speedup",
              "weight MB");
  for (const Case& c : cases) {
    const kiln::QuantizedMatrix q = kiln::quantize_matrix(kiln::randn({c.n, c.k}), c.type);
    const kiln::Tensor w = kiln::dequantize(q);
    for (const int64_t m : {int64_t{1}, int64_t{128}}) {
      const kiln::Tensor x = kiln::randn({m, c.k});
      auto quantized = [&] { kiln::quantized_linear(x, q); };
      auto dense = [&] { kiln::linear(x, w); };
      quantized();
      dense();
      std::vector<double> tq, tf;
      for (int r = 0; r < runs; ++r) {  // rounds alternate between the two
        tq.push_back(seconds_of(quantized, min_time));
        tf.push_back(seconds_of(dense, min_time));
      }
      std::sort(tq.begin(), tq.end());
      std::sort(tf.begin(), tf.end());
      const double mq = tq[tq.size() / 2] * 1e6, mf = tf[tf.size() / 2] * 1e6;
      std::printf("%-24s %5lld %14.1f %14.1f %7.2fx %12.2f\n", c.name, static_cast<long long>(m), mq, mf, mf / mq,
                  static_cast<double>(q.rows * q.row_bytes()) / 1e6);
    }
  }
  return 0;
}
