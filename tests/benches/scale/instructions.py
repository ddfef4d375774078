#!/usr/bin/env python3
"""Instructions each `kmeta run` executes during the sizing bench's converge.

A measuring aid, not part of the test suite (docs/performance.md, "Instructions, not CPU
seconds"). CPU seconds on a shared two-core machine stretch with how warm the caches are when a
process wakes; instruction counts do not. This runs the sizing bench with every `kmeta run`
under valgrind's callgrind (counting off), turns counting on at the bench's
`(mark: creating the parents)` line and dumps each process's count at `(mark: quiet)`, so each
figure covers the same window as the bench's "controller CPU seconds until quiet".

    cargo build --release -p kmeta -p kmeta-apiserver
    KMETA_SCALE_SHARD_WATCH=server KMETA_SCALE_SCENARIOS=converge KMETA_SCALE_PARENTS=2000 \
      KMETA_SCALE_NAMESPACES=100 KMETA_SCALE_REPLICAS=1x1,3x1 \
      python3 tests/benches/scale/instructions.py

Every `KMETA_SCALE_*` variable is passed to the bench unchanged. `KMETA_BIN_DIR` names the real
binaries (default: target/release). Under callgrind a process runs some 50 times slower while
counting, so use a few thousand parents, not 10 000. Counts are of user-space instructions only
(the kernel's work for a process's system calls is not in them).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PID_LINE = re.compile(r"^\s*\((kmeta(?:-\d+)?) run: pid (\d+)\)")


def wrapper_dir(real: str, out: str) -> str:
    """A directory whose `kmeta` runs the real one under callgrind, counting off."""
    d = tempfile.mkdtemp(prefix="kmeta-instructions-")
    kmeta = os.path.join(d, "kmeta")
    with open(kmeta, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "exec valgrind --tool=callgrind --instr-atstart=no --cache-sim=no --branch-sim=no "
            f"--callgrind-out-file={out}/callgrind.%p {real}/kmeta \"$@\"\n"
        )
    os.chmod(kmeta, 0o755)
    os.symlink(os.path.join(real, "kmeta-apiserver"), os.path.join(d, "kmeta-apiserver"))
    return d


def control(args: list[str]) -> None:
    r = subprocess.run(["callgrind_control", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"callgrind_control {' '.join(args)} failed: {r.stderr.strip() or r.stdout.strip()}")


def instructions(out: str, pid: str) -> int:
    """The Ir total of the (only) dump callgrind wrote for `pid`."""
    dumps = sorted(glob.glob(os.path.join(out, f"callgrind.{pid}.*")))
    if len(dumps) != 1:
        sys.exit(f"expected one callgrind dump for pid {pid} in {out}, found {dumps}")
    with open(dumps[0]) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    sys.exit(f"{dumps[0]}: no totals line")


def main() -> None:
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian's valgrind package)")
    real = os.environ.get("KMETA_BIN_DIR", os.path.join(ROOT, "target", "release"))
    for name in ("kmeta", "kmeta-apiserver"):
        if not os.path.exists(os.path.join(real, name)):
            sys.exit(f"{real}/{name} not found: cargo build --release -p kmeta -p kmeta-apiserver")
    out = tempfile.mkdtemp(prefix="kmeta-callgrind-")
    env = dict(os.environ, KMETA_BIN_DIR=wrapper_dir(real, out))
    bench = subprocess.Popen(
        ["cargo", "bench", "-p", "kmeta-tests", "--bench", "scale"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, bufsize=1,
    )
    cases: list[tuple[str, list[tuple[str, str]]]] = []
    label, pids = "", []
    assert bench.stdout is not None
    for line in bench.stdout:
        print(line, end="", flush=True)
        if m := PID_LINE.match(line):
            pids.append((m.group(1), m.group(2)))
        elif not line.startswith(" ") and "parents ×" in line:
            label, pids = line.strip(), []
        elif "(mark: creating the parents)" in line:
            for _, pid in pids:
                control(["--instr=on", pid])
        elif "(mark: quiet)" in line:
            for _, pid in pids:
                control(["--dump", pid])
                control(["--instr=off", pid])
            cases.append((label, list(pids)))
    if bench.wait() != 0:
        sys.exit(f"the bench failed (exit {bench.returncode}); callgrind output in {out}")
    print("\ninstructions executed by kmeta from creating the parents until quiet (callgrind Ir):")
    rows = []
    for label, pids in cases:
        counts = [(name, instructions(out, pid)) for name, pid in pids]
        rows.append((label, counts, sum(n for _, n in counts)))
    singles = [total for _, counts, total in rows if len(counts) == 1]
    base = sum(singles) / len(singles) if singles else None
    for label, counts, total in rows:
        each = ", ".join(f"{name} {n / 1e9:.2f}" for name, n in counts)
        ratio = f" ({total / base:.3f}× the single replica's, mean of {len(singles)})" if base else ""
        print(f"  {label}\n    {total / 1e9:.2f} G{ratio}: {each}")


if __name__ == "__main__":
    main()
