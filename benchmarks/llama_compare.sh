#!/usr/bin/env bash
# Kiln against llama.cpp on the same GGUF file (SmolLM2-135M-Instruct, Q4_1), same
# machine, same threads: prompt processing (128 tokens) and generation (128 tokens),
# tokens a second, and each process's peak resident memory. Engines: Kiln with the
# file's blocks (q), Kiln on the model dequantised to float32 (f32) and under bfloat16
# autocast (bf16); llama.cpp through llama-cpp-python without and with flash attention
# (benchmarks/llama_cpp_bench.py). ROUNDS rounds (default 3), every engine once a round
# in turn, each in its own process; the medians of the rounds are printed. Writes
# OUT/results.jsonl.
#
#   LLAMA_PYTHON=<python with llama-cpp-python built natively>
#   [ROUNDS=R] [THREADS=T] bash benchmarks/llama_compare.sh BUILD_DIR OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: llama_compare.sh BUILD_DIR OUT_DIR}
out=${2:?usage: llama_compare.sh BUILD_DIR OUT_DIR}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
py=${LLAMA_PYTHON:?set LLAMA_PYTHON to a python with llama-cpp-python}
mkdir -p "$out"
jsonl="$out/results.jsonl"
: > "$jsonl"
ninja -C "$build" benchmarks/bench_llama > /dev/null

run() {
  case $1 in
    kiln-q | kiln-f32 | kiln-bf16)
      "$build/benchmarks/bench_llama" --weights "${1#kiln-}" --threads "$threads" --runs "$2" ;;
    llama.cpp) "$py" benchmarks/llama_cpp_bench.py --threads "$threads" --runs "$2" --flash-attn 0 2>/dev/null ;;
    llama.cpp-fa) "$py" benchmarks/llama_cpp_bench.py --threads "$threads" --runs "$2" --flash-attn 1 2>/dev/null ;;
  esac
}

for r in $(seq 1 "$rounds"); do
  for e in kiln-q llama.cpp llama.cpp-fa kiln-f32 kiln-bf16; do
    runs=5
    [ "$e" = kiln-bf16 ] && runs=1
    line=$(run "$e" "$runs")
    echo "{\"round\": $r, \"name\": \"$e\", ${line#\{}" | tee -a "$jsonl"
  done
done

"${py}" - "$jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
names = list(dict.fromkeys(r["name"] for r in rows))
med = {n: {k: statistics.median(r[k] for r in rows if r["name"] == n)
           for k in ("pp_tokens_per_s", "tg_tokens_per_s", "peak_rss_mb")} for n in names}
base = med["llama.cpp-fa"] if med["llama.cpp-fa"]["tg_tokens_per_s"] >= med["llama.cpp"]["tg_tokens_per_s"] else med["llama.cpp"]
print(f"{'engine':14} {'pp t/s':>8} {'tg t/s':>8} {'peak MB':>8} {'pp/llama':>9} {'tg/llama':>9}")
for n in names:
    m = med[n]
    print(f"{n:14} {m['pp_tokens_per_s']:8.1f} {m['tg_tokens_per_s']:8.1f} {m['peak_rss_mb']:8.1f} "
          f"{m['pp_tokens_per_s'] / max(med['llama.cpp']['pp_tokens_per_s'], med['llama.cpp-fa']['pp_tokens_per_s']):9.2f} "
          f"{m['tg_tokens_per_s'] / max(med['llama.cpp']['tg_tokens_per_s'], med['llama.cpp-fa']['tg_tokens_per_s']):9.2f}")
py_rss = statistics.median(r["python_rss_mb"] for r in rows if r["name"].startswith("llama.cpp"))
print(f"llama.cpp's processes held {py_rss:.1f} MB before loading the model (Python, numpy, llama_cpp)")
PY
