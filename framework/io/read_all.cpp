#include "io/read_all.h"

#include <sstream>

namespace kiln::io::detail {

std::string read_all(std::istream& in) {
  const std::istream::pos_type start = in.tellg();
  if (start != std::istream::pos_type(-1) && in.seekg(0, std::ios::end)) {
    const std::istream::pos_type end = in.tellg();
    in.seekg(start);
    if (end != std::istream::pos_type(-1) && end >= start && in) {
      std::string bytes(static_cast<size_t>(end - start), '\0');
      in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      // A file that shrank while read: what was there. (A failed read set badbit.)
      bytes.resize(static_cast<size_t>(in.gcount()));
      if (in.eof() && !in.bad()) in.clear(std::ios::eofbit);
      return bytes;
    }
  }
  in.clear(in.rdstate() & ~std::ios::failbit);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace kiln::io::detail
