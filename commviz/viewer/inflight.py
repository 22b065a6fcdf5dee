"""The records in flight: ops a rank entered and has not reported ended.

The model keeps them by (rank, op id) as they came, and also as the diagnosis reads them: the
collectives by instance (group and seq), the sends and receives apart, and each rank's own. The
indexes are kept as records come and end, so that reading them costs what is read, not a scan
of every record in flight: a hung all_reduce of 1,023 ranks, with DDP's later bucket calls
queued behind it, is ten thousand records, and the diagnosis looks at them four times a second.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import attrgetter

from commviz.wire import protocol

_P2P = protocol.P2P
# a record's (op, dtype, size), or a completed one's (the diagnosis' Entry): what ``kinds``
# counts; records that agree on it agree on all the diagnosis compares
kind_of = attrgetter("op", "dtype", "size")


@dataclass(frozen=True)
class InFlight:
    rank: int
    op: str
    group: tuple[int, ...]
    seq: int
    peer: int
    t_start: int
    # what the diagnosis compares across ranks (defaults: unknown)
    gkey: int = -1          # index into Model.groups
    size: int = 0           # nccl-tests' S of this rank's record
    dtype: str | None = None
    op_id: int = -1
    seen: float = 0.0       # model clock when the viewer first learned of it
    site: tuple[str, int] | None = None  # the program's file and line that made the call
    noted: int = -1         # ``Flying.noted`` when it came: its place in the order they came


class Flying:
    """Every record in flight (``records``) and its indexes: ``instances`` (a collective of a
    known group: (gkey, seq) -> rank -> record) with ``kinds`` (the same -> how many of them
    have each (op, dtype, size): whether they all agree, without a look at each), ``transfers``
    (sends and receives, by (rank, op id)) and ``by_rank`` (rank -> op id -> record). Each in
    the order the records came; read-only outside."""

    def __init__(self) -> None:
        self.records: dict[tuple[int, int], InFlight] = {}
        self.instances: dict[tuple[int, int], dict[int, InFlight]] = {}
        self.kinds: dict[tuple[int, int], dict[tuple, int]] = {}
        self.transfers: dict[tuple[int, int], InFlight] = {}
        self.by_rank: dict[int, dict[int, InFlight]] = {}
        self.noted = 0  # records noted so far

    def add(self, f: InFlight) -> None:
        """Note ``f`` (made with ``noted=self.noted``). One noted again (a harvester sends what
        a dead rank's ring held) keeps when it was first known, and its place."""
        key = (f.rank, f.op_id)
        old = self.records.get(key)
        if old is None:
            self.noted += 1
        else:
            f = replace(f, seen=old.seen, noted=old.noted)
            self._unindex(old)
        self.records[key] = f
        mine = self.by_rank.get(f.rank)
        if mine is None:
            mine = self.by_rank[f.rank] = {}
        mine[f.op_id] = f
        if f.op in _P2P:
            self.transfers[key] = f
        elif f.gkey >= 0:
            self._enter(f)

    def pop(self, key: tuple[int, int]) -> InFlight | None:
        """Forget the record of (rank, op id), if any, and return it."""
        f = self.records.pop(key, None)
        if f is not None:
            mine = self.by_rank[f.rank]
            del mine[f.op_id]
            if not mine:
                del self.by_rank[f.rank]
            self._unindex(f)
        return f

    def busy(self, rank: int) -> bool:
        return rank in self.by_rank

    def first_of(self, rank: int) -> InFlight | None:
        """The rank's record known longest (of equal ones, the first to come)."""
        mine = self.by_rank.get(rank)
        return min(mine.values(), key=_seen) if mine else None

    def _unindex(self, f: InFlight) -> None:
        """Take ``f`` out of ``transfers`` or ``instances``; another record of its rank in the
        same instance, if there is one, stands for the rank there."""
        if f.op in _P2P:
            self.transfers.pop((f.rank, f.op_id), None)
            return
        ikey = (f.gkey, f.seq)
        inst = self.instances.get(ikey)
        if inst is None or inst.get(f.rank) is not f:
            return
        del inst[f.rank]
        _uncount(self.kinds[ikey], f)
        for other in reversed(self.by_rank.get(f.rank, {}).values()):
            if other.seq == f.seq and other.gkey == f.gkey and other is not f \
                    and other.op not in _P2P:
                self._enter(other)
                break
        if not inst:
            del self.instances[ikey], self.kinds[ikey]

    def _enter(self, f: InFlight) -> None:
        """``f`` stands for its rank in its instance, unless a record of the rank that came
        later does (of two, the later stands: as a scan in the order they came would say)."""
        ikey = (f.gkey, f.seq)
        inst = self.instances.get(ikey)
        if inst is None:
            inst, kinds = self.instances[ikey], self.kinds[ikey] = {}, {}
        else:
            kinds = self.kinds[ikey]
            old = inst.get(f.rank)
            if old is not None:
                if old.noted > f.noted:
                    return
                _uncount(kinds, old)
        inst[f.rank] = f
        kind = kind_of(f)
        kinds[kind] = kinds.get(kind, 0) + 1


def _uncount(kinds: dict[tuple, int], f: InFlight) -> None:
    kind = kind_of(f)
    n = kinds[kind] - 1
    if n:
        kinds[kind] = n
    else:
        del kinds[kind]


def _seen(f: InFlight) -> float:
    return f.seen
