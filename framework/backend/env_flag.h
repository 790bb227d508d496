#pragma once
// A diagnostic switch read from the environment: on when the variable is set to anything
// but "" or "0". Backend-internal; callers keep the answer in a function-local static, so
// the environment is read once.
#include <cstdlib>
#include <cstring>

namespace kiln {

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace kiln
