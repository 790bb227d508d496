// libFuzzer target: io::parse_safetensors on arbitrary bytes. It must return the file's
// contents or throw kiln::Error. What it returns must survive a round trip (serialised
// and parsed again: the same names, dtypes, shapes, data and metadata) and load into a
// small module with strict=false, which either loads or throws kiln::Error. Any other
// exception escapes to libFuzzer, which reports it as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "nn/layers.h"

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  io::SafetensorsContents c;
  try {
    c = io::parse_safetensors(bytes, "<fuzz>");
  } catch (const Error&) {
    return 0;  // refused with Kiln's error: fine
  }

  // Round trip. The first serialisation is compared with the second rather than with the
  // input: the input may hold another layout, padding or a dtype read as a wider one.
  const std::string once = io::serialize_safetensors(c.tensors, c.metadata);
  io::SafetensorsContents back;
  try {
    back = io::parse_safetensors(once, "<round trip>");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    finding("a parsed file, written again, is refused");
  }
  if (back.metadata != c.metadata) finding("metadata differ after a round trip");
  if (back.tensors.size() != c.tensors.size()) finding("tensor count differs after a round trip");
  for (const auto& [name, t] : c.tensors) {
    auto it = back.tensors.find(name);
    if (it == back.tensors.end()) finding("a tensor is missing after a round trip");
    if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape())
      finding("a tensor's dtype or shape differs after a round trip");
  }
  // Same names, dtypes and shapes: equal bytes mean equal data (NaNs included).
  if (io::serialize_safetensors(back.tensors, back.metadata) != once) finding("data differ after a round trip");

  // Into a module: loads what fits or throws Kiln's error.
  nn::Linear model(3, 2);
  try {
    model.load_state_dict(nn::StateDict(c.tensors.begin(), c.tensors.end()), /*strict=*/false);
  } catch (const Error&) {
  }
  return 0;
}
