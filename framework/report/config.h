#pragma once
#include <string>

namespace kiln {

// What this build of Kiln runs on, like torch.__config__.show(): version, compiler,
// CPU vector extensions, the BLAS with its kernel core and threads, the thread pool and
// oneDNN (built in or not, and whether bf16 GEMMs run natively), how the CPU runs
// autocast's bfloat16 products, and MPI (built in or not, its version, CUDA-aware or not).
std::string config();

}  // namespace kiln
