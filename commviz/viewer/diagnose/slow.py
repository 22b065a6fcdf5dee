"""Slow links: a pair whose transfers (waiting excluded) are consistently slower than the
other pairs' for the same op and size: its 25th percentile above both 5x the others' median
and the others' 90th percentile, its median at least 5 ms above theirs, with 32 samples on
each side. A loaded machine delays some transfers by several ms (others' p90 ~5 ms, p99
~15 ms on 2 cores with 4 ranks), for a few hundred ms at a time, so a median alone flags a
busy moment, not a slow link. The same for a group against the other groups of its size
(collectives: from the last arrival to the end). Inside one collective the ranks finish
together, so a slow rank there is not told apart from its group: the group is named."""

from __future__ import annotations

import collections

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.wire import protocol

SLOW_FACTOR = 5.0
SLOW_MIN_NS = 5_000_000
SLOW_SAMPLES = 32
SLOW_WINDOW = 128     # transfers kept per pair
SLOW_HOLD_S = 2.0     # how long a pair or group must stay slow to be named


class SlowLinks:
    """``durations``: the groups' transfer times per (group, op, size), as the stragglers
    keep them."""

    def __init__(self, watch: w.Watch, durations: dict[tuple[int, str, int], collections.deque]
                 ) -> None:
        self.watch = watch
        self.durations = durations
        self._pairs: dict[tuple[str, int], dict[tuple[int, int], collections.deque]] = {}
        self._pair_seq: dict[tuple[int, int], int] = {}
        self._since: dict[tuple, float] = {}  # slow candidates: since when

    def transfers(self, recv: dict[str, np.ndarray], send: dict[str, np.ndarray]) -> None:
        """The transfers just paired (``Model.on_transfers``): how long each took."""
        ready = np.maximum(recv["t_start"], send["t_start"])
        took = (np.maximum(recv["t_end"], send["t_end"]) - ready).tolist()
        for src, dst, op, size, seq, t in zip(send["rank"].tolist(), recv["rank"].tolist(),
                                              send["op"].tolist(), send["bytes_in"].tolist(),
                                              send["seq"].tolist(), took):
            if (protocol.OPS[op], size) not in self._pairs:
                w.make_room(self._pairs)
            by_pair = self._pairs.setdefault((protocol.OPS[op], size), {})
            window = by_pair.get((src, dst))
            if window is None:
                window = by_pair[(src, dst)] = collections.deque(maxlen=SLOW_WINDOW)
            window.append(t)
            self._pair_seq[(src, dst)] = seq

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
        kinds: dict[tuple[str, int, int], dict[int, collections.deque]] = {}
        for (gkey, op, size), window in self.durations.items():
            kinds.setdefault((op, size, len(groups[gkey][1])), {})[gkey] = window
        out = []
        for (op, size, _), windows in kinds.items():
            for gkey, (med, others) in _outliers(windows).items():
                group = groups[gkey][1]
                out.append(Finding(
                    "slow", group, group, None,
                    fx.SlowGroup(op, size, group, med / 1e6, med / max(others, 1),
                                 others / 1e6),
                    ("slow-group", op, size, gkey), now, wall,
                    links=tuple(zip(group, group[1:] + group[:1]))))
        return out


def _outliers(windows: dict) -> dict:
    """The keys whose samples are consistently above all the others' (see the module doc),
    each with (its median, the others' median); at least 3 keys with enough samples."""
    full = {k: np.fromiter(window, np.float64) for k, window in windows.items()
            if len(window) >= SLOW_SAMPLES}
    if len(full) < 3:
        return {}
    out = {}
    for key, mine in full.items():
        rest = np.concatenate([v for k, v in full.items() if k != key])
        med, others, others_p90 = (float(np.median(mine)), float(np.median(rest)),
                                   float(np.percentile(rest, 90)))
        if (float(np.percentile(mine, 25)) > max(SLOW_FACTOR * others, others_p90)
                and med - others > SLOW_MIN_NS):
            out[key] = (med, others)
    return out
