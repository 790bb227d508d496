#!/usr/bin/env bash
# Every public header compiles on its own, as a user's first #include of it, by this
# tree's compiler (CXX). check_install.sh compiles the installed headers so; this runs in
# the trees where the install test does not (the clang++ sanitizer tree), from the source
# tree's include/, which has the installed layout (its entries link into framework/ and
# models/transformer/).
#
#   check_headers.sh SOURCE_DIR BUILD_INCLUDE_DIR HEADER...
# HEADER: a public header's path under SOURCE_DIR/framework or SOURCE_DIR/models/transformer;
# BUILD_INCLUDE_DIR holds the generated kiln/version.h.
set -euo pipefail
src=$(cd "$1" && pwd)
build_include=$2
shift 2
[ $# -gt 0 ] || { echo "check_headers.sh: no headers given" >&2; exit 2; }
for header in "$@"; do
  header=$(realpath -s "$header")
  case "$header" in
    "$src"/framework/*) echo "kiln/${header#"$src"/framework/}" ;;
    "$src"/models/transformer/*) echo "kiln/transformer/${header#"$src"/models/transformer/}" ;;
    *) echo "check_headers.sh: $header is not under $src/framework or $src/models/transformer" >&2; exit 2 ;;
  esac
done > headers.txt
# shellcheck disable=SC2016
xargs -P "$(nproc)" -I{} sh -c 'echo "#include <{}>" | $0 -std=c++20 -Wall -Wextra -Werror -fsyntax-only \
  -I"$1" -I"$2" -x c++ - || { echo "FAIL: {} does not compile alone"; exit 255; }' "${CXX:-c++}" \
  "$src/include" "$build_include" < headers.txt
echo "$(wc -l < headers.txt) public headers compile alone with ${CXX:-c++}"
