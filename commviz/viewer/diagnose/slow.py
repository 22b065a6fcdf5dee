"""Slow links: a pair whose transfers (waiting excluded) are consistently slower than the
other pairs' for the same op and size: its 25th percentile above both 5x the others' median
and the others' 90th percentile, its median at least 5 ms above theirs, with 32 samples on
each side. A loaded machine delays some transfers by several ms (others' p90 ~5 ms, p99
~15 ms on 2 cores with 4 ranks), for a few hundred ms at a time, so a median alone flags a
busy moment, not a slow link. The same for a group against the other groups of its size
(collectives: from the last arrival to the end). Inside one collective the ranks finish
together, so a slow rank there is not told apart from its group: the group is named."""

from __future__ import annotations

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.diagnose.windows import Durations, Windows
from commviz.wire import protocol

SLOW_FACTOR = 5.0
SLOW_MIN_NS = 5_000_000
SLOW_SAMPLES = 32
SLOW_WINDOW = 128     # transfers kept per pair
SLOW_HOLD_S = 2.0     # how long a pair or group must stay slow to be named


class SlowLinks:
    """``durations``: the groups' transfer times per (group, op, size), as the stragglers
    keep them. The pairs' are kept here, a ``Windows`` per (op, size), keyed by pair."""

    def __init__(self, watch: w.Watch, durations: Durations) -> None:
        self.watch = watch
        self.durations = durations
        self._pairs: dict[tuple[str, int], Windows] = {}
        self._pair_seq: dict[tuple[int, int], int] = {}
        self._since: dict[tuple, float] = {}  # slow candidates: since when

    def transfers(self, recv: dict[str, np.ndarray], send: dict[str, np.ndarray]) -> None:
        """The transfers just paired (``Model.on_transfers``): how long each took."""
        if not len(send["rank"]):
            return
        # each side timed on its own clock, the shorter one: it is the side that came last,
        # so it waited for nothing, and no offset between two hosts' clocks enters it (an
        # offset not yet known, or misjudged, made every pair across two nodes look slow)
        took = np.minimum(recv["t_end"] - recv["t_start"], send["t_end"] - send["t_start"])
        pair = (send["rank"].astype(np.int64) << 32) | recv["rank"].astype(np.int64)
        kinds, kind_of = _in_order(send["bytes_in"].astype(np.int64) * 256 + send["op"])
        for k, code in enumerate(kinds.tolist()):
            key = (protocol.OPS[code % 256], code // 256)
            if key not in self._pairs:
                w.make_room(self._pairs)
                self._pairs[key] = Windows(SLOW_WINDOW, SLOW_SAMPLES)
            mine = np.flatnonzero(kind_of == k)
            pairs, pair_of = _in_order(pair[mine])
            self._pairs[key].extend(_pair_keys(pairs), pair_of, took[mine])
        # each pair's last transfer: where the reversed ones first come
        pairs, last = np.unique(pair[::-1], return_index=True)
        self._pair_seq.update(zip(_pair_keys(pairs), send["seq"][::-1][last].tolist()))

    def find(self, now: float, wall: int) -> list[Finding]:
        """Slow pairs and groups that stay slow for SLOW_HOLD_S: a loaded machine makes a
        pair look slow for a moment, a slow link stays slow."""
        found = self._slow_pairs(now, wall) + self._slow_groups(now, wall)
        since = {f.key: self._since.get(f.key, now) for f in found}
        self._since = since
        return [f for f in found
                if now - since[f.key] >= SLOW_HOLD_S or f.key in self.watch.active]

    def _slow_pairs(self, now: float, wall: int) -> list[Finding]:
        out = []
        for (op, size), pairs in self._pairs.items():
            for pair, (med, others) in _outliers(pairs).items():
                src, dst = pair
                out.append(Finding(
                    "slow", pair, pair, self._pair_seq.get(pair),
                    fx.SlowPair(op, src, dst, size, med / 1e6, med / max(others, 1),
                                others / 1e6),
                    ("slow", op, size, pair), now, wall, links=(pair,)))
        return out

    def _slow_groups(self, now: float, wall: int) -> list[Finding]:
        """Groups of the same size whose transfers (after the last arrival) of the same op and
        size take far longer than the other groups': a slow link inside that group."""
        groups = self.watch.model.groups
        out = []
        for (op, size, _), windows in self.durations.kinds():
            for gkey, (med, others) in _outliers(windows).items():
                group = groups[gkey][1]
                out.append(Finding(
                    "slow", group, group, None,
                    fx.SlowGroup(op, size, group, med / 1e6, med / max(others, 1),
                                 others / 1e6),
                    ("slow-group", op, size, gkey), now, wall,
                    links=tuple(zip(group, group[1:] + group[:1]))))
        return out


def _outliers(windows: Windows) -> dict:
    """The keys whose samples are consistently above all the others' (see the module doc),
    each with (its median, the others' median); at least 3 keys with enough samples.

    Only a key with enough samples above what the others' p90 and 5x their median are at
    least (``rest_floor``) can have its 25th percentile above both: those few are looked at
    one by one, the others by one comparison of their samples."""
    keys, held = windows.pooled()
    if len(keys) < 3:
        return {}
    floor = np.maximum(SLOW_FACTOR * windows.rest_floor(held, 50),
                       windows.rest_floor(held, 90))
    # the 25th percentile is at most the sample after its place: that one and those above it
    after = np.minimum(np.floor((held - 1) * 0.25).astype(np.int64) + 1, held - 1)
    maybe = np.flatnonzero(windows.above(keys, floor) >= held - after)
    out = {}
    for key in (keys[i] for i in maybe.tolist()):
        mine = windows.window(key)
        med, others = float(np.median(mine)), windows.rest_median(key)
        if (float(np.percentile(mine, 25)) > max(SLOW_FACTOR * others,
                                                 windows.rest_percentile(key, 90))
                and med - others > SLOW_MIN_NS):
            out[key] = (med, others)
    return out


def _in_order(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct codes in the order they first come, and each code's place among them:
    new keys get their windows in the order the records brought them."""
    distinct, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(first)
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    return distinct[order], place[inverse.ravel()]


def _pair_keys(pairs: np.ndarray) -> list[tuple[int, int]]:
    """Pairs numbered as ``src << 32 | dst``, back as (src, dst)."""
    return [(p >> 32, p & 0xFFFFFFFF) for p in pairs.tolist()]
