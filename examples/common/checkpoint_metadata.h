#pragma once
// Reading numbers back from a checkpoint's metadata strictly: the whole text, within a
// range, finite. A checkpoint that was edited or corrupted is then a kiln::Error naming
// the file and the entry (exit 1 through run_main), not std::stoll's "stoll", nor a
// "1e214" read as 1, nor a NaN that trains on.
#include <cmath>
#include <cstdint>
#include <string>

#include <kiln/kiln.h>

namespace kiln_examples {

inline const std::string& metadata_text(const kiln::io::Metadata& meta, const std::string& key,
                                        const std::string& path) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), "checkpoint", path, ": metadata '", key, "' is missing");
  return it->second;
}

inline int64_t metadata_integer(const kiln::io::Metadata& meta, const std::string& key, const std::string& path,
                                int64_t lo, int64_t hi) {
  const std::string& s = metadata_text(meta, key, path);
  int64_t v = 0;
  KILN_CHECK(kiln::io::parse_whole(s, &v) && v >= lo && v <= hi, "checkpoint", path,
             ": metadata '", key, "' must be an integer from ", lo, " to ", hi, ", got '", s, "'");
  return v;
}

inline double metadata_real(const kiln::io::Metadata& meta, const std::string& key, const std::string& path, double lo,
                            double hi) {
  const std::string& s = metadata_text(meta, key, path);
  double v = NAN;
  KILN_CHECK(kiln::io::parse_whole(s, &v) && std::isfinite(v) && v >= lo && v <= hi,
             "checkpoint", path, ": metadata '", key, "' must be a finite number from ", lo, " to ", hi, ", got '", s,
             "'");
  return v;
}

}  // namespace kiln_examples
