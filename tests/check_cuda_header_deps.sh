#!/usr/bin/env bash
# The build records which headers each CUDA object was compiled from (nvcc's depfile,
# read by ninja: see framework/meson.build), so that editing a header rebuilds the .cu
# files that include it. Checks that every .cu object of the library lists
# core/tensor.h and backend/cuda/cuda_backend.h among its recorded dependencies.
#   check_cuda_header_deps.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: check_cuda_header_deps.sh BUILD_DIR}
ninja -C "$build" -t deps | awk '
  /^[^ \t].*\.cu\.o: / { obj = $1; sub(/:$/, "", obj); objs[obj] = 1; next }
  /^[ \t]/ && obj != "" {
    if ($1 ~ /core\/tensor\.h$/) tensor[obj] = 1
    if ($1 ~ /backend\/cuda\/cuda_backend\.h$/) backend[obj] = 1
    next
  }
  { obj = "" }
  END {
    n = 0; bad = 0
    for (o in objs) {
      n++
      if (!(o in tensor) || !(o in backend)) { print "no header dependencies recorded for " o; bad++ }
    }
    if (n < 11) { print "expected the 11 CUDA objects of libkiln in the recorded dependencies, found " n; exit 1 }
    if (bad) exit 1
    print n " CUDA objects, each with its headers recorded"
  }'
