#pragma once
// The one error type of Kiln. Every check that can fail on user input throws it with a
// message that starts with the op in brackets and shows what was given:
//   [matmul] shapes (2, 3) and (4, 5) cannot be multiplied
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Memory that could not be had (torch.OutOfMemoryError): thrown instead of
// std::bad_alloc, by the allocators and by every tensor creation, whose message adds the
// op, the shape and the bytes asked for.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class E = Error, class... Args>
[[noreturn]] void throw_error(const char* op, const Args&... args) {
  std::ostringstream os;
  os << '[' << op << "] ";
  (os << ... << args);
  throw E(os.str());
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, "op", "message parts", ...): throws kiln::Error("[op] message parts").
#define KILN_CHECK(cond, op, ...)                          \
  do {                                                     \
    if (!(cond)) ::kiln::detail::throw_error(op, __VA_ARGS__); \
  } while (0)

#define KILN_FAIL(op, ...) ::kiln::detail::throw_error(op, __VA_ARGS__)
#define KILN_FAIL_OUT_OF_MEMORY(op, ...) ::kiln::detail::throw_error<::kiln::OutOfMemoryError>(op, __VA_ARGS__)
