#pragma once
// Function multiversioning for hot inner loops: GCC compiles a marked function once per
// target (baseline x86-64, AVX2+FMA, AVX-512) and picks the best clone at load time
// (ifunc), so the default build runs on any x86-64 CPU yet uses wide vectors where
// they exist. Never -march=native. The targets are the x86-64 ISA levels (v3: AVX2+FMA,
// v4: AVX-512), which the resolver tests by CPU features; "arch=haswell" or
// "arch=skylake-avx512" would test the CPU model and pick the baseline clone on AMD
// and on newer Intel parts (measured: a Zen 3 ran the SSE2 clone).
// Off under ThreadSanitizer: the ifunc resolvers run while the dynamic loader relocates
// the library, before the TSan runtime is set up, and the instrumented resolver crashes.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KILN_NO_MULTIVERSION) && \
    !defined(__SANITIZE_THREAD__)
#define KILN_MULTIVERSION \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define KILN_MULTIVERSION
#endif

// For the helpers a KILN_MULTIVERSION function calls (vec_math.h, row_reduce.h, the
// activations): inlined into every clone, so that each is compiled for the clone's ISA.
// A helper the inliner leaves out of line is compiled once, for baseline x86-64, and
// called from the AVX2 clone an element at a time (GELU's derivative did: its backward
// ran 14x slower).
#define KILN_INLINE_IN_CLONES [[gnu::always_inline]] inline
