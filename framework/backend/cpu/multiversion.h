#pragma once
// Function multiversioning for hot inner loops: GCC compiles a marked function once per
// target (baseline x86-64, AVX2+FMA, AVX-512) and picks the best clone at load time
// (ifunc), so the default build runs on any x86-64 CPU yet uses wide vectors where
// they exist. Never -march=native.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KILN_NO_MULTIVERSION)
#define KILN_MULTIVERSION \
  __attribute__((target_clones("default", "arch=haswell", "arch=skylake-avx512")))
#else
#define KILN_MULTIVERSION
#endif
