"""Stragglers, and every late arrival at a collective.

A rank is late at an instance when it arrives last by more than max(10 ms, the op's own
median transfer time, 3 x its jitter (p90 - p50)): the jitter of a loaded 2-core machine is
a few ms, so only a real lag stands out, and a rank that makes the others wait longer than
the op itself takes at least doubles its cost (twice the transfer time let a rank 30 ms late
at every 15 ms all_reduce of a 1,024-rank job go unnamed). Named after it was late 3
instances in a row of the same collective (group, op and size: a training step's first
collective is where a slow rank shows, the next ones are on time as everyone leaves the late
one together); a single late arrival is noise, and so is a stretch of them under a second:
one stall of a rank delays every call of that stretch. Late instances whose waits overlap
are one late episode, counted once: a rank that stalls once (a garbage collection, a data
loader) arrives late at every bucket all_reduce of that step, and is no straggler for it.
Once named, cleared only after 3 instances in a row of that collective on time, so a rank
late most of the time does not flicker. What the others waited for it is the union of their
waits (per waiting rank): DDP's bucket all_reduces overlap, and the same wait is not counted
twice. It is said per waiting rank and summed as rank time: they wait at the same time, the
sum is no wall time.

Every late arrival, in a row or not, is also counted per rank (``late_arrivals``): a rank
that stalls now and then (a data loader, a checkpoint) is no straggler, yet the others wait
for it each time, and the count says how often and how long, without a judgement.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.diagnose.windows import Durations
from commviz.wire import protocol

MIN_LATE_NS = 10_000_000
LATE_DURATION_FACTOR = 1.0
LATE_JITTER_FACTOR = 3.0
STRAGGLER_AFTER = 3   # late instances in a row before a rank is named
# ... over at least this long, from the first late arrival of the streak to its latest: one
# stall of a rank (a garbage collection, a data loader) delays its calls of one stretch, a
# step's bucket all_reduces one after the other; a straggler is late again and again
STRAGGLER_SPAN_NS = 1_000_000_000
STRAGGLER_CLEAR = 3   # on-time instances in a row that clear it
WINDOW = 64           # instances kept per (group, op, size) for the thresholds


@dataclass
class Lateness:
    """One rank's late arrivals at collectives (beyond the straggler's threshold), in a row
    or not: how often the others waited for it, how long in all, the longest once. A wait
    that overlaps the one before (DDP's bucket all_reduces waiting for the same late rank)
    is the same late arrival: it adds only what lies beyond it."""

    count: int = 0
    waited_ns: int = 0    # from the last but one arrival to this rank's, summed
    longest_ns: int = 0
    op: str = ""          # where the longest was
    seq: int = 0
    group: tuple[int, ...] = ()  # its group, when not every rank of the job is in it
    _start: int = 0       # the last late arrival's wait
    _end: int = 0

    @property
    def last_ns(self) -> int:
        """When its last late arrival came (wall ns): the others stopped waiting then."""
        return self._end

    def add(self, start: int, end: int, op: str, seq: int,
            group: tuple[int, ...] = ()) -> None:
        if self.count and start < self._end:  # the same wait, seen at an overlapping op
            if end <= self._end:
                return
            self.waited_ns += end - self._end
            self._end = end
        else:
            self.count += 1
            self.waited_ns += end - start
            self._start, self._end = start, end
        if self._end - self._start > self.longest_ns:
            self.longest_ns, self.op, self.seq = self._end - self._start, op, seq
            self.group = group


@dataclass
class _Streak:
    """One rank's late arrivals in a row at one (group, op, size)."""

    rank: int
    late: int = 0         # late episodes: a late arrival whose wait overlaps the one before
    on_time: int = 0      # is the same episode (one stall delays a step's every bucket)
    lateness_ns: int = 0  # summed over episodes, each at its latest
    seq: int = 0
    since_ns: int = 0     # when the others began waiting for it, in its first episode
    until_ns: int = 0     # when the others stopped waiting in its last episode
    worst_ns: int = 0     # its last episode's lateness


@dataclass
class _Waits:
    """The waits of a group's ranks for one straggler, as a union of intervals per waiting
    rank: total waited and where its last interval ends (records of one rank arrive in
    order; an older interval that comes late adds nothing, never more than it could)."""

    total_ns: dict[int, int] = field(default_factory=dict)
    end_ns: dict[int, int] = field(default_factory=dict)

    def add(self, rank: int, start: int, end: int) -> None:
        start = max(start, self.end_ns.get(rank, start))
        if end > start:
            self.total_ns[rank] = self.total_ns.get(rank, 0) + end - start
            self.end_ns[rank] = end


class Stragglers:
    """Arrivals at matched collectives. ``durations``: per (group, op, size), the last
    instances' transfer times (from the last arrival to the end), the thresholds' base; the
    slow links read them too."""

    def __init__(self, watch: w.Watch, durations: Durations) -> None:
        self.watch = watch
        self.durations = durations
        self._streaks: dict[tuple[int, str, int], _Streak] = {}  # (group, op, size) ->
        self._waits: dict[tuple[int, int], _Waits] = {}  # (group, straggler) -> its streaks'
        self._late: dict[tuple[int, int], Lateness] = {}  # (rank, job) -> its late arrivals

    def arrivals(self, rows: dict[str, np.ndarray], row_sizes: np.ndarray, starts: np.ndarray,
                 counts: np.ndarray, failed: np.ndarray) -> None:
        """The instances just matched (``Model.on_collectives``), with their rows' sizes and
        whether a rank failed in each."""
        t0 = rows["t_start"]
        last_i, second_i = last_two(t0, starts, counts)
        lateness = t0[last_i] - t0[second_i]
        transfer = np.maximum.reduceat(rows["t_end"], starts) - t0[last_i]
        sizes = row_sizes[starts]
        keep = (counts >= 2) & ~failed
        gk, op, seq = rows["gkey"][starts], rows["op"][starts], rows["seq"][starts]
        for g in np.unique(gk[keep]).tolist():
            # every instance is judged (a replay applies hundreds at once), against the
            # threshold of its kind (op and size) once this round's durations are in; only
            # those late, or of a kind with a streak going, one by one and in order
            idx = np.flatnonzero(keep & (gk == g))
            kinds, kind_of = np.unique(sizes[idx].astype(np.int64) * 256 + op[idx],
                                       return_inverse=True)
            keys, limits = [], np.empty(len(idx))
            for k, code in enumerate(kinds.tolist()):
                key = (g, protocol.OPS[code % 256], code // 256)
                if key not in self.durations:
                    w.make_room(self.durations)
                mine = kind_of == k
                self.durations.extend(key, transfer[idx[mine]])
                keys.append(key)
                limits[mine] = _late_threshold(self.durations.window(key))
            late = lateness[idx] > limits
            followed = np.isin(kind_of, [k for k, key in enumerate(keys) if key in self._streaks])
            for n in np.flatnonzero(late | followed | np.isin(kind_of, kind_of[late])).tolist():
                i, key = idx[n], keys[kind_of[n]]
                if late[n]:
                    self._tally(int(rows["rank"][last_i[i]]), int(t0[second_i[i]]),
                                int(t0[last_i[i]]), key[1], int(seq[i]), key[0])
                if late[n] or key in self._streaks:
                    sl = slice(starts[i], starts[i] + counts[i])
                    self._arrival(key, int(seq[i]), int(rows["rank"][last_i[i]]),
                                  int(lateness[i]), float(limits[n]),
                                  zip(rows["rank"][sl].tolist(), t0[sl].tolist()))

    def find(self, now: float, wall: int) -> list[Finding]:
        """The ranks late STRAGGLER_AFTER times in a row (over STRAGGLER_SPAN_NS), each at
        its longest streak per group."""
        model = self.watch.model
        named: dict[tuple[int, int], tuple[str, _Streak]] = {}  # (group, rank) -> longest
        for (gkey, op, _), s in self._streaks.items():
            late = model.ranks.get(s.rank)
            if not named_yet(s) or (late is not None and late.job
                                            and late.job != model.job_of(gkey)):
                continue  # not yet named, or that rank is now another job's process
            best = named.get((gkey, s.rank))
            if best is None or s.late > best[1].late:
                named[(gkey, s.rank)] = (op, s)
        out = []
        for (gkey, _), (op, s) in named.items():
            group = model.groups[gkey][1]
            waits = self._waits.get((gkey, s.rank))
            waited = sum(waits.total_ns.values()) / 1e9 if waits else 0.0
            each = waited / max(len(group) - 1, 1)  # they wait at once: the sum is no wall time
            out.append(Finding(
                "straggler", (s.rank,), group, s.seq,
                fx.Straggler(s.rank, op, group, s.late, s.lateness_ns / s.late / 1e6, each,
                             waited),
                ("straggler", gkey, s.rank), now, wall,
                links=tuple((r, s.rank) for r in group if r != s.rank)))
        return out

    def late_arrivals(self) -> list[tuple[int, Lateness]]:
        """The ranks shown now that arrived late at a collective, the others waiting for
        them, longest waited for first."""
        found = [(r, self._late[(r, s.job)]) for r, s in self.watch.model.ranks.items()
                 if (r, s.job) in self._late]
        return sorted(found, key=lambda item: (-item[1].waited_ns, item[0]))

    def _tally(self, rank: int, start: int, end: int, op: str, seq: int, gkey: int) -> None:
        state = self.watch.model.ranks.get(rank)
        group = self.watch.model.groups[gkey][1]
        # a subgroup's sequence numbers are its own: named with it
        sub = group if state is not None and len(group) < state.world else ()
        key = (rank, state.job if state is not None else 0)
        late = self._late.get(key)
        if late is None:
            w.make_room(self._late)
            late = self._late[key] = Lateness()
        late.add(start, end, op, seq, sub)

    def _arrival(self, key: tuple[int, str, int], seq: int, last: int, lateness: int,
                 threshold: float, arrivals: Iterable[tuple[int, int]]) -> None:
        s = self._streaks.get(key)
        if lateness <= threshold:  # on time: breaks a streak; clears a named one after 3
            if s is not None:
                s.on_time += 1
                if not named_yet(s) or s.on_time >= STRAGGLER_CLEAR:
                    self._end_streak(key)
            return
        if s is None or s.rank != last:
            if s is not None:
                self._end_streak(key)
            if w.full(self._streaks):
                self._end_streak(next(iter(self._streaks)))
            s = self._streaks[key] = _Streak(last)
        arrivals = dict(arrivals)
        start = arrivals[last] - lateness  # the last but one arrival: the others wait from it
        if s.late and start < s.until_ns:  # the same episode, seen at a later instance
            s.lateness_ns += max(0, lateness - s.worst_ns)
            s.worst_ns = max(s.worst_ns, lateness)
        else:
            s.late += 1
            s.lateness_ns += lateness
            s.worst_ns = lateness
            s.since_ns = s.since_ns or start
        s.until_ns = max(s.until_ns, arrivals[last])
        s.on_time = 0
        s.seq = seq
        waits = self._waits.setdefault((key[0], last), _Waits())
        for r, t in arrivals.items():
            if r != last:
                waits.add(r, t, arrivals[last])

    def _end_streak(self, key: tuple[int, str, int]) -> None:
        """Forget a streak, and its rank's waits once none of its streaks in the group is left."""
        s = self._streaks.pop(key)
        if not any(k[0] == key[0] and o.rank == s.rank for k, o in self._streaks.items()):
            self._waits.pop((key[0], s.rank), None)


def named_yet(s: _Streak) -> bool:
    """Whether a streak makes its rank a straggler: STRAGGLER_AFTER late episodes in a row,
    over STRAGGLER_SPAN_NS at least."""
    return s.late >= STRAGGLER_AFTER and s.until_ns - s.since_ns >= STRAGGLER_SPAN_NS


def last_two(t0: np.ndarray, starts: np.ndarray, counts: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per instance (rows ``starts[i]`` on, ``counts[i]`` of them), its last arrival and the
    one before (the same row for an instance of one), as a stable sort by ``t0`` within
    each would order them (of equal times the later row last), without the sort."""
    at = np.arange(len(t0))

    def latest(times: np.ndarray) -> np.ndarray:  # each instance's last row of its latest time
        top = np.repeat(np.maximum.reduceat(times, starts), counts)
        return np.maximum.reduceat(np.where(times == top, at, -1), starts)

    last = latest(t0)
    rest = t0.copy()
    rest[last] = np.iinfo(np.int64).min
    return last, latest(rest)


def _late_threshold(arr: np.ndarray) -> float:
    p50 = float(np.median(arr))
    jitter = float(np.percentile(arr, 90)) - p50 if len(arr) >= 5 else 0.0
    return max(MIN_LATE_NS, LATE_DURATION_FACTOR * p50, LATE_JITTER_FACTOR * jitter)
