#!/usr/bin/env bash
# The main job: install what is missing, build Kiln, run the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
[ -d build ] || meson setup build --buildtype=release
ninja -C build
# Trains a German->English toy translator from scratch (seconds), prints every
# translation and writes its pictures to translate_toy_out/.
./build/examples/translate_toy/translate_toy "$@"
