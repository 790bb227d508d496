#!/usr/bin/env bash
# Kiln as its users meet it, with one build of Kiln's libraries (-Dtests=false
# -Dexamples=false -Dbenchmarks=false -Dcuda=disabled), from outside the source tree:
#   - a Meson project with Kiln as a subproject builds consumer/main.cpp against it;
#   - `meson install` of that project installs Kiln into a fresh prefix (a subproject's
#     targets install with the project's, by the same rules as Kiln's own build);
#   - every installed header compiles on its own (-Wall -Wextra -Werror);
#   - no installed text file names the source or build tree;
#   - consumer/main.cpp builds against the prefix with g++ and pkg-config, and with
#     CMake's find_package, whose version rules are checked too.
# The consumer trains a small Transformer and exits 0 only when its loss fell.
#
#   check_install.sh SOURCE_DIR WORK_DIR     (CXX picks the compiler; default c++)
# CXX may start with ccache ("ccache clang++"): Meson takes it so, CMake as a launcher.
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:?usage: check_install.sh SOURCE_DIR WORK_DIR}
read -r -a cxx_words <<< "${CXX:-c++}"
launcher=()
[ "${cxx_words[0]}" = ccache ] && launcher=(ccache) && cxx_words=("${cxx_words[@]:1}")
cxx=${cxx_words[*]}
jobs=${KILN_INSTALL_JOBS:-$(nproc)}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
consumer=$src/tests/install/consumer
step() { echo; echo "== $*"; }

step "Meson project with Kiln as a subproject, installed into $prefix, with $cxx"
start=$(date +%s%N)
# buildtype plain (no optimisation) and a unity build (32 sources a compile): what is
# checked here is the build, the install and the three ways of building against Kiln, not
# the code's speed or each source's own includes (the test suite's own tree compiles
# every source alone), and so it builds in a fraction of the time.
build=$work/meson/build
mkdir -p "$work/meson/subprojects"
cp "$consumer/main.cpp" "$consumer/meson.build" "$work/meson/"
ln -s "$src" "$work/meson/subprojects/kiln"
CXX="${launcher[*]} $cxx" meson setup "$build" "$work/meson" --prefix="$prefix" --buildtype=plain \
  -Dunity=on -Dunity_size=32 > "$work/meson-setup.log"
ninja -C "$build" -j "$jobs" > "$work/meson-build.log"
meson install -C "$build" --quiet > "$work/install.log"
ms=$((($(date +%s%N) - start) / 1000000))
printf 'setup + build + install: %d.%d s (%s jobs)\n' $((ms / 1000)) $((ms % 1000 / 100)) "$jobs"
"$build/consumer"
echo "installed files:"
(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)

libdir=$prefix/$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
export PKG_CONFIG_PATH=$libdir/pkgconfig

step "no source or build tree path in the installed files"
# (The prefix itself may lie under the source tree, as in a test run: look for the
# tree's own directories, and subprojects/kiln, the link through which the build saw it.)
if grep -rIl -e "$build" -e "$work/meson/subprojects" -e "$src/framework" -e "$src/models" -e "$src/include" \
     -e "$src/packaging" "$prefix"; then
  echo "FAIL: the files above name the source or build tree"
  exit 1
fi
echo ok

step "every installed header compiles on its own"
(cd "$prefix/include" && find kiln -name '*.h' | sort) > "$work/headers.txt"
CXX="$cxx" bash "$src/tests/install/check_headers.sh" names "$work/headers.txt" "$prefix/include"

step "pkg-config: $(pkg-config --modversion kiln-transformer)"
# The line a Makefile needs; the rpath because this prefix is not in the loader's path.
"${launcher[@]}" "$cxx" -std=c++20 -O2 "$consumer/main.cpp" -o "$work/consumer_pkgconfig" \
  $(pkg-config --cflags --libs kiln-transformer kiln-viz) -Wl,-rpath,"$(pkg-config --variable=libdir kiln)"
"$work/consumer_pkgconfig"

step "CMake find_package(Kiln 0.2)"
cmake -S "$consumer" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log"
cmake --build "$work/cmake" -j "$jobs" > "$work/cmake-build.log"
"$work/cmake/consumer"
# The version file's rule: 0.2.x satisfies 0.2 and only 0.2 (before 1.0 minor releases may break).
mkdir -p "$work/cmake-version"
for want in 0.1 0.3 1.0; do
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(v CXX)\nfind_package(Kiln %s REQUIRED)\n' "$want" \
    > "$work/cmake-version/CMakeLists.txt"
  if cmake -S "$work/cmake-version" -B "$work/cmake-version/build-$want" -DCMAKE_PREFIX_PATH="$prefix" \
       > /dev/null 2>&1; then
    echo "FAIL: find_package(Kiln $want) accepted Kiln $(pkg-config --modversion kiln)"
    exit 1
  fi
done
echo "find_package(Kiln 0.1 / 0.3 / 1.0) refused, as they should be"

echo
echo "the consumers (Meson subproject, pkg-config, CMake) trained against Kiln"
