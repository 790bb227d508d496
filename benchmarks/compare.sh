#!/usr/bin/env bash
# Kiln against PyTorch at its best on the same machine, in one invocation: a Transformer
# training step at the base, small and tiny configurations (benchmarks/train_config.h;
# "seed" is accepted as another name for base), each framework in its own process (so
# peak memory is each one's own), same shapes, same token ids. PyTorch runs every thread
# split whose product fits the threads (BLAS threads x torch threads:
# OPENBLAS_NUM_THREADS/MKL_NUM_THREADS x torch.set_num_threads) and the fastest is
# reported with its split; with COMPILE=1 also torch.compile's step (PyTorch 2.x).
# TORCH_PYTHON picks the PyTorch: a virtual environment's python with PyPI's torch 2.x,
# or Debian's /usr/bin/python3 (python3-torch 1.13, OpenBLAS, run with this CPU's best
# OPENBLAS_CORETYPE; Kiln chooses its own). With BF16=1 both run in bf16 mixed precision
# instead: Kiln's autocast (bench_train_step --bf16) against PyTorch's
# torch.autocast("cpu", dtype=torch.bfloat16) (torch_train_step.py --bf16), each at its
# best split as above. With FLUSH_DENORMAL=1 Kiln runs with kiln::set_flush_denormal(true)
# and PyTorch's splits are each tried with torch.set_flush_denormal(True) and without, the
# fastest reported (",ftz" after its split when it flushed): both sides then may drop
# subnormal floats, which both otherwise keep.
#
# With ROUNDS=R, R more rounds per configuration follow, Kiln then PyTorch at the split
# (and flush mode) that won, alternating, so that a drift of the machine's speed falls on
# both sides; a line after the table gives every round's ratio and their median.
#
# With JSONL=FILE, one JSON line per configuration is also appended to FILE, for scripts
# (benchmarks/current_figures.sh): "config", "precision" (fp32 or bf16), "flush_denormal",
# "threads", "cpu" (lscpu's model name), "kiln" and "torch" (the search run's JSON lines
# of bench_train_step and of PyTorch's fastest split, with "split" added), "compiled"
# (torch.compile's, or null), and "rounds": null or {"kiln": [...], "torch": [...]}, the
# rounds' JSON lines in order.
#
# NINJA is the command that brings the build up to date (default ninja), e.g.
# NINJA="flock LOCKFILE ninja" where builds of one tree must not overlap.
#
#   [TORCH_PYTHON=venv/bin/python] [COMPILE=1] [BF16=1] [FLUSH_DENORMAL=1] [ROUNDS=R] [JSONL=FILE] bash benchmarks/compare.sh [build-dir] [threads] [configs...]
#   e.g. TORCH_PYTHON=/opt/torch/bin/python COMPILE=1 bash benchmarks/compare.sh build 2 tiny small base
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${2:-$(nproc)}
shift $(( $# > 2 ? 2 : $# )) || true
configs=()
for c in "$@"; do configs+=("$([ "$c" = seed ] && echo base || echo "$c")"); done  # seed: base's other name
[ ${#configs[@]} -gt 0 ] || configs=(tiny small base)
read -r -a ninja_cmd <<<"${NINJA:-ninja}"
jsonl=${JSONL:-}
torch_python=${TORCH_PYTHON:-/usr/bin/python3}
compile=${COMPILE:-0}
precision=()
[ "${BF16:-0}" = 1 ] && precision=(--bf16)
kiln_flags=("${precision[@]}")
torch_modes=("")  # extra torch_train_step.py flag per try: none
if [ "${FLUSH_DENORMAL:-0}" = 1 ]; then
  kiln_flags+=(--flush-denormal)
  torch_modes=("" --flush-denormal)
fi

"${ninja_cmd[@]}" -C "$build" benchmarks/bench_train_step >/dev/null
if grep -qw avx512f /proc/cpuinfo; then core=SKYLAKEX
elif grep -qw avx2 /proc/cpuinfo && grep -q AuthenticAMD /proc/cpuinfo; then core=ZEN
elif grep -qw avx2 /proc/cpuinfo; then core=HASWELL
else core=""; fi

torch_version=$("$torch_python" -c 'import torch; print(torch.__version__)')
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, threads=$threads, torch $torch_version ($torch_python), OPENBLAS_CORETYPE=${core:-default}, precision: ${precision[*]:-fp32}, flush denormals: ${FLUSH_DENORMAL:-0}"
echo "| config | Kiln ms/step | PyTorch ms/step (BLAS x torch threads) | Kiln/PyTorch | PyTorch compiled ms/step | Kiln/compiled | Kiln tokens/s | Kiln GFLOP/s | Kiln peak MB | PyTorch peak MB | memory ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"

# One Kiln run of config $1: its JSON line.
kiln_run() {
  "$build/benchmarks/bench_train_step" --config "$1" --threads "$threads" "${kiln_flags[@]}"
}

# One PyTorch run of config $1 at $2 BLAS threads x $3 torch threads (more
# torch_train_step.py flags after them): its JSON line.
torch_run() {
  local c=$1 b=$2 t=$3; shift 3
  OPENBLAS_CORETYPE=$core OPENBLAS_NUM_THREADS=$b MKL_NUM_THREADS=$b OMP_NUM_THREADS=$t \
    "$torch_python" benchmarks/torch_train_step.py --config "$c" --threads "$t" "$@"
}

# PyTorch's fastest run of config $1 (extra flags after it) over the thread splits and
# torch_modes: one JSON line, with "split" (its label) and "run" (torch_run's "b t [mode]")
# added.
torch_best() {
  local c=$1; shift
  local best="" b t m r
  for m in "${torch_modes[@]}"; do
    for b in $(seq 1 "$threads"); do
      for t in $(seq 1 "$threads"); do
        [ $((b * t)) -le "$threads" ] || continue
        r=$(torch_run "$c" "$b" "$t" "$@" $m)
        best=$("$torch_python" - "$best" "$r" "${b}x${t}${m:+,ftz}" "$b $t $m" <<'PY'
import json, sys
best, r, split, run = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
r["split"], r["run"] = split, run
if best and json.loads(best)["ms_per_step"] <= r["ms_per_step"]:
    print(best)
else:
    print(json.dumps(r))
PY
)
      done
    done
  done
  echo "$best"
}

# ROUNDS more runs of config $1, Kiln then PyTorch as torch_best's JSON line $2 ran,
# alternating (extra PyTorch flags after them): one JSON object {"kiln": [...], "torch":
# [...]} of the rounds' JSON lines.
interleaved() {
  local c=$1 best=$2; shift 2
  local b t m ks=() ts=()
  read -r _ b t m < <(/usr/bin/python3 -c 'import json,sys; j = json.loads(sys.argv[1]); print(j["split"], j["run"])' "$best")
  for _ in $(seq 1 "$rounds"); do
    ks+=("$(kiln_run "$c")")
    ts+=("$(torch_run "$c" "$b" "$t" "$@" $m)")
  done
  /usr/bin/python3 - "$rounds" "${ks[@]}" "${ts[@]}" <<'PY'
import json, sys
n = int(sys.argv[1])
print(json.dumps({"kiln": [json.loads(a) for a in sys.argv[2:2 + n]],
                  "torch": [json.loads(a) for a in sys.argv[2 + n:2 + 2 * n]]}))
PY
}

# The line after the table for config $1's rounds ($2: interleaved's JSON, $3: the split).
rounds_line() {
  /usr/bin/python3 - "$@" <<'PY'
import json, statistics, sys
c, r, split = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
k = [a["ms_per_step"] for a in r["kiln"]]
t = [a["ms_per_step"] for a in r["torch"]]
q = [a / b for a, b in zip(k, t)]
print(f"{c}: {len(k)} interleaved rounds, PyTorch at {split}: Kiln {', '.join(f'{x:.2f}' for x in k)} ms; "
      f"PyTorch {', '.join(f'{x:.2f}' for x in t)} ms; Kiln/PyTorch {', '.join(f'{x:.3f}' for x in q)}, "
      f"median {statistics.median(q):.3f}")
PY
}

rounds=${ROUNDS:-0}
interleaved_lines=()
base_gflops=""
cpu_model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
for c in "${configs[@]}"; do
  k=$(kiln_run "$c")
  [ "$c" = base ] && base_gflops=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["gflops"])' "$k")
  t=$(torch_best "$c" "${precision[@]}")
  tc="{}"
  [ "$compile" = 1 ] && tc=$(torch_best "$c" --compile "${precision[@]}")
  /usr/bin/python3 - "$k" "$t" "$tc" <<'PY'
import json, sys
k, t, tc = (json.loads(a) for a in sys.argv[1:4])
comp = f"{tc['ms_per_step']:.2f} ({tc['split']}) | {k['ms_per_step'] / tc['ms_per_step']:.2f}" if tc else "- | -"
print(f"| {k['config']} | {k['ms_per_step']:.2f} | {t['ms_per_step']:.2f} ({t['split']}) | "
      f"{k['ms_per_step'] / t['ms_per_step']:.2f} | {comp} | "
      f"{k['tokens_per_s']:.0f} | {k['gflops']:.1f} | {k['peak_rss_mb']:.0f} | {t['peak_rss_mb']:.0f} | "
      f"{k['peak_rss_mb'] / t['peak_rss_mb']:.2f} |")
PY
  r="null"
  if [ "$rounds" -gt 0 ]; then
    r=$(interleaved "$c" "$t" "${precision[@]}")
    interleaved_lines+=("$(rounds_line "$c" "$r" "$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["split"])' "$t")")")
  fi
  if [ -n "$jsonl" ]; then
    /usr/bin/python3 - "$c" "${precision[*]:-fp32}" "${FLUSH_DENORMAL:-0}" "$threads" "$cpu_model" "$k" "$t" "$tc" "$r" >>"$jsonl" <<'PY'
import json, sys
c, precision, ftz, threads, cpu = sys.argv[1:6]
k, t, tc, r = (json.loads(a) for a in sys.argv[6:10])
print(json.dumps({"config": c, "precision": "bf16" if precision == "--bf16" else "fp32",
                  "flush_denormal": ftz == "1", "threads": int(threads), "cpu": cpu,
                  "kiln": k, "torch": t, "compiled": tc or None, "rounds": r}))
PY
  fi
done
for line in "${interleaved_lines[@]}"; do echo "$line"; done
if [ -n "$base_gflops" ]; then
  # The bar set for the base step: at least half of this machine's sgemm peak, taken as
  # a raw 2048^3 cblas_sgemm with OpenBLAS's own threads, measured now.
  "${ninja_cmd[@]}" -C "$build" benchmarks/bench_matmul >/dev/null
  peak=$("$build/benchmarks/bench_matmul" --threads "$threads" --runs 5 | awk '/^2048x2048/ {print $5}')
  /usr/bin/python3 -c 'import sys; g, p = map(float, sys.argv[1:]); print(f"base: {g:.1f} GFLOP/s = {g / p:.2f} of the sgemm peak ({p:.1f} GFLOP/s, raw 2048^3 cblas_sgemm, same threads)")' "$base_gflops" "$peak"
fi
