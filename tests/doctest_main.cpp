// main() of the doctest programs. One addition to doctest's own: a run whose environment
// says KILN_TEST_SKIP_UNLESS=avx512_bf16 exits 77, which meson counts as SKIP, on a CPU
// without AVX512_BF16. autocast_fallback sets it: it reruns the autocast tests with
// oneDNN capped below its native bfloat16 GEMMs, which on such a CPU are absent anyway,
// so that run would repeat the plain one exactly.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace {

// CPUID leaf 7, sub-leaf 1: EAX bit 5 is AVX512_BF16 (AMX CPUs have it too).
bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
#else
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* need = std::getenv("KILN_TEST_SKIP_UNLESS")) {
    if (std::string_view(need) != "avx512_bf16") {
      std::fprintf(stderr, "KILN_TEST_SKIP_UNLESS: unknown feature '%s' (known: avx512_bf16)\n", need);
      return 2;
    }
    if (!cpu_has_avx512_bf16()) {
      std::printf("skipped: this CPU has no AVX512_BF16 (KILN_TEST_SKIP_UNLESS=avx512_bf16)\n");
      return 77;
    }
  }
  return doctest::Context(argc, argv).run();
}
