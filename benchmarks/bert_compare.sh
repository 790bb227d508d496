#!/usr/bin/env bash
# Kiln's BERT encoder against PyTorch (eager and torch.compile) and ONNX Runtime (the
# exported model, and the same after ORT's BERT fusions) on all-MiniLM-L6-v2, same
# machine, same inputs, each engine in its own process (its own peak memory):
# bench_bert and benchmarks/torch_bert.py, cases forward (32 x 128), latency (1 x 16)
# and corpus (the Ding dictionary's English sentences, sentences/s).
#
# Each engine first runs the forward and latency cases at every thread count from 1 to
# THREADS and keeps its fastest; then ROUNDS rounds (default 3) of every engine at its
# kept count, in turn, so that a drift of the machine's speed falls on all alike; the
# medians of the rounds are reported with Kiln's time over each engine's, and the corpus
# case once per engine at its forward count (not torch.compile, which would compile
# again for every batch shape). Writes OUT/results.jsonl (every run) and prints
# a table, the forward's GFLOP of products and the CPU's peak (bench_peak).
#
#   TORCH_PYTHON=<python with torch, transformers, sentence-transformers, onnxruntime>
#   [ROUNDS=R] [ENGINES="kiln torch compile ort ort_fused"] [CASES="forward latency corpus"] [BF16=1]
#   bash benchmarks/bert_compare.sh BUILD_DIR OUT_DIR [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bert_compare.sh BUILD_DIR OUT_DIR [THREADS]}
out=${2:?usage: bert_compare.sh BUILD_DIR OUT_DIR [THREADS]}
threads=${3:-$(nproc)}
rounds=${ROUNDS:-3}
engines=${ENGINES:-kiln torch compile ort ort_fused}
cases=${CASES:-forward latency corpus}
py=${TORCH_PYTHON:?set TORCH_PYTHON to a python with torch, transformers, sentence-transformers and onnxruntime}
bf16=()
[ "${BF16:-0}" = 1 ] && bf16=(--bf16)
mkdir -p "$out"
jsonl="$out/results.jsonl"
: > "$jsonl"
ninja -C "$build" benchmarks/bench_bert > /dev/null
"$build/benchmarks/bench_bert" --sentences-out "$out/sentences.txt"
export KILN_BERT_CORPUS="$out/sentences.txt"

# one ENGINE CASE THREADS [RUNS]: one process, its JSON line appended and printed.
one() {
  local engine=$1 case=$2 t=$3 runs=${4:-10} line
  if [ "$engine" = kiln ]; then
    line=$("$build/benchmarks/bench_bert" --case "$case" --threads "$t" --runs "$runs" "${bf16[@]}")
  else
    line=$("$py" benchmarks/torch_bert.py --engine "$engine" --case "$case" --threads "$t" --runs "$runs" "${bf16[@]}" 2>/dev/null)
  fi
  echo "$line" >> "$jsonl"
  echo "$line"
}
ms_of() { sed -n 's/.*"ms": \([0-9.]*\).*/\1/p' <<<"$1"; }

declare -A best_t
for c in $cases; do
  [ "$c" = corpus ] && continue
  for e in $engines; do
    best="" 
    for t in $(seq 1 "$threads"); do
      ms=$(ms_of "$(one "$e" "$c" "$t" 5)")
      if [ -z "$best" ] || awk "BEGIN{exit !($ms < $best)}"; then best=$ms; best_t[$e,$c]=$t; fi
    done
    echo "== $e $c: fastest at ${best_t[$e,$c]} threads ($best ms)"
  done
  for r in $(seq 1 "$rounds"); do
    for e in $engines; do one "$e" "$c" "${best_t[$e,$c]}" 10 > /dev/null; done
  done
done
if [[ " $cases " == *" corpus "* ]]; then
  # Not torch.compile: each new batch shape would compile the model again.
  for e in $engines; do [ "$e" = compile ] || one "$e" corpus "${best_t[$e,forward]:-$threads}" 1; done
fi

"$py" - "$jsonl" "$rounds" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rounds = int(sys.argv[2])
print("\n| case | engine | threads | median ms | sentences/s | peak RSS MB | Kiln / it |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for case in ["forward", "latency", "corpus"]:
    rows = {}
    for r in runs:
        if r["case"] != case:
            continue
        rows.setdefault(r["engine"], []).append(r)
    if not rows:
        continue
    med = {}
    for e, rs in rows.items():
        tail = rs[-rounds:] if case != "corpus" else rs[-1:]
        med[e] = (statistics.median(x["ms"] for x in tail), tail)
    for e, (m, tail) in med.items():
        ratio = med["kiln"][0] / m if "kiln" in med else float("nan")
        print("| %s | %s | %d | %.1f | %.1f | %.0f | %.2f |" % (case, e, tail[-1]["threads"], m,
              statistics.median(x["sentences_per_s"] for x in tail), max(x["peak_rss_mb"] for x in tail), ratio))
print("\ncpu:", runs[0]["cpu"])
for case in ["forward", "latency"]:
    k = [r for r in runs if r["engine"] == "kiln" and r["case"] == case and "products_gflop" in r]
    if k:
        print("%s: %.2f GFLOP of products a forward" % (case, k[0]["products_gflop"]))
PY
# The CPU's peak at the same threads: the products' GFLOP over it is the least time any
# engine's forward can take here.
if ninja -C "$build" benchmarks/bench_peak > /dev/null 2>&1; then
  echo
  "$build/benchmarks/bench_peak" --threads "$threads"
fi
