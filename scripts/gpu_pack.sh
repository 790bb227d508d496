#!/usr/bin/env bash
# Packs a CUDA build tree for scripts/gpu_check.sh --prebuilt on another machine (a GPU
# machine with no compiler time to spare, or without OpenBLAS/oneTBB): the libraries,
# the test programs (kiln_tests and the suites with programs of their own),
# bench_train_step, bench_attention, bench_bert, translate_toy and translate_de_en,
# stripped, in the tree's layout (their RUNPATH is relative), with the OpenBLAS, oneTBB,
# gfortran and SentencePiece runtime libraries they load in libs/, and all-MiniLM-L6-v2's
# config.json in minilm/ (from the model cache, where scripts/fetch_models.sh put it: the
# bert stage builds the model from it with random weights). The GPU machine needs the
# same CUDA major version (cuBLAS is not packed).
#
#   bash scripts/gpu_pack.sh build-gpu .gpu/kiln-gpu.tar.xz
set -euo pipefail
build=${1:?usage: gpu_pack.sh BUILD_DIR OUT.tar.xz}
tarball=${2:?usage: gpu_pack.sh BUILD_DIR OUT.tar.xz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# (What a build lacks, kiln-viz without libpng say, is left out.)
files=$(cd "$build" && { ls -d framework/libkiln.so* models/*/libkiln_*.so* framework/viz/libkiln_viz.so* \
  tests/kiln_tests tests/test_* tests/save_loop \
  benchmarks/bench_train_step benchmarks/bench_attention benchmarks/bench_bert examples/translate_toy/translate_toy \
  examples/translate_de_en/translate_de_en 2>/dev/null || true; } | grep -v '\.p$')
for f in $files; do
  [ -f "$build/$f" ] || [ -L "$build/$f" ] || continue
  mkdir -p "$stage/$(dirname "$f")"
  cp -P "$build/$f" "$stage/$f"
  [ -L "$stage/$f" ] || strip --strip-unneeded "$stage/$f"
done
minilm_config=${KILN_MODEL_CACHE:-$HOME/.cache/kiln/models}/all-MiniLM-L6-v2/config.json
if [ -f "$minilm_config" ]; then
  mkdir -p "$stage/minilm" && cp "$minilm_config" "$stage/minilm/"
else
  echo "gpu_pack.sh: no $minilm_config (bash scripts/fetch_models.sh): the bert stage will need .gpu/minilm/config.json" >&2
fi
mkdir -p "$stage/libs"
for lib in $(ldd "$build/tests/test_cuda" "$build/examples/translate_de_en/translate_de_en" 2>/dev/null |
  awk '/openblas|tbb|gfortran|quadmath|sentencepiece|protobuf/ {print $3}' | sort -u); do
  cp -L "$lib" "$stage/libs/"
done
echo "$(git rev-parse --short HEAD) $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/nvcc \1/p') $(grep -o "gpu_arch=[^ ]*\|gpu_arch *: [^ ]*" "$build/meson-logs/meson-log.txt" | head -1)" >"$stage/BUILD_INFO"
mkdir -p "$(dirname "$tarball")"
tar -C "$stage" -cJf "$tarball" .
ls -l "$tarball"
