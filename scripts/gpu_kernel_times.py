#!/usr/bin/env python3
# Where one training step's GPU time goes, from Nsight Compute's per-kernel durations:
#
#   ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
#       build/benchmarks/bench_train_step --config base --device cuda:0 --warmup 1 --steps 1 >ncu.csv
#   python3 scripts/gpu_kernel_times.py ncu.csv [--top 40]
#
# The run holds set-up kernels, then two steps: the step measured is the second, from its
# first embedding lookup on. Prints each kernel's
# calls and total time, largest first, grouped by the kernel's name without its template
# arguments, and the sum (the GPU's busy time; compare with the step's wall time).
import argparse
import csv
import re
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*$", "", name)  # parameter list
    depth, out = 0, []
    for ch in name:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).replace("void ", "").strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    rows = []
    with open(a.csv, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    reader = csv.DictReader(lines)
    for r in reader:
        t = r.get("gpu__time_duration.sum", "")
        try:
            rows.append((r["Kernel Name"], float(t.replace(",", ""))))
        except ValueError:
            continue  # the units row
    # Each step starts with its embedding lookups (source and target); the step measured
    # starts at the first lookup of the last step. (Halving the kernels after the first
    # lookup was off by the first step's extra launches: Adam's state filled with zeros.)
    lookups = [i for i, (n, _) in enumerate(rows) if "embedding_kernel" in n]
    step = rows[lookups[len(lookups) // 2]:] if len(lookups) >= 2 else rows
    total = defaultdict(float)
    calls = defaultdict(int)
    for n, t in step:
        total[short(n)] += t
        calls[short(n)] += 1
    s = sum(total.values())  # ns (--print-units base)
    print(f"kernels in the step: {len(step)}, GPU busy {s / 1e6:.2f} ms")
    for n, t in sorted(total.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"{t / 1e6:9.3f} ms {100 * t / s:5.1f}% {calls[n]:6d}  {n[:150]}")


if __name__ == "__main__":
    main()
