#pragma once
#include <string>

namespace kiln {

// What this build of Kiln runs on, like torch.__config__.show(): version, compiler,
// CPU vector extensions, the BLAS with its kernel core and threads, and the thread pool.
std::string config();

}  // namespace kiln
