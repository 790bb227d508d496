#!/usr/bin/env bash
# The main job: install what is missing, build Kiln, run the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
[ -d build ] || meson setup build --buildtype=release
ninja -C build
./build/examples/autograd_demo/autograd_demo "$@"
