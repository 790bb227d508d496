#!/usr/bin/env bash
# The CPU rows of the table at the top of benchmarks/RESULTS.md, measured now:
#
#   TORCH_PYTHON=venv/bin/python bash benchmarks/current_figures.sh BUILD [THREADS]
#
# runs benchmarks/compare.sh with ROUNDS=3 (Kiln and PyTorch at its fastest thread split
# alternating three times after the split search) on the tiny, small and base training
# steps in float32, then on base under bf16 autocast (BF16=1), and prints one Markdown
# row per configuration in RESULTS.md's format: Kiln's and PyTorch's ms/step (the
# medians of the rounds), PyTorch's version and thread split, the median of the rounds'
# Kiln/PyTorch ratios, both peak resident sizes (the search run's), the CPU (lscpu's
# model name, family and model, its widest matrix or vector unit, the cores), today's
# date and the commit (git rev-parse --short HEAD, "-dirty" when tracked files differ
# from it: the rows describe the build in BUILD, which should be of that commit).
#
# BUILD is a release build tree (meson setup BUILD --buildtype=release); THREADS defaults
# to every core. compare.sh's own output (its table, the rounds' lines) goes to stderr and
# its JSON lines to BUILD/current_figures.jsonl; the rows go to stdout. The base step takes
# seconds a step: the whole run takes about 20 minutes on two cores. Run it on a quiet
# machine. Environment, all optional: TORCH_PYTHON (as compare.sh; default
# /usr/bin/python3), ROUNDS (default 3), CONFIGS (the float32 configurations, default
# "tiny small base"), BF16_CONFIGS (the bf16 ones, default "base"; empty for none),
# NINJA (as compare.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: current_figures.sh BUILD [THREADS]}
threads=${2:-$(nproc)}
read -r -a fp32_configs <<<"${CONFIGS-tiny small base}"
read -r -a bf16_configs <<<"${BF16_CONFIGS-base}"
export ROUNDS=${ROUNDS:-3}
jsonl=$build/current_figures.jsonl
: >"$jsonl"

if [ ${#fp32_configs[@]} -gt 0 ]; then
  JSONL=$jsonl bash benchmarks/compare.sh "$build" "$threads" "${fp32_configs[@]}" >&2
fi
if [ ${#bf16_configs[@]} -gt 0 ]; then
  JSONL=$jsonl BF16=1 bash benchmarks/compare.sh "$build" "$threads" "${bf16_configs[@]}" >&2
fi

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
flags=$(grep -m1 '^flags' /proc/cpuinfo)
unit=""
case " $flags " in
  *" amx_tile "*) unit=", AMX" ;;
  *" avx512_bf16 "*) unit=", AVX512_BF16" ;;
  *" avx512f "*) unit=", AVX-512" ;;
  *" avx2 "*) unit=", AVX2" ;;
esac
family=$(lscpu | sed -n 's/^CPU family: *//p' | head -1)
model=$(lscpu | sed -n 's/^Model: *//p' | head -1)
cores=$(nproc)
device="$(lscpu | sed -n 's/^Model name: *//p' | head -1) (family $family model $model$unit), $cores cores"
[ "$threads" = "$cores" ] || device="$device, $threads threads"

/usr/bin/python3 - "$jsonl" "$device" "$(date +%F)" "$commit" <<'PY'
import json, statistics, sys
path, device, date, commit = sys.argv[1:5]
for line in open(path):
    r = json.loads(line)
    k, t = r["kiln"], r["torch"]
    if r["rounds"]:
        k_ms = statistics.median(a["ms_per_step"] for a in r["rounds"]["kiln"])
        t_ms = statistics.median(a["ms_per_step"] for a in r["rounds"]["torch"])
        ratio = statistics.median(a["ms_per_step"] / b["ms_per_step"]
                                  for a, b in zip(r["rounds"]["kiln"], r["rounds"]["torch"]))
    else:  # ROUNDS=0: the search run alone
        k_ms, t_ms = k["ms_per_step"], t["ms_per_step"]
        ratio = k_ms / t_ms
    precision = "bf16 autocast" if r["precision"] == "bf16" else "fp32"
    if r["flush_denormal"]:
        precision += ", denormals flushed"
    print(f"| {r['config']} | {precision} | {device} | {k_ms:.2f} ms | "
          f"{t_ms:.2f} ms ({t.get('torch', '?')}, {t['split']}) | {ratio:.3f} | "
          f"{k['peak_rss_mb']:.0f} / {t['peak_rss_mb']:.0f} MB RSS | {date} | {commit} |")
PY
