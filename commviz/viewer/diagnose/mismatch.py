"""Mismatches: records of one instance that differ in op, dtype or size (nccl-tests' S, for
ops whose size must agree), from pending and in-flight records, so that one is named while
the job still hangs; held 10 s after the instance completed."""

from __future__ import annotations

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.wire import protocol

MISMATCH_HOLD_S = 10.0
MISMATCH_WAIT_S = 0.5  # how long the first rank in waits for the rest before a mismatch is named


class Mismatches:
    def __init__(self, watch: w.Watch) -> None:
        self.watch = watch
        self._held: dict[tuple[int, int], tuple[Finding, float]] = {}  # -> until when

    def check(self, rows: dict[str, np.ndarray], sizes: np.ndarray, starts: np.ndarray,
              counts: np.ndarray) -> None:
        """Note matched instances (``Model.on_collectives``) whose ranks disagree on op, dtype
        or size."""
        head = np.repeat(starts, counts)
        differs = (rows["op"] != rows["op"][head]) | (rows["dtype"] != rows["dtype"][head])
        differs |= w.sized(rows["op"]) & (sizes != sizes[head])
        bad = np.logical_or.reduceat(differs, starts)
        now, wall = self.watch.model.clock(), self.watch.wall_ns()
        for i in np.flatnonzero(bad).tolist():
            sl = slice(starts[i], starts[i] + counts[i])
            gkey, seq = int(rows["gkey"][starts[i]]), int(rows["seq"][starts[i]])
            entries = {r: w.Entry(r, protocol.OPS[o], sz, w.dtype(d), 0.0, False, False)
                       for r, o, sz, d in zip(rows["rank"][sl].tolist(), rows["op"][sl].tolist(),
                                              sizes[sl].tolist(), rows["dtype"][sl].tolist())}
            f = self._finding(gkey, seq, entries, now, wall)
            if f is not None:
                self._held[(gkey, seq)] = (f, now + MISMATCH_HOLD_S)

    def find(self, now: float, wall: int,
             unmatched: dict[tuple[int, int], w.Unmatched]) -> list[Finding]:
        out = []
        for (gkey, seq), u in unmatched.items():
            if u.uniform():
                continue  # (a hung instance's thousand records, each update)
            if (u.count() < len(self.watch.model.groups[gkey][1])
                    and u.age(now) < MISMATCH_WAIT_S):
                continue  # the others' records are on their way: name every side at once
            f = self._finding(gkey, seq, u.entries(now), now, wall)
            if f is not None:
                out.append(f)
        for key, (f, until) in list(self._held.items()):
            if now > until:
                del self._held[key]
            else:
                out.append(f)
        return out

    def _finding(self, gkey: int, seq: int, entries: dict[int, w.Entry], now: float,
                 wall: int) -> Finding | None:
        sig = {r: (e.op, e.dtype, e.size if e.op in w.SIZED else None)
               for r, e in entries.items()}
        if len(set(sig.values())) < 2:
            return None
        common = w.majority(entries)
        odd = tuple(sorted(r for r, s in sig.items() if s != common))
        same = tuple(sorted(r for r, s in sig.items() if s == common))
        group = self.watch.model.groups[gkey][1]
        # named before every rank's record is in (MISMATCH_WAIT_S): say who is not, so that the
        # line, recorded once, is not read as the whole group
        out = tuple(r for r in group if r not in entries)
        return Finding(
            "mismatch", odd, group, seq,
            fx.Mismatch(seq, group, tuple(fx.Odd(r, _signature(entries[r]),
                                                 w.where(entries, (r,))) for r in odd),
                        same, _signature(entries[same[0]]), w.where(entries, same), out),
            ("mismatch", gkey, seq), now, wall)


def _signature(e: w.Entry) -> fx.Signature:
    return fx.Signature(e.op, e.size, e.dtype)
