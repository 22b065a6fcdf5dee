"""Who arrives last, by node: the timeline's lanes when there are more ranks than lanes.

A collective waits for its last rank. At a thousand ranks a lane per rank cannot be drawn, but
a lane per node can: for each collective instance, the span from the first to the last arrival
of the node's ranks, and who that last rank was. The node whose last rank came latest after
the instance's first arrival anywhere is the one the others waited for, whether one of its
ranks straggles or the whole node is slow.

Pure: it reads the model's lane rows (``Model.lanes``: op code, t_start, t_ready, t_end per
rank) and a partition of the ranks (``Model.nodes``), and costs a few sorts of the rows in
view, without a Python loop over ranks or ops. An instance is told by its op and its t_ready
(every member's is the instance's last arrival): no other column of the lanes names it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


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
        out), and the rows that land in one lane for one instance become one."""
        new = lane_map[self.lane] if len(self.lane) else self.lane
        keep = np.flatnonzero(new >= 0)
        key = self.instance[keep] * max(1, n_lanes) + new[keep]
        order = keep[np.lexsort((self.last[keep], key))]  # each group's last: its latest
        key = self.instance[order] * max(1, n_lanes) + new[order]
        head = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else keep
        at = order[head]
        tail = order[np.r_[head[1:], len(order)] - 1] if len(head) else at
        first = np.minimum.reduceat(self.first[order], head) if len(head) else self.first[:0]
        end = np.maximum.reduceat(self.end[order], head) if len(head) else self.end[:0]
        return Spans(new[at], self.instance[at], self.op[at], first, self.last[tail],
                     self.ready[at], end, self.last_rank[tail], self.late[tail])


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
    ranks = np.fromiter(lanes.keys(), np.int64, len(lanes))
    counts = np.fromiter(map(len, lanes.values()), np.int64, len(lanes))
    rows = np.concatenate([np.zeros((0, 4), np.int64), *lanes.values()])
    rank = np.repeat(ranks, counts)
    lane = _lane_of(members, int(rank.max(initial=-1)) + 1)[rank]
    if not (lane >= 0).all():
        keep = lane >= 0
        rows, rank, lane = rows[keep], rank[keep], lane[keep]
    op, start, ready, end = rows.T
    # instances: by (op, ready); each one's first arrival among all its rows
    order = np.lexsort((op, ready))
    new = np.r_[len(order) > 0,
                (op[order][1:] != op[order][:-1]) | (ready[order][1:] != ready[order][:-1])]
    instance = np.empty(len(order), np.int64)
    instance[order] = np.cumsum(new) - 1
    heads = np.flatnonzero(new)
    first = np.minimum.reduceat(start[order], heads) if len(heads) else start[:0]
    each = Spans(lane, instance, op, start, start, ready, end, rank, start - first[instance])
    return each.regroup(np.arange(len(members)), len(members))  # a row per rank: per lane


def worst_first(s: Spans, n_lanes: int) -> list[Lateness]:
    """Every lane's worst instance, the latest first (then the earliest lane); lanes without
    an instance in view last, in their order."""
    late = np.full(n_lanes, -1, np.int64)
    who = np.full(n_lanes, -1, np.int64)
    when = np.zeros(n_lanes, np.int64)
    if len(s.lane):
        order = np.lexsort((s.late, s.lane))  # each lane's latest is its last row
        tail = np.flatnonzero(np.r_[s.lane[order][1:] != s.lane[order][:-1], True])
        at = order[tail]
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
