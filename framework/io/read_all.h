#pragma once
// Whole files into memory, for the readers that parse from bytes.
#include <istream>
#include <string>

namespace kiln::io::detail {

// Everything from `in`'s position to its end. Where the stream can tell its size (a
// regular file), one allocation and one read: a model's hundreds of megabytes pass
// through a byte-at-a-time iterator several times slower, and through a string stream
// twice. Other streams (a pipe) are copied in chunks. A failed read sets in's badbit;
// the caller checks it and names its own operation.
std::string read_all(std::istream& in);

}  // namespace kiln::io::detail
