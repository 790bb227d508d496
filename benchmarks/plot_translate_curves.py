#!/usr/bin/env python3
"""Validation BLEU against training wall time, Kiln's run and PyTorch's in one PNG.

Reads the metrics CSV of examples/translate_de_en (Kiln's Trainer: columns step, epoch,
lr, loss, grad_norm, tokens_per_s, val_loss, train_seconds, val_bleu, val_chrf; the rows
with a val_bleu are its evaluations, timed ones and those at epoch ends) and the
metrics.csv of benchmarks/torch_translate.py (step, epoch, train_seconds, train_loss,
val_loss, val_bleu, val_chrf: one row per evaluation), and draws each run's validation
BLEU against its training time in minutes (only the steps on the clock, as both count it):

    /work/venv-torch/bin/python benchmarks/plot_translate_curves.py --kiln KILN_METRICS.csv \\
        --torch TORCH_METRICS.csv --out curves.png [--title ...] [--kiln-label ...] [--torch-label ...]
"""
import argparse
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def fail(message):
    raise SystemExit(f"plot_translate_curves.py: {message}")


def number(text):
    """A CSV cell as a float; empty or unparsable cells (and NaN, as logs write for
    "none") are None."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def bleu_curve(path):
    """(minutes, BLEU) of the rows that carry a validation BLEU, in training-time order.
    Rows repeated at one step (an evaluation Kiln's log writes again with its epoch's
    record) are kept once."""
    if not os.path.isfile(path):
        fail(f"no such metrics file: {path}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        fail(f"{path} has no rows")
    missing = [c for c in ("train_seconds", "val_bleu") if c not in rows[0]]
    if missing:
        fail(f"{path} has no column {', '.join(missing)} (columns: {', '.join(rows[0])})")
    points = {}
    for r in rows:
        t, b = number(r["train_seconds"]), number(r["val_bleu"])
        if t is not None and b is not None:
            points[(r.get("step"), t)] = (t / 60.0, b)
    if not points:
        fail(f"{path} has no row with a validation BLEU")
    return sorted(points.values())


def plot(curves, out, title):
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for label, points, style in curves:
        xs, ys = zip(*points)
        ax.plot(xs, ys, style, label=f"{label} (final {ys[-1]:.2f})", markersize=4)
    ax.set_xlabel("training time (minutes, steps only)")
    ax.set_ylabel("validation BLEU")
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True, help="Kiln's metrics CSV (translate_de_en's Trainer log)")
    ap.add_argument("--torch", required=True, help="torch_translate.py's metrics.csv")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="German→English: validation BLEU against training time")
    ap.add_argument("--kiln-label", default="Kiln")
    ap.add_argument("--torch-label", default="PyTorch")
    a = ap.parse_args()
    curves = [(a.kiln_label, bleu_curve(a.kiln), "o-"), (a.torch_label, bleu_curve(a.torch), "s-")]
    plot(curves, a.out, a.title)
    for label, points, _ in curves:
        print(f"{label}: {len(points)} evaluations, final BLEU {points[-1][1]:.2f} at {points[-1][0]:.2f} min",
              file=sys.stderr)
    print(a.out)


if __name__ == "__main__":
    main()
