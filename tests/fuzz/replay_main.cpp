// The main of the fuzz replays: runs one fuzz target's LLVMFuzzerTestOneInput on files
// instead of on libFuzzer's mutations, so that the committed seeds and every finding in
// tests/fuzz/regressions/ run as ordinary tests with any compiler (meson test
// fuzz_replay_*), and under the sanitizers in the sanitizer tree.
//
//   fuzz_replay_<target> PATH...   (a PATH that is a directory: every file in it, sorted)
//
// The target decides what is wrong: it aborts on a finding, and the sanitizers report
// undefined behaviour; a replay that returns from every input exits 0. Exit 2 when a
// path cannot be read or no input was given at all (a test that replays nothing proves
// nothing).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The files named by the arguments, directories expanded (sorted, so runs are repeatable).
bool collect_inputs(int argc, char** argv, std::vector<fs::path>& inputs) {
  for (int i = 1; i < argc; ++i) {
    const fs::path arg = argv[i];
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const fs::directory_entry& e : fs::directory_iterator(arg, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      if (ec) {
        std::fprintf(stderr, "fuzz replay: cannot list %s: %s\n", arg.c_str(), ec.message().c_str());
        return false;
      }
      std::sort(files.begin(), files.end());
      inputs.insert(inputs.end(), files.begin(), files.end());
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "fuzz replay: %s is neither a file nor a directory\n", arg.c_str());
      return false;
    }
  }
  return true;
}

bool read_file(const fs::path& path, std::vector<uint8_t>& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  if (!collect_inputs(argc, argv, inputs)) return 2;
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz replay: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0]);
    return 2;
  }
  std::vector<uint8_t> bytes;
  for (const fs::path& path : inputs) {
    if (!read_file(path, bytes)) {
      std::fprintf(stderr, "fuzz replay: cannot read %s\n", path.c_str());
      return 2;
    }
    std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
    std::fflush(stdout);  // so that the log names the input a crash came from
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("fuzz replay: %zu inputs, all returned\n", inputs.size());
  return 0;
}
