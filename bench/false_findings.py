"""False findings of the live diagnosis on a healthy job: there should be none.

Runs healthy demos on real gloo ranks, one after the other, each as a user would
(``commviz demo NAME --ranks 4 --headless --record FILE``) until the time is up, and counts
the ``diag`` lines of their recordings. The rotation mixes the guided tour (every op, the
p2p ones included) with long back-to-back all_reduce and send/recv runs, where the jitter of
a loaded machine shows most. The load average is printed before and after, since the
thresholds must hold on a busy 2-core machine.

    python bench/false_findings.py [--minutes 10] [--ranks 4] [--iters 2000]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROTATION = ["all", "all_reduce", "send_recv", "all_gather", "ring_allreduce", "pipeline"]


def run_once(demo: str, ranks: int, iters: int, record: Path) -> tuple[int, list[dict], dict]:
    """One headless demo; returns its exit code, its diag lines and its summary line."""
    proc = subprocess.run(
        [sys.executable, "-m", "commviz", "demo", demo, "--ranks", str(ranks), "--headless",
         "--iters", str(iters), "--record", str(record)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    diags = [x for x in lines if x.get("kind") == "diag"]
    summary = lines[-1] if lines and lines[-1].get("kind") == "summary" else {}
    if proc.returncode:
        print(proc.stdout[-2000:], file=sys.stderr)
    return proc.returncode, diags, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--iters", type=int, default=2000, help="steps per demo run (default 2000)")
    args = p.parse_args()

    load0 = os.getloadavg()
    deadline = time.monotonic() + args.minutes * 60
    t0 = time.monotonic()
    runs = failed = records = instances = transfers = 0
    by_type: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="commviz-ff-") as tmp:
        while time.monotonic() < deadline:
            demo = ROTATION[runs % len(ROTATION)]
            rc, diags, summary = run_once(demo, args.ranks, args.iters, Path(tmp) / "r.jsonl")
            runs += 1
            failed += rc != 0
            records += summary.get("records", 0)
            instances += summary.get("instances", 0)
            transfers += summary.get("transfers", 0)
            for d in diags:
                by_type[d["type"]] += 1
                print(f"finding in {demo}: {d['type']}: {d['message']}", flush=True)
            print(f"{time.monotonic() - t0:6.0f} s  {demo:<15} rc {rc}  {len(diags)} finding(s)",
                  flush=True)
    elapsed = time.monotonic() - t0
    load1 = os.getloadavg()
    total = sum(by_type.values())
    print(f"\n{runs} demo runs ({failed} failed) in {elapsed / 60:.1f} min on {os.cpu_count()} "
          f"CPUs, {args.ranks} ranks: {records} op records, {instances} collective instances, "
          f"{transfers} transfers")
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print(f"findings: {total}" + (f" ({dict(by_type)})" if total else "")
          + f"; per hour: {total / (elapsed / 3600):.1f}")
    return 1 if total or failed else 0


if __name__ == "__main__":
    sys.exit(main())
