#!/usr/bin/env bash
# translate_toy trained on the reference backend (KILN_CPU_BACKEND=reference: the
# required kernels in plain loops, every fused kernel composed from them) must translate
# every training pair and every held-out pair exactly, as it does on the CPU backend.
# Usage: translate_toy_reference.sh TRANSLATE_TOY
set -euo pipefail
prog=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
KILN_CPU_BACKEND=reference "$prog" --no-progress --out "$dir/out" > "$dir/log.txt" 2>&1 || {
  cat "$dir/log.txt"
  exit 1
}
grep 'exact match' "$dir/log.txt"
matches=$(grep -c 'exact match: .* = 100.0%' "$dir/log.txt" || true)
if [ "$matches" != 2 ]; then
  echo "expected 100% exact matches on the training and the held-out pairs" >&2
  exit 1
fi
grep -q 'CPU backend: reference' "$dir/log.txt" || {
  echo "the run did not report the reference backend" >&2
  exit 1
}
