"""Who arrives last, by node or by group: the timeline's lanes when there are more ranks
than lanes.

A collective waits for its last rank. At a thousand ranks a lane per rank cannot be drawn, but
a lane per node can: for each collective instance, the span from the first to the last arrival
of the node's ranks, and who that last rank was. The node whose last rank came latest after
the instance's first arrival anywhere is the one the others waited for, whether one of its
ranks straggles or the whole node is slow. By group (``group_spans``) a lane is one process
group, each row in its own group's lane: the group whose last rank came latest after its own
first is the one whose collectives waited longest.

Pure: it reads the model's lane rows (``Model.lanes``: op code, t_start, t_ready, t_end per
rank, and the row's group for lanes by group) and a partition of the ranks (``Model.nodes``)
or of the groups, and costs a few array passes over the rows in view (rows numbered by their
instance or lane, then reduced by number), without a Python loop over ranks or ops. An
instance is told by its op and its t_ready (every member's is the instance's last arrival),
and by its group's lane where lanes are groups: no other column names it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from commviz.wire import protocol


class Lanes(dict):
    """Rank -> its rows (``Model.lanes``), also held whole: ``rows``, every rank's rows one
    after another in the order of the keys, and ``rank``, each row's rank. Lanes by node or
    by group take them whole rather than join a thousand ranks' slices again each frame."""

    __slots__ = ("rows", "rank")

    def __init__(self, ranks: Sequence[int], rows: np.ndarray, counts: np.ndarray) -> None:
        ends = np.cumsum(counts).tolist()
        super().__init__((rank, rows[lo:hi]) for rank, lo, hi in zip(ranks, [0, *ends], ends))
        self.rows = rows
        self.rank = np.repeat(np.asarray(ranks, np.int64), counts)


@dataclass(frozen=True)
class Spans:
    """One row per (lane, instance) that has ranks of the lane in view, aligned arrays.

    ``instance``: the instance's number in this frame; ``first``/``last``: the lane's first
    and last arrival; ``ready``: the instance's last arrival among every rank in view (when
    its transfer could start); ``end``: the lane's last finish; ``last_rank``: the rank that
    arrived at ``last``; ``late``: ``last`` less the instance's first arrival among every
    rank in view."""

    lane: np.ndarray
    instance: np.ndarray
    op: np.ndarray
    first: np.ndarray
    last: np.ndarray
    ready: np.ndarray
    end: np.ndarray
    last_rank: np.ndarray
    late: np.ndarray

    def regroup(self, lane_map: np.ndarray, n_lanes: int) -> Spans:
        """The same instances in other lanes: lane ``i`` becomes ``lane_map[i]`` (-1: left
        out), and the rows that land in one lane for one instance become one, by instance
        then lane."""
        new = lane_map[self.lane] if len(self.lane) else self.lane
        keep = np.flatnonzero(new >= 0)
        n, group = _numbered(self.instance[keep] * max(1, n_lanes) + new[keep])
        at = _reduce(np.maximum, n, group, keep, -1)  # a row of each: its instance's fields
        # the latest arrival of each, and the row that made it (the last of ties)
        last = _reduce(np.maximum, n, group, self.last[keep], _LOWEST)
        latest = self.last[keep] == last[group]
        tail = _reduce(np.maximum, n, group[latest], keep[latest], -1)
        return Spans(new[at], self.instance[at], self.op[at],
                     _reduce(np.minimum, n, group, self.first[keep], _HIGHEST), last,
                     self.ready[at], _reduce(np.maximum, n, group, self.end[keep], _LOWEST),
                     self.last_rank[tail], self.late[tail])


_LOWEST, _HIGHEST = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def _numbered(key: np.ndarray) -> tuple[int, np.ndarray]:
    """How many distinct ``key`` values (ints >= 0) there are, and each one's number among
    them in ascending order: by a table over their range where it is small, else by
    ``np.unique``. Either is one pass and no stable sort (a lexsort of 61,440 rows took 5-8
    ms a frame at 1,024 ranks)."""
    if not len(key):
        return 0, key
    top = int(key.max()) + 1
    if top <= 4 * len(key) + 4096:
        present = np.zeros(top, bool)
        present[key] = True
        number = np.cumsum(present) - 1
        return int(number[-1]) + 1, number[key]
    values, inverse = np.unique(key, return_inverse=True)
    return len(values), inverse.reshape(-1)


def _reduce(ufunc: np.ufunc, n: int, group: np.ndarray, values: np.ndarray,
            empty: int) -> np.ndarray:
    """``ufunc`` (np.minimum, np.maximum) of ``values`` by ``group`` (0..n-1); ``empty``
    where a group has none."""
    out = np.full(n, empty, np.int64)
    ufunc.at(out, group, values)
    return out


@dataclass(frozen=True)
class Lateness:
    """A lane's worst instance in view: its last rank came ``late_ns`` after the instance's
    first arrival (-1, ``last_rank`` -1: no instance in view); ``at_ns``: when."""

    lane: int
    late_ns: int
    last_rank: int
    at_ns: int


def spans(lanes: Mapping[int, np.ndarray], members: Sequence[Sequence[int]]) -> Spans:
    """Each lane's (``members[i]``: its ranks) spans of each instance in ``lanes``. Ranks in
    no lane are left out, also from the instances' first and last arrivals."""
    rank, rows = _flat(lanes)
    lane = _lane_of(members, int(rank.max(initial=-1)) + 1)[rank]
    return _spans(rank, rows, lane, len(members), by_lane=False)


def group_spans(lanes: Mapping[int, np.ndarray], lane_of_group: np.ndarray,
                n_lanes: int) -> Spans:
    """Each group's spans of each of its collective instances in ``lanes``, rows with their
    group (``Model.lanes(groups=True)``): a row is in lane ``lane_of_group[gkey]`` (-1: none).
    Transfers are left out: a pair's send and receive are no collective of their group. An
    instance is its group's alone, so ``late`` is its own spread; it is told by its lane too,
    since two groups' collectives can have the same last arrival (a simulator's do)."""
    rank, rows = _flat(lanes)
    gkey = rows[:, 4] if rows.shape[1] > 4 else np.full(len(rows), -1, np.int64)
    known = (gkey >= 0) & (gkey < len(lane_of_group))
    lane = np.full(len(rows), -1, np.int64)
    lane[known] = lane_of_group[gkey[known]]
    lane[_TRANSFER_CODES[rows[:, 0]]] = -1
    return _spans(rank, rows, lane, n_lanes, by_lane=True)


_TRANSFER_CODES = np.array([op in protocol.P2P for op in protocol.OPS])


def _flat(lanes: Mapping[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's rows as one array, and each row's rank."""
    if type(lanes) is Lanes:
        return lanes.rank, lanes.rows
    ranks = np.fromiter(lanes.keys(), np.int64, len(lanes))
    counts = np.fromiter(map(len, lanes.values()), np.int64, len(lanes))
    width = max((lane.shape[1] for lane in lanes.values()), default=4)
    rows = np.concatenate([np.zeros((0, width), np.int64), *lanes.values()])
    return np.repeat(ranks, counts), rows


def _spans(rank: np.ndarray, rows: np.ndarray, lane: np.ndarray, n_lanes: int,
           by_lane: bool) -> Spans:
    """The spans of rows in lanes (``lane``: each row's, -1 left out). An instance is told by
    its op and its t_ready, and by its lane where ``by_lane``."""
    if not (lane >= 0).all():
        keep = lane >= 0
        rows, rank, lane = rows[keep], rank[keep], lane[keep]
    op, start, ready, end = rows[:, :4].T
    # instances: by (ready, op[, lane]), numbered in that order; each one's first arrival
    n, instance = _instances(ready, op, lane if by_lane else None)
    first = _reduce(np.minimum, n, instance, start, _HIGHEST)
    each = Spans(lane, instance, op, start, start, ready, end, rank, start - first[instance])
    return each.regroup(np.arange(n_lanes), n_lanes)  # a row per rank: per lane


def _instances(ready: np.ndarray, op: np.ndarray,
               lane: np.ndarray | None) -> tuple[int, np.ndarray]:
    """Rows numbered by (ready, op[, lane]), ascending: one key of the three where it fits in
    63 bits (a window's readies span seconds), else a lexsort."""
    if not len(ready):
        return 0, np.zeros(0, np.int64)
    base, ops = int(ready.min()), len(protocol.OPS)
    lanes = 1 if lane is None else int(lane.max()) + 1
    if (int(ready.max()) - base + 1) * ops * lanes < 1 << 62:
        key = (ready - base) * ops + op
        return _numbered(key if lane is None else key * lanes + lane)
    keys = (op, ready) if lane is None else (lane, op, ready)
    order = np.lexsort(keys)
    new = np.zeros(len(order), bool)
    new[:1] = True
    for key in keys:
        new[1:] |= key[order][1:] != key[order][:-1]
    instance = np.empty(len(order), np.int64)
    instance[order] = np.cumsum(new) - 1
    return int(instance.max()) + 1, instance


def worst_first(s: Spans, n_lanes: int) -> list[Lateness]:
    """Every lane's worst instance, the latest first (then the earliest lane); lanes without
    an instance in view last, in their order."""
    late = np.full(n_lanes, -1, np.int64)
    who = np.full(n_lanes, -1, np.int64)
    when = np.zeros(n_lanes, np.int64)
    if len(s.lane):  # each lane's latest, the last of ties
        most = _reduce(np.maximum, n_lanes, s.lane, s.late, _LOWEST)
        ties = np.flatnonzero(s.late == most[s.lane])
        at = _reduce(np.maximum, n_lanes, s.lane[ties], ties, -1)
        at = at[at >= 0]
        late[s.lane[at]], who[s.lane[at]], when[s.lane[at]] = s.late[at], s.last_rank[at], \
            s.last[at]
    ranked = np.lexsort((np.arange(n_lanes), -late))
    return [Lateness(int(i), int(late[i]), int(who[i]), int(when[i])) for i in ranked.tolist()]


def _lane_of(members: Sequence[Sequence[int]], size: int) -> np.ndarray:
    """Each rank's lane index (-1: none), for ranks below ``size``."""
    ranks = np.fromiter(itertools.chain.from_iterable(members), np.int64)
    lanes = np.repeat(np.arange(len(members)), np.fromiter(map(len, members), np.int64,
                                                           len(members)))
    out = np.full(size, -1, np.int64)
    below = ranks < size
    out[ranks[below]] = lanes[below]
    return out
