#!/usr/bin/env bash
# Kiln against PyTorch on real German->English (examples/translate_de_en): Kiln trains for
# KILN_MINUTES of training time, then PyTorch trains the same model on the same ids and
# batches with the same recipe (benchmarks/torch_translate.py, at its fastest thread
# split) for TORCH_MINUTES; both evaluate validation BLEU every EVAL_SECONDS of training
# time, off the clock, and end with test BLEU (beam 4). One after the other on the same
# machine; the curves are drawn into one plot.
#
#   TORCH_PYTHON=/path/to/venv/bin/python bash benchmarks/translate_compare.sh BUILD OUT
#
# Environment: KILN_MINUTES (15), TORCH_MINUTES (30), EVAL_SECONDS (60), THREADS (2),
# KILN_ARGS (more flags for translate_de_en, e.g. --bf16; the export carries them).
set -euo pipefail
build=${1:?usage: translate_compare.sh BUILD OUT}
out=${2:?usage: translate_compare.sh BUILD OUT}
python=${TORCH_PYTHON:?set TORCH_PYTHON to a Python with torch, sentencepiece, sacrebleu and matplotlib}
kiln_minutes=${KILN_MINUTES:-15}
torch_minutes=${TORCH_MINUTES:-30}
eval_seconds=${EVAL_SECONDS:-60}
threads=${THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd)
program="$build/examples/translate_de_en/translate_de_en"
[ -x "$program" ] || { echo "translate_compare.sh: $program not built" >&2; exit 2; }
mkdir -p "$out"
{
  lscpu | grep -E "Model name|^Model:|^CPU\(s\)"
  echo "bf16 units: $(grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
} > "$out/machine.txt"

# shellcheck disable=SC2086
common=(--threads "$threads" --eval-every "$eval_seconds" ${KILN_ARGS:-})
echo "== Kiln: $kiln_minutes minutes of training"
"$program" "${common[@]}" --minutes "$kiln_minutes" --out "$out/kiln" --no-progress | tee "$out/kiln.log"
echo "== the same ids, batches and recipe for PyTorch"
"$program" "${common[@]}" --minutes "$kiln_minutes" --spm "$out/kiln/spm.model" --export "$out/export" \
  --export-epochs 2000 --out "$out/kiln" --no-progress
echo "== PyTorch: $torch_minutes minutes of training"
"$python" "$here/torch_translate.py" "$out/export" --minutes "$torch_minutes" --threads "$threads" \
  --eval-every-seconds "$eval_seconds" --out "$out/torch" | tee "$out/torch.log"
"$python" "$here/plot_translate_curves.py" --kiln "$out/kiln/metrics.csv" --torch "$out/torch/metrics.csv" \
  --out "$out/curves.png" --kiln-label "Kiln" --torch-label "PyTorch $("$python" -c 'import torch; print(torch.__version__)')"
echo "curves: $out/curves.png"
