#!/usr/bin/env bash
# Every public header compiles on its own, as a user's first #include of it, by the
# compiler CXX (-Wall -Wextra -Werror), KILN_INSTALL_JOBS at a time (default: the cores):
#
#   check_headers.sh names NAMES_FILE INCLUDE_DIR...
#       the headers named in NAMES_FILE, one a line ("kiln/core/tensor.h"), found in the
#       INCLUDE_DIRs (check_install.sh: the installed headers)
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
  *)
    echo "usage: check_headers.sh names NAMES_FILE INCLUDE_DIR..." >&2
    exit 2
    ;;
esac
