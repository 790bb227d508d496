// libFuzzer target: io::parse_gguf on arbitrary bytes. It must return the file or throw
// kiln::Error. What it returns must dequantise (every tensor), and survive a round trip:
// written by serialize_gguf and parsed again, the same metadata, tensor infos and bytes
// (compared as that second file written once more). Any other exception escapes to
// libFuzzer, which reports it as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_gguf: %s\n", what);
  std::abort();
}

std::vector<kiln::io::GGUFTensorData> tensors_of(const kiln::io::GGUFFile& f) {
  std::vector<kiln::io::GGUFTensorData> out;
  for (const kiln::io::GGUFTensorInfo& t : f.tensors)
    out.push_back({t.name, t.type, t.ne, std::string(reinterpret_cast<const char*>(f.data(t)), t.nbytes)});
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  io::GGUFFile f;
  try {
    f = io::parse_gguf(std::string(reinterpret_cast<const char*>(data), size), "<fuzz>");
  } catch (const Error&) {
    return 0;  // refused with Kiln's error: fine
  }
  for (const io::GGUFTensorInfo& t : f.tensors) {
    if (t.numel() <= (int64_t{1} << 20)) static_cast<void>(f.to_float(t));
  }
  std::string once;
  try {
    once = io::serialize_gguf(f.metadata, tensors_of(f), f.alignment);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    finding("a parsed file cannot be written");
  }
  io::GGUFFile back;
  try {
    back = io::parse_gguf(once, "<round trip>");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    finding("a parsed file, written again, is refused");
  }
  if (back.metadata.size() != f.metadata.size() || back.tensors.size() != f.tensors.size())
    finding("metadata or tensor count differs after a round trip");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    if (back.tensors[i].name != f.tensors[i].name || back.tensors[i].ne != f.tensors[i].ne ||
        back.tensors[i].type != f.tensors[i].type)
      finding("a tensor info differs after a round trip");
  }
  if (io::serialize_gguf(back.metadata, tensors_of(back), back.alignment) != once) finding("bytes differ after a round trip");
  return 0;
}
