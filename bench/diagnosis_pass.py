"""What one pass of the live diagnosis costs at N SIMULATED ranks (bench/fleet.py played in
process, tests/fleet_model.py's way): the fleet's records applied slot by slot, the
diagnosis run every 0.25 s as the live session runs it, each pass's CPU time measured beside
the applying it follows (the ratio: what diagnosing adds to taking the records in). Python's
garbage collections inside a pass are timed apart: a full one (tens of ms at this heap) lands
in whatever code makes the allocation that crosses its threshold, a pass or the applying.

    python bench/diagnosis_pass.py [--ranks 1024] [--seconds 10] [--shape ddp] [--fault F]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import fleet  # noqa: E402
from fleet_model import DIAGNOSE_EVERY_NS, VirtualClock  # noqa: E402

from commviz.viewer.diagnose import Diagnosis  # noqa: E402
from commviz.viewer.groups import GroupTables  # noqa: E402
from commviz.viewer.model import Model  # noqa: E402
from commviz.wire import protocol  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--shape", choices=fleet.SHAPES, default="ddp")
    p.add_argument("--fault", action="append", default=[], metavar="F",
                   help="as bench/fleet.py's --fault (straggler:5:30, hang:139, ...)")
    args = p.parse_args()
    job = fleet.Job(args.ranks, args.shape, faults=tuple(map(fleet.Fault.parse, args.fault)),
                    fault_at=2.0)
    clock = VirtualClock(fleet.OFFLINE_T0_NS)
    model = Model(clock.seconds)
    diagnosis = Diagnosis(model, wall_ns=clock.wall_ns)
    tables = GroupTables(lambda _why, _n: None)
    passes: list[tuple[float, float, int]] = []  # (pass ms, apply ms since the last, records)
    collected = [0.0, 0.0]  # CPU s in garbage collections so far, when the one going began
    gc.callbacks.append(lambda phase, _: _collecting(collected, phase))
    own: list[float] = []  # each pass's ms but its collections
    applied, records, next_pass = 0.0, model.records, clock.t_ns + DIAGNOSE_EVERY_NS
    for t_ns, datas in fleet.offline(job, args.seconds):
        clock.t_ns = t_ns
        if datas:
            msgs = [protocol.decode(d) for d in datas]
            t = time.process_time()
            model.apply(tables.resolve(msgs))
            applied += time.process_time() - t
        if t_ns >= next_pass:
            t, before = time.process_time(), collected[0]
            diagnosis.update()
            passes.append(((time.process_time() - t) * 1e3, applied * 1e3,
                           model.records - records))
            own.append(passes[-1][0] - (collected[0] - before) * 1e3)
            applied, records, next_pass = 0.0, model.records, t_ns + DIAGNOSE_EVERY_NS
    steady = passes[len(passes) // 4:]  # after the first second: groups, windows filled
    cost = sorted(ms for ms, _, _ in steady)
    own_cost = sorted(own[len(passes) // 4:])
    ratio = statistics.median(ms / a for ms, a, _ in steady if a > 0)
    print(f"{args.ranks} SIMULATED ranks, {args.shape}, {len(steady)} passes "
          f"({statistics.median(n for _, _, n in steady):.0f} new records each): a pass "
          f"median {statistics.median(cost):.1f} ms, p95 {cost[int(0.95 * len(cost))]:.1f} "
          f"ms, max {cost[-1]:.1f} ms CPU; {ratio:.2f}x the applying of its records "
          f"({statistics.median(a for _, a, _ in steady):.1f} ms median); but its garbage "
          f"collections: p95 {own_cost[int(0.95 * len(own_cost))]:.1f} ms, max "
          f"{own_cost[-1]:.1f} ms")
    found = [f"{f.type} {f.ranks[:4]}" for f in diagnosis.history]
    print(f"findings: {found or 'none'}")


def _collecting(collected: list[float], phase: str) -> None:
    if phase == "start":
        collected[1] = time.process_time()
    else:
        collected[0] += time.process_time() - collected[1]


if __name__ == "__main__":
    main()
