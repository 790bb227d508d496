#include "report/config.h"

#include <kiln/version.h>
#include <tbb/version.h>

#include <sstream>

#include "backend/backend.h"
#include "backend/cpu/blas.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/parallel.h"
#include "backend/cpu/quant_matmul.h"
#include "distributed/mpi_transport.h"
#include "text/sentencepiece.h"

#ifdef KILN_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln {

const char* version() noexcept { return KILN_VERSION_STRING; }

std::string config() {
  cpu::BlasInfo blas = cpu::blas_info();
  std::ostringstream os;
  os << "Kiln " << version() << "\n"
     << "  - C++ compiler: " << __VERSION__ << " (C++" << __cplusplus / 100 % 100 << ")\n"
     << "  - CPU vector extensions: " << cpu::cpu_vector_isa() << "\n"
     << "  - BLAS: " << blas.library << "\n"
     << "  - BLAS core: " << blas.core << " (detected by OpenBLAS: " << blas.detected << "; " << blas.reason << ")\n"
     << "  - BLAS threads: " << blas.threads << " (matmuls are partitioned by the thread pool)\n"
     << "  - CPU backend: " << cpu_backend_name() << "\n"
     << "  - Thread pool: oneTBB " << TBB_VERSION_MAJOR << "." << TBB_VERSION_MINOR << ", "
     << get_num_threads() << " threads\n"
     << "  - GEMMs: " << cpu::onednn::describe() << "\n"
     << "  - autocast bf16: " << cpu::autocast_bf16_path() << "\n"
     << "  - quantized weights (q8_0, q4_0, q4_1): " << cpu::quant_dot_path_name() << " integer dot products\n"
     << "  - MPI: " << distributed::detail::describe() << "\n"
     << "  - SentencePiece: "
     << (text::SentencePieceTokenizer::available()
             ? "built in"
             : "not built (install libsentencepiece-dev and configure with -Dsentencepiece=enabled)")
     << "\n"
#ifdef KILN_WITH_CUDA
     << "  - CUDA: " << cuda::describe() << "\n";
#else
     << "  - CUDA: " << "not built" << "\n";
#endif
  return os.str();
}

}  // namespace kiln
