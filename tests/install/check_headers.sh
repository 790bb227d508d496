#!/usr/bin/env bash
# Every public header compiles on its own, as a user's first #include of it, by the
# compiler CXX (-Wall -Wextra -Werror), KILN_INSTALL_JOBS at a time (default: the cores):
#
#   check_headers.sh names NAMES_FILE INCLUDE_DIR...
#       the headers named in NAMES_FILE, one a line ("kiln/core/tensor.h"), found in the
#       INCLUDE_DIRs (check_install.sh: the installed headers)
#   check_headers.sh sources SOURCE_DIR BUILD_INCLUDE_DIR HEADER...
#       the headers at those paths under SOURCE_DIR/framework or SOURCE_DIR/models/<package>,
#       from the source tree's include/, which has the installed layout (its entries link
#       into framework/ and models/<package>/);
#       BUILD_INCLUDE_DIR holds the generated kiln/version.h. The test suite runs this in
#       the trees where the install test does not (the clang++ sanitizer tree).
set -euo pipefail
mode=${1:-}
shift || true

compile_alone() {  # NAMES_FILE INCLUDE_DIR...
  local names=$1 flags=()
  shift
  for dir in "$@"; do flags+=(-I"$dir"); done
  # shellcheck disable=SC2016
  xargs -P "${KILN_INSTALL_JOBS:-$(nproc)}" -I{} sh -c 'echo "#include <{}>" \
    | $0 -std=c++20 -Wall -Wextra -Werror -fsyntax-only "$@" -x c++ - \
    || { echo "FAIL: {} does not compile alone"; exit 255; }' "${CXX:-c++}" "${flags[@]}" < "$names"
  echo "$(wc -l < "$names") public headers compile alone with ${CXX:-c++}"
}

case "$mode" in
  names)
    [ $# -ge 2 ] || { echo "usage: check_headers.sh names NAMES_FILE INCLUDE_DIR..." >&2; exit 2; }
    compile_alone "$@"
    ;;
  sources)
    [ $# -ge 3 ] || { echo "usage: check_headers.sh sources SOURCE_DIR BUILD_INCLUDE_DIR HEADER..." >&2; exit 2; }
    src=$(cd "$1" && pwd)
    build_include=$2
    shift 2
    for header in "$@"; do
      header=$(realpath -s "$header")
      case "$header" in
        "$src"/framework/*) echo "kiln/${header#"$src"/framework/}" ;;
        "$src"/models/transformer/*) echo "kiln/transformer/${header#"$src"/models/transformer/}" ;;
        "$src"/models/bert/*) echo "kiln/bert/${header#"$src"/models/bert/}" ;;
        "$src"/models/llama/*) echo "kiln/llama/${header#"$src"/models/llama/}" ;;
        *) echo "check_headers.sh: $header is not under $src/framework or $src/models" >&2; exit 2 ;;
      esac
    done > headers.txt
    compile_alone headers.txt "$src/include" "$build_include"
    ;;
  *)
    echo "usage: check_headers.sh names|sources ..." >&2
    exit 2
    ;;
esac
