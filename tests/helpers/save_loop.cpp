// A process for tests/test_kill_save.cpp to kill: saves DIR/ckpt.safetensors over and over
// until it is killed. Save k holds four float32 tensors of 1M elements (16 MB), every
// element equal to k, and the metadata entry "k" = k, so that a reader can tell a whole
// file from a torn one. Writes "ready" to stdout once the first save is done.
//
//   save_loop DIR
#include <cstdio>
#include <exception>
#include <string>

#include "kiln.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: save_loop DIR\n");
    return 2;
  }
  try {
    kiln::set_num_threads(1);
    const std::string target = std::string(argv[1]) + "/ckpt.safetensors";
    for (long k = 0;; ++k) {
      kiln::io::TensorMap tensors;
      for (const char* name : {"a", "b", "c", "d"}) tensors[name] = kiln::full({1 << 20}, static_cast<double>(k));
      kiln::io::save_safetensors(target, tensors, {{"k", std::to_string(k)}});
      if (k == 0) {
        std::puts("ready");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_loop: %s\n", e.what());
    return 1;
  }
}
