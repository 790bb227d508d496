#!/usr/bin/env python3
"""One rank of an mpirun job fails (tests/distributed/rank_failure.cpp): killed by
SIGKILL, throwing, hanging outside a collective, or leaving early. Every case must end
the whole job (no hang: each run has a hard limit here), with a non-zero exit status and
a message that names the failing rank. Also the job where nothing fails exits 0.

usage: rank_failures.py MPIRUN RANK_FAILURE NP
"""
import os
import re
import subprocess
import sys
import time

LIMIT = 90  # seconds: far beyond what each case needs; reaching it means a hang


def run(mpirun, helper, np, mode, timeout_env):
    env = dict(os.environ)
    env["KILN_DISTRIBUTED_TIMEOUT"] = str(timeout_env)
    cmd = [mpirun, "-np", str(np), "--oversubscribe", helper, mode]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=LIMIT, text=True)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, time.monotonic() - start
    return p.returncode, p.stdout, time.monotonic() - start


def main():
    mpirun, helper, np = sys.argv[1], sys.argv[2], int(sys.argv[3])
    last = np - 1
    # mode -> (the job's deadline in seconds, patterns the output must contain)
    waiting = "|".join(str(r) for r in range(last))  # the ranks left waiting
    cases = {
        # Open MPI's runtime notices the death and ends the job:
        # "mpirun noticed that process rank 1 with PID … exited on signal 9 (Killed)."
        "kill": (300, [rf"process rank {last} .*signal 9"]),
        "throw": (300, [re.escape(f"[distributed] rank {last}: rank_failure: error: [rank_failure] "
                                  f"rank {last} gave up on purpose")]),
        # Whichever waiting rank's deadline passes first ends the job.
        "timeout": (3, [rf"\[distributed\] rank ({waiting}): all_reduce timed out after 3 s"]),
        "exit": (3, [rf"\[distributed\] rank ({waiting}): all_reduce timed out after 3 s"]),
    }
    failures = 0
    rc, out, secs = run(mpirun, helper, np, "ok", 60)
    print(f"ok: exit {rc} in {secs:.1f} s")
    if rc != 0:
        print(out)
        print("FAIL: the job where no rank fails did not exit 0")
        failures += 1
    for mode, (deadline, wanted) in cases.items():
        rc, out, secs = run(mpirun, helper, np, mode, deadline)
        print(f"{mode}: exit {rc} in {secs:.1f} s")
        problems = []
        if rc is None:
            problems.append(f"the job was still running after {LIMIT} s (a hang)")
        elif rc == 0:
            problems.append("the job exited 0")
        for w in wanted:
            if not re.search(w, out):
                problems.append(f"no line with {w!r}")
        if problems:
            failures += 1
            print(out)
            for p in problems:
                print(f"FAIL ({mode}): {p}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
