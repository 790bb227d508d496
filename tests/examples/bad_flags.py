#!/usr/bin/env python3
"""Runs an example program with bad command lines: each must exit with status 2 and one
error line naming the flag and the value, never crash, hang or train.

    bad_flags.py PROGRAM
"""
import subprocess
import sys

CASES = [
    (["--no-such-flag"], "unknown argument '--no-such-flag'"),
    (["--seed"], "--seed needs a value"),
    (["--seed", "abc"], "--seed expects an integer, got 'abc'"),
    (["--seed", "-4"], "--seed must be in [0, "),
    (["--seed", "1", "--seed", "2"], "--seed given twice"),
]


def main():
    program = sys.argv[1]
    failures = 0
    for args, expected in CASES:
        try:
            r = subprocess.run([program] + args, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"FAIL {args}: timed out")
            failures += 1
            continue
        ok = r.returncode == 2 and expected in r.stderr
        print(f"{'ok  ' if ok else 'FAIL'} {args}: exit {r.returncode}, stderr {r.stderr.splitlines()[:1]}")
        failures += not ok
    print(f"{len(CASES) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
