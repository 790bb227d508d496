// Loads cuBLAS and cuBLASLt on first use (cublas_api.h says why).
#include "backend/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace kiln::cuda {
namespace {

std::string soname(const char* base) { return std::string(base) + ".so." + std::to_string(CUBLAS_VER_MAJOR); }

void* open_library(const std::string& name) {
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    KILN_FAIL("cuda", "cuBLAS: cannot load ", name, " (", why ? why : "no reason given",
              "): the CUDA toolkit's libraries must be where the loader looks (ldconfig's paths or LD_LIBRARY_PATH)");
  }
  return lib;
}

template <class F>
void bind(void* lib, const std::string& lib_name, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  KILN_CHECK(out != nullptr, "cuda", "cuBLAS: ", lib_name, " has no function ", name, " (Kiln was built with cuBLAS ",
             CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, " headers)");
}

CublasApi load() {
  CublasApi api;
  const std::string blas_name = soname("libcublas"), lt_name = soname("libcublasLt");
  // Handles stay open for the life of the process: cuBLAS handles live as long.
  void* blas = open_library(blas_name);
  void* lt = open_library(lt_name);
#define KILN_BIND_BLAS(f) bind(blas, blas_name, #f, api.f);
#define KILN_BIND_LT(f) bind(lt, lt_name, #f, api.f);
#define KILN_BIND_TYPED(f, type) KILN_BIND_BLAS(f)
  KILN_CUBLAS_FUNCTIONS(KILN_BIND_BLAS)
  KILN_CUBLAS_TYPED_FUNCTIONS(KILN_BIND_TYPED)
  KILN_CUBLASLT_FUNCTIONS(KILN_BIND_LT)
#undef KILN_BIND_BLAS
#undef KILN_BIND_LT
#undef KILN_BIND_TYPED
  return api;
}

}  // namespace

const CublasApi& cublas_api() {
  static const CublasApi api = load();
  return api;
}

}  // namespace kiln::cuda
