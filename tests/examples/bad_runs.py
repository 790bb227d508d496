#!/usr/bin/env python3
"""Runs an example program with command lines and files it must refuse cleanly: output
directories under a file or under /proc, absurd model sizes, a huge --layers, negative
--threads, corrupt checkpoints (truncated, garbage, valid files with bad metadata
values). Each run must exit with status 1 or 2 (2 for a bad flag, naming it) and write
exactly one line on stderr: never a signal, never a hang, within a few seconds.

    bad_runs.py KIND PROGRAM
KIND: translate_toy, translate_de_en, train_loop, char_gpt, seed002, seed004, seed000, seed001, seed003,
xor, autograd_demo, semantic_search or paraphrase_finetune (which cases apply).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

LIMIT_S = 20  # a generous bound for slow (sanitizer) builds; the runs take well under 1 s


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_safetensors(path, header, body):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def with_metadata(src, dst, key, value):
    """A copy of checkpoint src with metadata key set to value (None removes it)."""
    header, body = read_safetensors(src)
    meta = header.setdefault("__metadata__", {})
    if value is None:
        meta.pop(key, None)
    else:
        meta[key] = value
    write_safetensors(dst, header, body)
    return dst


def truncated(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data[: len(data) // 2])
    return dst


def garbage(dst):
    with open(dst, "wb") as f:
        f.write(b"\x07" * 64 + b"this is not a safetensors file")
    return dst


def a_file(tmp):
    path = os.path.join(tmp, "plain_file")
    with open(path, "w") as f:
        f.write("x")
    return path


# Bad metadata values a trainer checkpoint must refuse, naming the entry.
TRAINER_META = [
    ("user.trainer.global_step", "1e214"),
    ("user.trainer.global_step", "-5"),
    ("user.trainer.global_step", "nan"),
    ("user.trainer.next_batch", "-5"),
    ("user.trainer.next_batch", "100000"),
    ("user.trainer.epoch", "abc"),
    ("user.trainer.best_loss", "nan"),
    ("user.trainer.step_losses", "1.0,nan"),
    ("user.trainer.epoch_loss_sum", "-1"),
    ("user.trainer.global_step", None),
    ("scheduler.last_step", "-1"),
    ("rng.offset", "1e3"),
    ("format", "something-else"),
]


def translate_toy_cases(prog, tmp):
    f = a_file(tmp)
    ck = os.path.join(tmp, "ck")
    setup = subprocess.run([prog, "--epochs", "1", "--checkpoint-dir", ck, "--no-progress", "--out", ""],
                           capture_output=True, text=True, timeout=120)
    good = os.path.join(ck, "last.safetensors")
    assert setup.returncode == 0 and os.path.exists(good), setup.stderr
    cases = [
        (["--out", f + "/sub"], 2, "--out"),
        (["--out", "/proc/kiln_out"], 2, "--out"),
        (["--checkpoint-dir", f + "/sub"], 2, "--checkpoint-dir"),
        (["--checkpoint-dir", "/proc/kiln_ck"], 2, "--checkpoint-dir"),
        (["--checkpoint-dir", f], 2, "--checkpoint-dir"),
        (["--d-model", "65536", "--heads", "1", "--ff", "1048576"], 2, "--d-model 65536 --ff 1048576"),
        (["--d-model", "1000000"], 2, "--d-model must be in"),
        (["--ff", "100000000000"], 2, "--ff must be in"),
        (["--layers", "100000000"], 2, "--layers must be in"),
        (["--layers", "1000", "--d-model", "8192", "--ff", "65536"], 2, "--layers 1000"),
        (["--threads", "-4"], 2, "--threads must be in"),
        (["--epochs", "-1"], 2, "--epochs must be in"),
        (["--heads", "3"], 2, "--heads"),
        (["--dropout", "nan"], 2, "--dropout"),
        (["--beam", "-1"], 2, "--beam"),
        (["--resume", ""], 2, "--resume must not be empty"),
        (["--resume", good, "--load", good], 2, "--resume and --load"),
        (["--device", "tpu"], 1, "tpu"),
        (["--metrics", "/proc/kiln.csv"], 1, "/proc/kiln.csv"),
        (["--resume", os.path.join(tmp, "missing.safetensors")], 1, "missing.safetensors"),
        (["--resume", ck], 1, "is a directory"),
        (["--resume", truncated(good, os.path.join(tmp, "trunc.safetensors"))], 1, "trunc.safetensors"),
        (["--resume", garbage(os.path.join(tmp, "garbage.safetensors"))], 1, "garbage.safetensors"),
        (["--load", truncated(good, os.path.join(tmp, "trunc2.safetensors"))], 1, "trunc2.safetensors"),
        (["--load", garbage(os.path.join(tmp, "garbage2.safetensors"))], 1, "garbage2.safetensors"),
        (["--load", f], 1, "plain_file"),
    ]
    for i, (key, value) in enumerate(TRAINER_META):
        bad = with_metadata(good, os.path.join(tmp, f"meta{i}.safetensors"), key, value)
        shown = key.replace("user.", "")
        cases.append((["--resume", bad, "--no-progress", "--out", ""], 1, shown))
    return cases


def translate_de_en_cases(prog, tmp):
    f = a_file(tmp)
    corpus = os.path.join(tmp, "de-en")
    with open(corpus, "w", encoding="utf-8") as out:
        for i in range(40):
            out.write(f"Das ist Satz Nummer {i}. :: This is sentence number {i}.\n")
    spm = garbage(os.path.join(tmp, "garbage.model"))
    small = ["--corpus", corpus, "--no-progress", "--out", os.path.join(tmp, "out")]
    return [
        (["--minutes", "0"], 2, "--minutes must be more than 0"),
        (["--minutes", "-3"], 2, "--minutes must be more than 0"),
        (["--minutes", "nan"], 2, "--minutes expects a number"),
        (["--epochs", "0"], 2, "--epochs must be in"),
        (["--spm-type", "words"], 2, "--spm-type must be bpe or unigram"),
        (["--heads", "3"], 2, "--d-model must be a multiple of --heads"),
        (["--vocab-size", "5"], 2, "--vocab-size must be in"),
        (["--translate", "Hallo Welt."], 2, "--load DIR (a trained model's --out DIR) goes with --translate or --evaluate"),
        (["--evaluate"], 2, "goes with --translate or --evaluate"),
        (["--load", tmp, "--evaluate", "--translate", "Hallo Welt."], 2, "--translate and --evaluate: give one"),
        (["--average-last", "0"], 2, "--average-last must be in [1, "),
        (["--length-penalty", "-1"], 2, "--length-penalty must be in [0, 10]"),
        (["--checkpoint-every", "-5"], 2, "--checkpoint-every must be in [0, "),
        (["--keep-checkpoints", "0"], 2, "--keep-checkpoints must be in [1, "),
        (["--max-phrases", "100"], 2, "--max-phrases N goes with --phrases"),
        (["--phrases", "--max-phrases", "0"], 2, "--max-phrases must be in [1, "),
        (["--subword-alpha", "1.5"], 2, "--subword-alpha must be in [0, 1]"),
        (["--subword-alpha", "0.1", "--subword-sides", "target"], 2, "--subword-sides must be both or source"),
        (["--subword-sides", "source"], 2, "--subword-sides goes with --subword-alpha"),
        (["--subword-alpha", "0.1", "--export", tmp], 2, "--subword-alpha: the export holds one segmentation"),
        (["--device", "tpu"], 1, "tpu"),
        (["--out", f + "/sub"], 2, "--out"),
        (["--out", "/proc/kiln_out"], 2, "--out"),
        (["--corpus", os.path.join(tmp, "missing-de-en")], 1, "trans-de-en"),
        (["--corpus", f, "--out", os.path.join(tmp, "out")], 1, "no training pairs"),
        (small + ["--spm", spm], 1, "garbage.model"),
        (small + ["--vocab-size", "100000"], 1, "vocab"),
        (["--load", os.path.join(tmp, "nowhere"), "--translate", "Hallo Welt."], 1, "model.safetensors"),
        (["--load", tmp, "--translate", "Hallo Welt."], 1, "model.safetensors"),
        (["--load", tmp, "--evaluate"], 1, "model.safetensors"),
    ]


def train_loop_cases(prog, tmp):
    f = a_file(tmp)
    out = os.path.join(tmp, "run")
    subprocess.run([prog, "--epochs", "2", "--samples", "60", "--batch", "30", "--hidden", "4", "--out-dir", out],
                   capture_output=True, text=True, timeout=120)
    ckdir = os.path.join(out, "checkpoints")
    good = sorted(p for p in os.listdir(ckdir) if p.startswith("ckpt-"))[-1]
    good = os.path.join(ckdir, good)

    def run_dir(name, make):
        """An --out-dir whose newest checkpoint is make(path)."""
        d = os.path.join(tmp, name)
        os.makedirs(os.path.join(d, "checkpoints"))
        make(os.path.join(d, "checkpoints", "ckpt-000000999.safetensors"))
        return ["--resume", "1", "--out-dir", d, "--hidden", "4"]

    cases = [
        (["--out-dir", f + "/sub"], 2, "--out-dir"),
        (["--out-dir", "/proc/kiln_run"], 2, "--out-dir"),
        (["--out-dir", ""], 2, "--out-dir must not be empty"),
        (["--hidden", "4096", "--batch", "1000000", "--samples", "10000000"], 2, "--hidden 4096 --batch 1000000"),
        (["--hidden", "100000"], 2, "--hidden must be in"),
        (["--epochs", "-3"], 2, "--epochs must be in"),
        (["--lr", "inf"], 2, "--lr"),
        (run_dir("trunc", lambda p: truncated(good, p)), 1, "ckpt-000000999.safetensors"),
        (run_dir("garbage", garbage), 1, "ckpt-000000999.safetensors"),
        (run_dir("epoch_neg", lambda p: with_metadata(good, p, "user.epoch", "-5")), 1, "'epoch'"),
        (run_dir("epoch_exp", lambda p: with_metadata(good, p, "user.epoch", "1e214")), 1, "'epoch'"),
        (run_dir("epoch_none", lambda p: with_metadata(good, p, "user.epoch", None)), 1, "'epoch'"),
        (run_dir("val_nan", lambda p: with_metadata(good, p, "user.first_val_loss", "nan")), 1, "'first_val_loss'"),
        (run_dir("rng", lambda p: with_metadata(good, p, "rng.seed", "-1")), 1, "rng.seed"),
    ]
    return cases


def char_gpt_cases(prog, tmp):
    f = a_file(tmp)
    return [
        (["--layers", "64", "--embd", "4096"], 2, "--layers 64 --embd 4096"),
        (["--block", "4096", "--batch", "4096"], 2, "--block 4096 --batch 4096"),
        (["--layers", "100000000"], 2, "--layers must be in"),
        (["--threads", "-4"], 2, "--threads must be in"),
        (["--data", "/proc/kiln_missing"], 1, "/proc/kiln_missing"),
        (["--data", "/dev/zero"], 1, "/dev/zero"),
        (["--data", tmp], 1, "not a regular file"),
        (["--data", f, "--seconds", "0", "--steps", "1"], 1, "too short"),
        (["--data", ""], 2, "--data must not be empty"),
    ]


def seed_cases(prog, tmp, extra):
    f = a_file(tmp)
    small = ["--d-model", "16", "--heads", "2", "--layers", "1", "--ff", "16", "--src-vocab", "50", "--tgt-vocab", "50",
             "--steps", "1"]
    cases = [
        (["--d-model", "8192", "--ff", "32768", "--layers", "48"], 2, "--d-model 8192 --ff 32768 --layers 48"),
        (["--batch", "4096", "--seq-len", "100000", "--max-seq-length", "100000"], 2, "--batch 4096 --seq-len 100000"),
        (["--layers", "100000000"], 2, "--layers must be in"),
        (["--heads", "-1"], 2, "--heads must be in"),
    ]
    if extra:  # seed002's picture
        cases += [
            (small + ["--out", f + "/pe.png"], 1, "pe.png"),
            (small + ["--out", "/proc/kiln_pe.png"], 1, "kiln_pe.png"),
        ]
    return cases


def small_cases(kind):
    if kind == "xor":
        return [(["--epochs", "-1"], 2, "--epochs must be in"), (["--seed", "x"], 2, "--seed expects an integer"),
                (["--epochs"], 2, "--epochs needs a value")]
    if kind == "autograd_demo":
        return [(["--steps", "3"], 2, "unknown argument '--steps'")]
    if kind == "seed000":
        return [(["--epochs", "0"], 2, "--epochs must be in"), (["--epochs", "1e9"], 2, "--epochs expects")]
    return [(["--scale", "3"], 2, "--scale"), (["--scale", "-1"], 2, "--scale must be in")]


def pretrained_cases(kind, tmp):
    """The pretrained-model examples: a missing model folder or corpus, bad flags."""
    out = ["--out", os.path.join(tmp, "out")]
    cases = [
        (["--model", os.path.join(tmp, "no_model")] + out, 1, "run scripts/fetch_models.sh"),
        (["--nonsense"] + out, 2, "unknown argument '--nonsense'"),
        (["--threads", "-1"] + out, 2, "--threads must be in [0, "),
        (["--batch-size", "0"] + out, 2, "--batch-size must be in ["),
        (["--out", os.path.join(a_file(tmp), "x")], 2, "--out"),
    ]
    if kind == "semantic_search":
        cases += [
            (["--top-k", "0"] + out, 2, "--top-k must be in [1, 1000], got 0"),
            (["--query", "   "] + out, 2, "--query: the query is empty"),
            (["--limit", "-5"] + out, 2, "--limit must be in [0, "),
        ]
    else:
        cases += [
            (["--mode", "half"] + out, 2, "--mode must be lora or full, got half"),
            (["--lora-r", "0"] + out, 2, "--lora-r must be in [1, 4096], got 0"),
            (["--lr", "-1"] + out, 2, "--lr must be in [0, 1], got -1"),
        ]
    return cases


def main():
    kind, prog = sys.argv[1], os.path.abspath(sys.argv[2])
    failures = 0
    slowest = 0.0
    with tempfile.TemporaryDirectory(prefix="kiln_bad_runs_") as tmp:
        if kind == "translate_toy":
            cases = translate_toy_cases(prog, tmp)
        elif kind == "translate_de_en":
            cases = translate_de_en_cases(prog, tmp)
        elif kind == "train_loop":
            cases = train_loop_cases(prog, tmp)
        elif kind == "char_gpt":
            cases = char_gpt_cases(prog, tmp)
        elif kind in ("seed002", "seed004"):
            cases = seed_cases(prog, tmp, kind == "seed002")
        elif kind in ("semantic_search", "paraphrase_finetune"):
            cases = pretrained_cases(kind, tmp)
        else:
            cases = small_cases(kind)
        for args, want_rc, expected in cases:
            start = time.monotonic()
            try:
                r = subprocess.run([prog] + args, capture_output=True, text=True, timeout=LIMIT_S, cwd=tmp)
            except subprocess.TimeoutExpired:
                print(f"FAIL {args}: no exit within {LIMIT_S} s")
                failures += 1
                continue
            took = time.monotonic() - start
            slowest = max(slowest, took)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            ok = r.returncode == want_rc and len(lines) == 1 and expected in lines[0]
            why = "" if ok else f" (want exit {want_rc}, one stderr line containing {expected!r})"
            print(f"{'ok  ' if ok else 'FAIL'} {args}: exit {r.returncode}, {took:.2f} s, stderr {lines[:3]}{why}")
            failures += not ok
    print(f"{kind}: {len(cases)} bad runs, {len(cases) - failures} passed, {failures} failed; slowest {slowest:.2f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
