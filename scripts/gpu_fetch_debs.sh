#!/usr/bin/env bash
# Downloads (does not install) Debian 12's OpenBLAS, oneTBB and doctest packages into
# .gpu-debs/, for scripts/gpu_check.sh on a GPU machine whose image has a compiler and
# CUDA but no apt (it unpacks them into a private prefix). Run on Debian 12 (amd64).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-debs
cd .gpu-debs
apt-get download libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 \
  libtbb-dev libtbb12 libtbbmalloc2 libhwloc15 libgfortran5 libquadmath0 doctest-dev
ls -l
