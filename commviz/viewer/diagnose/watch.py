"""What every detector reads: the model, the findings that hold now, how long each rank's
op has been known, and when ranks and jobs ended.

How long an op has waited is counted on the viewer's clock from when its in-flight record
arrived (it is sent 20 ms after the op began), not from the rank's t_start: hosts' clocks
may disagree by more than a threshold. A completed record still waiting for its match counts
from when an update first saw it: in flight, or else completed. Once every rank involved has
said goodbye, or every rank of its job is gone (said goodbye, replaced, or found lost), that
count stops where the last one was heard from: a wait nobody is in any more does not grow.

An update reads the records in flight through the model's indexes (``Model.flying``), never
by a scan of all of them: what it costs grows with the instances and ranks it names, not with
the records a hang leaves in flight.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.inflight import InFlight, kind_of
from commviz.viewer.model import Model
from commviz.wire import protocol
from commviz.wire.protocol import ANNOUNCE_S

# a rank told to have ended (``ending``'s account) is taken as never coming, by a wait that
# misses it, this long after: its peers' backends fail their op within milliseconds of its end
ENDED_GRACE_S = 1.0
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


@dataclass
class Unmatched:
    """One instance's records not matched yet, as an update reads them: those in flight, the
    model's own (by rank, with their ``kinds``: ``Flying``'s; read in this update, never
    kept), and the completed ones waiting for the rest (``pending``, by rank; a rank in flight
    there is not among them)."""

    seq: int
    flying: Mapping[int, InFlight]
    pending: dict[int, Entry]
    kinds: Mapping[tuple, int]

    def count(self) -> int:
        return len(self.flying) + len(self.pending)

    def ranks(self) -> set[int]:
        return self.flying.keys() | self.pending.keys()

    def failed(self) -> bool:
        return any(e.failed for e in self.pending.values())

    def waiting(self) -> set[int]:
        """The ranks that wait in it, or failed in it."""
        return self.flying.keys() | {r for r, e in self.pending.items() if e.failed}

    def age(self, now: float) -> float:
        """Seconds since its first rank entered, as far as the viewer knows."""
        ages = [e.age for e in self.pending.values()]
        if self.flying:
            ages.append(flying_age(min(map(_SEEN, self.flying.values())), now))
        return max(ages)

    def uniform(self) -> bool:
        """Whether all its records agree on op, dtype and size (then nothing can differ)."""
        return len(self.kinds.keys() | set(map(kind_of, self.pending.values()))) < 2

    def op(self) -> str:
        """The op most of its ranks called (``majority``)."""
        if self.uniform():
            return next(iter(self.flying.values() or self.pending.values())).op
        return majority({**self.flying, **self.pending})[0]

    def where(self, ranks: Iterable[int]) -> str | None:
        """As ``where``, without making each rank's Entry."""
        flying, pending = self.flying, self.pending
        return _where({(flying[r] if r in flying else pending[r]).site for r in ranks})

    def entries(self, now: float) -> dict[int, Entry]:
        """Each rank's record as an Entry (ages as of ``now``)."""
        out = {r: Entry(r, f.op, f.size, f.dtype, flying_age(f.seen, now), True, False,
                        site=f.site) for r, f in self.flying.items()}
        out.update(self.pending)
        return out


_SEEN = attrgetter("seen")


def flying_age(seen: float, now: float) -> float:
    """Seconds since a rank entered an op the viewer first learned of at ``seen`` (its
    in-flight record came ANNOUNCE_S after the op began)."""
    return now - seen + ANNOUNCE_S


class Watch:
    """Shared by the detectors of one diagnosis: ``active`` holds the findings that hold
    now, ``completed`` the hang keys whose op completed since the last update."""

    def __init__(self, model: Model, wall_ns: Callable[[], int]) -> None:
        self.model = model
        self.wall_ns = wall_ns
        self.active: dict[tuple, Finding] = {}
        self.completed: set[tuple] = set()
        # (rank, op id) of completed records -> when first known: in flight, if an update saw
        # it so (``landed``), else when one first asked (``age``)
        self._seen: dict[tuple[int, int], float] = {}
        self._touched: set[tuple[int, int]] = set()
        self._cut = 0  # ``model.flying.noted`` at the last update: the records it saw in flight

    def begin(self) -> None:
        """An update starts: the ops it asks the age of are those still waiting."""
        self._touched = set()

    def end(self) -> None:
        """An update ended: forget the ops it did not ask about."""
        self._seen = {k: v for k, v in self._seen.items() if k in self._touched}
        self._cut = self.model.flying.noted

    def landed(self, records: list[InFlight]) -> None:
        """Records in flight whose op just ended (``Model.on_landed``): one an update saw in
        flight (every send, receive and collective of a known group) goes on counting from
        when it was first seen, while it waits for its match."""
        cut, seen = self._cut, self._seen
        for f in records:
            if f.noted < cut and (f.gkey >= 0 or f.op in protocol.P2P):
                seen.setdefault((f.rank, f.op_id), f.seen)

    def age(self, rank: int, op_id: int, now: float) -> float:
        """Seconds since a rank entered an op it completed, on the viewer's clock (see the
        module doc); one in flight: ``flying_age``."""
        key = (rank, op_id)
        self._touched.add(key)
        return flying_age(self._seen.setdefault(key, now), now)

    def found_lost(self, rank: int) -> bool:
        """Found lost alone, or with its node (a ``lost_node`` finding), or told to have
        ended first (``ending``'s account)."""
        return self._named_lost(rank, ("lost_node", "first_end"))

    def _named_lost(self, rank: int, kinds: tuple[str, ...]) -> bool:
        """A lost-rank finding of ``rank`` holds, or one of ``kinds`` that names it."""
        return ("lost_rank", rank) in self.active or any(
            key[0] in kinds and rank in f.ranks for key, f in self.active.items())

    def exited(self, rank: int) -> bool:
        s = self.model.ranks.get(rank)
        return s is not None and s.exited

    def ended(self, rank: int) -> bool:
        """Whether its node's harvester saw ``rank``'s process end."""
        s = self.model.ranks.get(rank)
        return s is not None and s.ended_ns > 0

    def gone(self, rank: int, lost: Container[int]) -> bool:
        """Whether ``rank`` will not come: it said goodbye, or it is found lost (before, or
        in ``lost``: this update), or its process ended ENDED_GRACE_S ago, as its harvester
        said: the others' backends notice a dead peer within milliseconds and fail their op
        (still inside after that, they hang). Timed from the harvester's own time of the end,
        not from when a pass first told it, so that a recording played back decides alike."""
        if self.exited(rank) or rank in lost or self._named_lost(rank, ("lost_node",)):
            return True
        return self.ended(rank) and \
            self.wall_ns() - self.model.ranks[rank].ended_ns >= ENDED_GRACE_S * 1e9

    def in_ops(self, ranks: Iterable[int]) -> bool:
        """Whether each of ``ranks`` is inside an op now."""
        return all(map(self.model.flying.busy, ranks))

    def until(self, ranks: Iterable[int], now: float) -> float:
        """``now``, or when the last of ``ranks`` left if all of them said goodbye: how long
        a wait among them lasted stops counting there."""
        states, last = self.model.ranks, None
        for r in ranks:
            s = states.get(r)
            if s is None:
                continue
            if not s.exited:  # (one is enough: a thousand ranks wait in a hang)
                return now
            last = s.last_seen if last is None else max(last, s.last_seen)
        return now if last is None else min(now, last)

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

    def unmatched(self, now: float) -> dict[tuple[int, int], Unmatched]:
        """Per (group, seq): each rank's pending or in-flight collective record, for the
        instances someone waits in, failed in, or disagrees on; those in flight first, in the
        order they came."""
        flying = self.model.flying
        by_key = {key: Unmatched(key[1], ranks, {}, flying.kinds[key])
                  for key, ranks in flying.instances.items()}
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
            age = self.age(r, int(rows["id"][i]), now)
            u = by_key.get((gk, seq))
            if u is None:
                u = by_key[(gk, seq)] = Unmatched(seq, {}, {}, {})
            if r in u.flying or r in u.pending:
                continue  # its record in flight, or its first completed one, stands for it
            u.pending[r] = Entry(
                r, protocol.OPS[rows["op"][i]], int(sizes[i]), dtype(int(rows["dtype"][i])),
                age, False, bool(failed[i]), int(rows["t_end"][i] - rows["t_start"][i]) / 1e9,
                self.model.site_of(int(rows["site"][i])))
        return by_key


def majority(entries: Mapping[int, Entry | InFlight]) -> tuple:
    """The most common (op, dtype, size) signature; ties go to the lowest rank's."""
    sigs = [(e.op, e.dtype, e.size if e.op in SIZED else None)
            for _, e in sorted(entries.items())]
    counts = collections.Counter(sigs)
    return max(sigs, key=lambda s: (counts[s], -sigs.index(s)))


def where(entries: dict[int, Entry], ranks: Iterable[int]) -> str | None:
    """Where ``ranks`` made their call: ``train.py:32``, the file's name and line the source
    panel shows; None unless they all made it at one known line."""
    return _where({entries[r].site for r in ranks})


def _where(sites: set[tuple[str, int] | None]) -> str | None:
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
