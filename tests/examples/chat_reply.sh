#!/usr/bin/env bash
# examples/chat must print llama.cpp's greedy reply to the README's prompt, word for word
# (tests/fixtures/chat_reply.txt, by make_chat_reply_fixture.py). Skips (77) without the
# model unless KILN_REQUIRE_MODELS=1, as the C++ tests do.
# Usage: chat_reply.sh CHAT FIXTURES_DIR
set -euo pipefail
prog=$1
want=$2/chat_reply.txt
dir=${KILN_MODEL_CACHE:-$HOME/.cache/kiln/models}/smollm2-135m
if [ ! -e "$dir/.complete" ]; then
  if [ "${KILN_REQUIRE_MODELS:-}" = 1 ]; then
    echo "the pretrained model $dir is missing: run scripts/fetch_models.sh" >&2
    exit 1
  fi
  echo "skipped: $dir is missing (scripts/fetch_models.sh fetches it)"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$prog" --model "$dir/SmolLM2-135M-Instruct.Q4_1.gguf" --prompt "Write a haiku about the sea." --max-tokens 64 > "$out"
cat "$out"
# The reply: the lines after the echoed prompt ("> ...") up to the speeds ("[prompt: ...").
if ! diff <(sed -n '/^> /,/^\[prompt: /p' "$out" | sed '1d;$d') "$want"; then
  echo "examples/chat's reply differs from llama.cpp's ($want)" >&2
  exit 1
fi
