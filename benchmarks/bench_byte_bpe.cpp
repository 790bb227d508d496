// text::BytePairTokenizer's speed: tokens a second encoding the Ding dictionary
// (/usr/share/trans/de-en, 25 MB), each line on its own, with SmolLM2-135M's vocabulary;
// and, built with llama.cpp's library, llama_tokenize on the same lines in the same
// process, the two checked for the same ids.
//   bench_byte_bpe [GGUF] [--repeat N]
// With llama.cpp (for instance llama-cpp-python's own library and the headers of its
// vendored source), built by hand from the source root, on one line:
//   g++ -std=c++20 -O2 -DKILN_BENCH_LLAMA_CPP -I framework -I include -I build/include
//     -I $LLAMA/include -I $LLAMA/ggml/include benchmarks/bench_byte_bpe.cpp
//     -L build/framework -lkiln -L $SITE/llama_cpp/lib -lllama
//     -Wl,-rpath,build/framework:$SITE/llama_cpp/lib -o bench_byte_bpe_llama
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "text/byte_bpe.h"

#ifdef KILN_BENCH_LLAMA_CPP
#include "llama.h"
#endif

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const char* home = std::getenv("HOME");
  std::string path = std::string(home ? home : "") + "/.cache/kiln/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf";
  int repeat = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else {
      path = a;
    }
  }
  std::ifstream in("/usr/share/trans/de-en");
  if (!in.good()) {
    std::fprintf(stderr, "bench_byte_bpe: /usr/share/trans/de-en is missing (apt-get install trans-de-en)\n");
    return 1;
  }
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    bytes += line.size();
    lines.push_back(line);
  }
  try {
    const auto t_load = std::chrono::steady_clock::now();
    const auto tok = kiln::text::BytePairTokenizer::from_gguf(kiln::io::read_gguf(path));
    std::printf("loaded %s's tokenizer in %.3f s\n", path.c_str(), seconds_since(t_load));
    std::printf("%zu lines, %.1f MB\n", lines.size(), bytes / 1e6);
    std::vector<std::vector<int64_t>> ids(lines.size());
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      tokens = 0;
      for (size_t i = 0; i < lines.size(); ++i) {
        ids[i] = tok.encode(lines[i], false, false);
        tokens += ids[i].size();
      }
      best = std::min(best, seconds_since(t0));
    }
    std::printf("Kiln:      %zu tokens in %.2f s: %.2f M tokens/s (best of %d)\n", tokens, best, tokens / best / 1e6,
                repeat);
#ifdef KILN_BENCH_LLAMA_CPP
    llama_backend_init();
    llama_model_params params = llama_model_default_params();
    params.vocab_only = true;
    llama_model* model = llama_model_load_from_file(path.c_str(), params);
    if (!model) {
      std::fprintf(stderr, "bench_byte_bpe: llama.cpp cannot load %s\n", path.c_str());
      return 1;
    }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    std::vector<llama_token> buf(1 << 16);
    best = 1e30;
    size_t differ = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      tokens = 0;
      for (const std::string& line : lines) {
        const int n = llama_tokenize(vocab, line.data(), static_cast<int32_t>(line.size()), buf.data(),
                                     static_cast<int32_t>(buf.size()), false, false);
        tokens += n > 0 ? n : 0;
      }
      best = std::min(best, seconds_since(t0));
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      const int n = llama_tokenize(vocab, lines[i].data(), static_cast<int32_t>(lines[i].size()), buf.data(),
                                   static_cast<int32_t>(buf.size()), false, false);
      differ += std::vector<int64_t>(buf.begin(), buf.begin() + std::max(n, 0)) != ids[i];
    }
    std::printf("llama.cpp: %zu tokens in %.2f s: %.2f M tokens/s (best of %d); %zu of %zu lines differ\n", tokens,
                best, tokens / best / 1e6, repeat, differ, lines.size());
    llama_model_free(model);
    llama_backend_free();
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_byte_bpe: %s\n", e.what());
    return 1;
  }
  return 0;
}
