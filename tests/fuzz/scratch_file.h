#pragma once
// For the fuzz targets whose reader takes a path (the checkpoint loader, the vocabulary
// reader): a file of this process's own in the temporary directory, which each input is
// written to before the reader opens it.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace kiln::fuzz {

// kiln_fuzz_<pid>_<name> in the temporary directory, removed when the process ends (a
// static ScratchFile) or the object goes.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("kiln_fuzz_" + std::to_string(::getpid()) + "_" + name))
                  .string()) {}
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  // The input as the file's whole content: a plain write (an fsync, as Kiln's own
  // writers do, would cost most of the time of a run); a failed write aborts.
  void write(const uint8_t* data, size_t size) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out.flush()) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
  }

 private:
  std::string path_;
};

}  // namespace kiln::fuzz
