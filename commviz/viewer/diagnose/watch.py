"""What every detector reads: the model, the findings that hold now, how long each rank's
op has been known, and when ranks and jobs ended.

How long an op has waited is counted on the viewer's clock from when its in-flight record
arrived (it is sent 20 ms after the op began), not from the rank's t_start: hosts' clocks
may disagree by more than a threshold. Once every rank involved has said goodbye, or every
rank of its job is gone (said goodbye, replaced, or found lost), that count stops where the
last one was heard from: a wait nobody is in any more does not grow.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.model import Model
from commviz.wire import protocol
from commviz.wire.protocol import ANNOUNCE_S

KEYS_MAX = 4096  # (group, op, size) windows, (op, size) pair tables and ranks kept at most
# ops whose nccl-tests size must agree on every rank (object and all-to-all sizes may differ)
SIZED = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                   "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
                   "reduce_scatter_single", "gather", "scatter"})


@dataclass
class Entry:
    """One rank's record of an unmatched instance: pending (completed) or in flight."""

    rank: int
    op: str
    size: int
    dtype: str | None
    age: float     # seconds since the rank entered, as far as the viewer knows
    waiting: bool  # still in flight
    failed: bool
    took: float = 0.0  # completed: seconds the rank was in it, on its own clock
    site: tuple[str, int] | None = None  # the program's line that made the call


class Watch:
    """Shared by the detectors of one diagnosis: ``active`` holds the findings that hold
    now, ``completed`` the hang keys whose op completed since the last update."""

    def __init__(self, model: Model, wall_ns: Callable[[], int]) -> None:
        self.model = model
        self.wall_ns = wall_ns
        self.active: dict[tuple, Finding] = {}
        self.completed: set[tuple] = set()
        self._seen: dict[tuple[int, int], float] = {}  # (rank, op id) -> when first known
        self._touched: set[tuple[int, int]] = set()

    def begin(self) -> None:
        """An update starts: the ops it asks the age of are those still in flight."""
        self._touched = set()

    def end(self) -> None:
        """An update ended: forget the ops it did not ask about."""
        self._seen = {k: v for k, v in self._seen.items() if k in self._touched}

    def age(self, rank: int, op_id: int, now: float, seen: float | None = None) -> float:
        """Seconds since a rank entered an op, on the viewer's clock (see the module doc)."""
        key = (rank, op_id)
        self._touched.add(key)
        first = self._seen.setdefault(key, now if seen is None else seen)
        return now - first + ANNOUNCE_S

    def found_lost(self, rank: int) -> bool:
        """Found lost alone, or with its node (a ``lost_node`` finding)."""
        return ("lost_rank", rank) in self.active or any(
            key[0] == "lost_node" and rank in f.ranks for key, f in self.active.items())

    def exited(self, rank: int) -> bool:
        s = self.model.ranks.get(rank)
        return s is not None and s.exited

    def gone(self, rank: int, lost: Container[int]) -> bool:
        """Whether ``rank`` will not come: it said goodbye, or it is found lost (before, or
        in ``lost``: this update)."""
        return self.exited(rank) or rank in lost or self.found_lost(rank)

    def in_ops(self, ranks: Iterable[int]) -> bool:
        """Whether each of ``ranks`` is inside an op now."""
        busy = {f.rank for f in self.model.inflight.values()}
        return all(r in busy for r in ranks)

    def until(self, ranks: Iterable[int], now: float) -> float:
        """``now``, or when the last of ``ranks`` left if all of them said goodbye: how long
        a wait among them lasted stops counting there."""
        states = [self.model.ranks[r] for r in ranks if r in self.model.ranks]
        if not states or not all(s.exited for s in states):
            return now
        return min(now, max(s.last_seen for s in states))

    def heard(self, rank: int, job: int, now: float) -> float:
        """When ``rank`` of ``job`` was last heard from (``now`` if it never was): a wait is
        known to go on as long as its rank is heard from."""
        members = self.model.jobs[job - 1] if 0 < job <= len(self.model.jobs) else {}
        s = members.get(rank) or self.model.ranks.get(rank)
        return now if s is None else min(now, s.last_seen)

    def job_end(self, job: int, now: float, lost: Container[int] = ()) -> float:
        """``now``, or, once every rank of ``job`` is gone (said goodbye, was replaced, or was
        found lost: before, or in ``lost``), when the last of them was heard from: how long
        a wait or a silence in a job that ended lasted stops counting there."""
        members = self.model.jobs[job - 1] if 0 < job <= len(self.model.jobs) else {}
        if not members or not all(s.exited or s.superseded or r in lost or self.found_lost(r)
                                   for r, s in members.items()):
            return now
        return min(now, max(s.last_seen for s in members.values()))

    def unmatched(self, now: float) -> dict[tuple[int, int], dict[int, Entry]]:
        """Per (group, seq): each rank's pending or in-flight collective record, for the
        instances someone waits in, failed in, or disagrees on."""
        by_key: dict[tuple[int, int], dict[int, Entry]] = {}
        for f in self.model.inflight.values():
            if f.op not in protocol.P2P and f.gkey >= 0:
                by_key.setdefault((f.gkey, f.seq), {})[f.rank] = Entry(
                    f.rank, f.op, f.size, f.dtype, self.age(f.rank, f.op_id, now, f.seen),
                    True, False, site=f.site)
        rows = self.model.pending()[0]
        if not len(rows["rank"]):
            return by_key
        key = (rows["gkey"] << 40) | rows["seq"]
        failed = (rows["flags"] & protocol.FLAG_FAILED) > 0
        order = np.argsort(key, kind="stable")
        k = key[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        sizes = self.model.sizes_of(rows)
        sig = rows["op"].astype(np.int64) << 8 | rows["dtype"]
        sig_s, size_s = sig[order], np.where(sized(rows["op"]), sizes, -1)[order]
        head = np.repeat(starts, np.diff(np.r_[starts, len(k)]))
        varied = np.logical_or.reduceat((sig_s != sig_s[head]) | (size_s != size_s[head]), starts)
        wanted = set(k[starts][varied].tolist()) | set(key[failed].tolist())
        wanted |= {g << 40 | s for g, s in by_key}
        pick = np.flatnonzero(np.isin(key, np.fromiter(wanted, np.int64, len(wanted))))
        for i in pick.tolist():
            gk, seq, r = int(rows["gkey"][i]), int(rows["seq"][i]), int(rows["rank"][i])
            by_key.setdefault((gk, seq), {}).setdefault(r, Entry(
                r, protocol.OPS[rows["op"][i]], int(sizes[i]), dtype(int(rows["dtype"][i])),
                self.age(r, int(rows["id"][i]), now), False, bool(failed[i]),
                int(rows["t_end"][i] - rows["t_start"][i]) / 1e9,
                self.model.site_of(int(rows["site"][i]))))
        return by_key


def majority(entries: dict[int, Entry]) -> tuple:
    """The most common (op, dtype, size) signature; ties go to the lowest rank's."""
    sigs = [(e.op, e.dtype, e.size if e.op in SIZED else None)
            for _, e in sorted(entries.items())]
    counts = collections.Counter(sigs)
    return max(sigs, key=lambda s: (counts[s], -sigs.index(s)))


def where(entries: dict[int, Entry], ranks: Iterable[int]) -> str | None:
    """Where ``ranks`` made their call: ``train.py:32``, the file's name and line the source
    panel shows; None unless they all made it at one known line."""
    sites = {entries[r].site for r in ranks}
    if len(sites) != 1 or None in sites:
        return None
    ((path, line),) = sites
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def last_record(s: Any) -> fx.Call | None:
    """A rank's last completed op (its ``RankState``); None if it had none."""
    if s is None or s.last_op is None:
        return None
    return fx.Call(s.last_op, s.last_peer, s.last_seq)


def sized(ops: np.ndarray) -> np.ndarray:
    return np.isin(ops, [protocol.OP_CODE[o] for o in SIZED])


def dtype(code: int) -> str | None:
    return None if code == protocol.NO_CODE else protocol.DTYPES[code]


def full(table: dict) -> bool:
    """Whether a table keyed by what varies without bound (sizes, ranks) is at KEYS_MAX."""
    return len(table) >= KEYS_MAX


def make_room(table: dict) -> None:
    """Forget the oldest key of a full table."""
    if full(table):
        del table[next(iter(table))]
