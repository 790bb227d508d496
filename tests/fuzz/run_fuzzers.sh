#!/usr/bin/env bash
# Runs each libFuzzer target of tests/fuzz for SECONDS (default 60) from a copy of its
# committed seeds: run_fuzzers.sh BUILD_DIR [SECONDS]
# BUILD_DIR is a clang tree configured with -Dfuzzing=true (scripts/test.sh's
# build-sanitize is one); the targets are built first (ninja fuzz).
# New corpus entries go to a temporary directory, never into the source tree. A crash's
# reproducer is kept as BUILD_DIR/fuzz-artifacts/<target>-crash-<sha1> (libFuzzer's
# -artifact_prefix); the script then prints its path and, after the other targets have
# run, exits 1. It prints each target's executions (libFuzzer's final stats).
# Environment: FUZZ_TARGETS="fuzz_json ..." runs only those; extra libFuzzer flags in
# FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
set -u -o pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
seconds=${2:-60}
case "$seconds" in '' | *[!0-9]*) echo "$0: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)

if ! ninja -C "$build" fuzz >/dev/null; then
  echo "$0: building the fuzz targets failed in $build (clang with libFuzzer needed; try ninja -C $build fuzz)" >&2
  exit 2
fi

# The targets that read paths (the checkpoint loader, the vocabulary, Ding corpus and
# SentencePiece readers) write every input to a file under $TMPDIR: in memory (/dev/shm) that runs
# five times as many inputs a minute as on a disk.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
  export TMPDIR=/dev/shm
fi

artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# target  seeds  dictionary  max_len (bytes: a few times the largest seed)
specs="fuzz_json json json.dict 4096
fuzz_safetensors safetensors safetensors.dict 8192
fuzz_checkpoint checkpoint safetensors.dict 8192
fuzz_vocab vocab vocab.dict 1024
fuzz_ding_corpus ding_corpus ding_corpus.dict 4096
fuzz_tokenizer tokenizer tokenizer.dict 4096
fuzz_gguf gguf gguf.dict 8192
fuzz_byte_bpe byte_bpe byte_bpe.dict 4096
fuzz_sentencepiece sentencepiece sentencepiece.dict 16384"

status=0
while read -r target seeds dict max_len; do
  if [ -n "${FUZZ_TARGETS:-}" ] && [[ " $FUZZ_TARGETS " != *" $target "* ]]; then continue; fi
  exe="$build/tests/fuzz/$target"
  # fuzz_sentencepiece is built only where Kiln has SentencePiece (-Dsentencepiece).
  if [ "$target" = fuzz_sentencepiece ] && [ ! -x "$exe" ]; then
    echo "== $target: skipped (this tree is built without SentencePiece)"
    continue
  fi
  corpus="$work/$target"
  mkdir -p "$corpus"
  cp "$here/seeds/$seeds/"* "$corpus/"
  log="$work/$target.log"
  echo "== $target: ${seconds}s, seeds $here/seeds/$seeds"
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$exe" "$corpus" -max_total_time="$seconds" -dict="$here/$dict" -max_len="$max_len" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$target-" ${FUZZ_ARGS:-} \
    >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  per_sec=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ $rc -eq 0 ]; then
    echo "$target: ${execs:-?} executions in ${seconds}s (${per_sec:-?}/s)"
  else
    echo "$target: ${execs:-?} executions before it stopped (${per_sec:-?}/s)"
  fi
  if [ $rc -ne 0 ]; then
    status=1
    tail -n 60 "$log"
    reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "$target: CRASH (exit $rc); reproducer: ${reproducer:-none written, see the log above}"
    echo "  replay: $exe ${reproducer:-<file>}"
  fi
done <<<"$specs"
exit $status
