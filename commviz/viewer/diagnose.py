"""Live diagnosis from the event stream: stragglers, hangs, failed collectives, lost ranks,
mismatches, slow links.

Pure like the model it watches: no Textual, no sockets, both clocks injected. The model calls
back with the rows of every matching round (arrivals per rank, for stragglers and slow
links); ``update()``, run a few times a second even when no event arrives (a hang sends
none), looks at what is still pending or in flight. Each condition has a stable key: a new
key is reported once as a finding, a key that disappears is reported as ``resolved`` with
how long it held, so findings clear themselves when the condition ends.

Thresholds and why:

* straggler: a rank is late at an instance when it arrives last by more than
  max(10 ms, 2 x the op's own median transfer time, 3 x its jitter (p90 - p50)): the jitter
  of a loaded 2-core machine is a few ms, so only a real lag stands out. Named after it was
  late 3 instances in a row of the same collective (group, op and size: a training step's
  first collective is where a slow rank shows, the next ones are on time as everyone leaves
  the late one together); a single late arrival is noise. Once named, cleared only after 3
  instances in a row of that collective on time, so a rank late most of the time does not
  flicker. What the others waited for it is the union of their waits (per waiting rank):
  DDP's bucket all_reduces overlap, and the same wait is not counted twice. It is said per
  waiting rank and summed as rank time: they wait at the same time, the sum is no wall time.
  Every late arrival, in a row or not, is also counted per rank (``late_arrivals``): a rank
  that stalls now and then (a data loader, a checkpoint) is no straggler, yet the others
  wait for it each time, and the count says how often and how long, without a judgement.
* hang: an instance entered by some ranks and not others for more than 1 s (no healthy
  demo came near it in 10 minutes on a loaded 2-core machine: bench/false_findings.py),
  while someone still waits in it; the same for a send or receive whose counterpart never
  came; cycles of such waits are deadlocks, named with the op each of its ranks waits in and
  the ranks that wait on them. How long an op has waited is counted on the viewer's clock
  from when its in-flight record arrived (it is sent 20 ms after the op began), not from the
  rank's t_start: hosts' clocks may disagree by more than the threshold. Once every rank
  involved has said goodbye, or every rank of its job is gone (said goodbye, replaced, or
  found lost), that count stops where the last one was heard from: a wait nobody is in any
  more does not grow, and no new hang is named in a job that is gone (nobody is left to
  wait).
* failed: the same, once no rank waits in it any more and some failed in it (the backend
  raised: a peer closed the connection, the timeout): named with how long they were in it,
  at once if every missing rank has exited (it will not come), else after 1 s like a hang
  (its record may still be on its way); a missing rank found lost will not come either. Its
  key is the hang's, so a hang that ends in failure becomes this finding, not a resolution,
  and says the timeout ended the hang, with what the missing ranks did while it hung (they
  may have exited since) and the deadlock that caused it; a deadlock whose every wait failed
  becomes one too. Its words are kept as first found, nothing in them counts on.
* lost rank: no message for 2 heartbeat intervals (the emitter beats every 0.5 s) while
  another rank kept reporting for that long after it went quiet, still so 0.2 s later:
  when every rank falls silent at once the viewer or the whole machine stalled (or the job
  ended: ``finish`` names who left without a goodbye), and ranks resuming after a stall
  come back a few ms apart, so no rank is singled out for either. A rank silent that long
  after a rank of its job said goodbye ended without one (a launcher such as torchrun stops
  the other workers as soon as one fails, so they all fall silent together, and no viewer
  stall makes a goodbye); so did a rank whose number comes back as another process (a new
  job, ``Model``'s generations) with no goodbye from the old one: named once. One found as
  its job ended keeps the silence it was found with: the job is over, nothing grows.
* a job's findings hold until its ranks' numbers come back as a later job's processes;
  then they end with the job (all its ranks gone or replaced), and are reported so, not as
  resolved by the job's own progress; a hang whose instance completed meanwhile is resolved.
* mismatch: records of one instance that differ in op, dtype or size (nccl-tests' S, for ops
  whose size must agree), from pending and in-flight records, so it is named while the job
  still hangs; held 10 s after the instance completed.
* slow: a pair whose transfers (waiting excluded) are consistently slower than the other
  pairs' for the same op and size: its 25th percentile above both 5x the others' median and
  the others' 90th percentile, its median at least 5 ms above theirs, with 32 samples on
  each side. A loaded machine delays some transfers by several ms (others' p90 ~5 ms, p99
  ~15 ms on 2 cores with 4 ranks), for a few hundred ms at a time, so a median alone
  flags a busy moment, not a slow link. The same for a group against the other groups of
  its size (collectives: from the last arrival to the end). Inside one collective the ranks
  finish together, so a slow rank there is not told apart from its group: the group is
  named.
"""

from __future__ import annotations

import collections
import re
import signal
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from commviz.viewer.model import Model
from commviz.wire import protocol
from commviz.wire.protocol import ANNOUNCE_S, HEARTBEAT_S

LOST_AFTER_S = 2 * HEARTBEAT_S
LOST_CONFIRM_S = 0.2
HANG_AFTER_S = 1.0
MIN_LATE_NS = 10_000_000
LATE_DURATION_FACTOR = 2.0
LATE_JITTER_FACTOR = 3.0
STRAGGLER_AFTER = 3   # late instances in a row before a rank is named
STRAGGLER_CLEAR = 3   # on-time instances in a row that clear it
# a number with a unit after it ("0.53 s", "12.5 ms"): not versions, addresses or host names
_DECIMAL = re.compile(r"(?<![\d.])(\d+)\.(\d+)(?=\s?(?:s|ms|us|KiB|MiB|GiB|GB/s|%|x)(?![\w/]))")
WINDOW = 64           # instances kept per (group, op, size) for the thresholds
HISTORY = 100         # findings and resolutions kept for a panel's history
KEYS_MAX = 4096       # (group, op, size) windows and (op, size) pair tables kept at most
MISMATCH_HOLD_S = 10.0
MISMATCH_WAIT_S = 0.5  # how long the first rank in waits for the rest before a mismatch is named
SLOW_FACTOR = 5.0
SLOW_MIN_NS = 5_000_000
SLOW_SAMPLES = 32
SLOW_WINDOW = 128     # transfers kept per pair
SLOW_HOLD_S = 2.0     # how long a pair or group must stay slow to be named

TYPES = ("straggler", "hang", "failed", "lost_rank", "mismatch", "slow", "resolved")
# ops whose nccl-tests size must agree on every rank (object and all-to-all sizes may differ)
_SIZED = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                    "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
                    "reduce_scatter_single", "gather", "scatter"})


@dataclass(frozen=True)
class Finding:
    """One diagnosis, as the recording, the headless printer and the findings panel show it."""

    type: str                        # one of TYPES
    ranks: tuple[int, ...]           # the cause: late, missing, lost or differing rank(s)
    group: tuple[int, ...] | None    # global ranks of the group; (src, dst) for p2p
    seq: int | None                  # the instance's sequence number, if one
    message: str                     # one line, English
    message_pt: str                  # the same line in Portuguese
    key: tuple                       # identity of the condition across updates
    since: float                     # model clock (s) when first found
    t_ns: int                        # wall clock (ns) when reported
    links: tuple[tuple[int, int], ...] = ()  # rank pairs to highlight: waits, slow links
    about: str | None = None         # resolved: the type of the finding that ended
    duration_s: float | None = None  # resolved: how long the condition held
    unresolved: bool = False         # resolved: it did not clear, its job ended with it
    op: str | None = None            # hang, failed: the op its ranks are missing from
    hung: bool = False               # failed: found hung (or deadlocked) first, ended by a timeout

    @property
    def topic(self) -> str:
        """Its entry in ``findings_text.ADVICE``: its type, or ``timeout`` for a failed op that
        hung first (the failure is the timeout ending the hang, the hang's advice holds)."""
        return "timeout" if self.hung else self.type

    def text(self, lang: str = "en") -> str:
        """The line in ``lang``; Portuguese writes a quantity's decimals after a comma."""
        return _DECIMAL.sub(r"\1,\2", self.message_pt) if lang == "pt" else self.message

    def record(self) -> dict[str, Any]:
        """The recording line (``kind: "diag"``)."""
        rec = {"kind": "diag", "type": self.type, "ranks": list(self.ranks),
               "group": None if self.group is None else list(self.group), "seq": self.seq,
               "message": self.message, "message_pt": self.message_pt, "t_ns": self.t_ns}
        if self.type == "resolved":
            rec.update(about=self.about, duration_s=self.duration_s)
        return rec


def signal_name(number: int) -> str:
    """A signal by its name ("SIGKILL"), by its number where it has none."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how_ended(code: int | None) -> tuple[str, str]:
    """How a rank's process ended, as its launcher said (English, Portuguese): its exit
    status or the signal that killed it; unknown, that it crashed or was killed."""
    if code is None or code == 0:
        return "it crashed or was killed", "caiu ou foi morto"
    if code < 0:
        return f"killed by {signal_name(-code)}", f"morto por {signal_name(-code)}"
    return f"exit {code}", f"saída {code}"


def recorded_text(rec: dict[str, Any], lang: str = "en") -> str:
    """A recorded finding's line (``Finding.record``) in ``lang``: English where it has no
    Portuguese (recorded before message_pt was)."""
    pt = rec.get("message_pt")
    if lang == "pt" and isinstance(pt, str):
        return _DECIMAL.sub(r"\1,\2", pt)
    return str(rec.get("message", ""))


# what explains what: a deadlock makes the hangs in it (and their failures at the timeout), a
# lost rank the ops its peers wait or fail in, a mismatch the hang that follows; hangs and
# failures cost the job more than a slow link or a straggler
_CAUSES = ("deadlock", "lost_rank", "mismatch", "hang", "failed", "slow", "straggler")


def by_cause(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in the order a reader should take them: causes before what they cause (see
    ``_CAUSES``), and among findings of one kind the newest first."""
    def kind(f: Finding) -> int:
        return _CAUSES.index("deadlock" if f.key[0] == "deadlock" else f.type)
    return sorted(findings, key=lambda f: (kind(f), -f.since))


@dataclass
class _Streak:
    """One rank's late arrivals in a row at one (group, op, size)."""

    rank: int
    late: int = 0
    on_time: int = 0
    lateness_ns: int = 0
    seq: int = 0


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


class _Wait(NamedTuple):
    """The op a rank waits in, for a deadlock's words; ``took``: seconds it was in it before
    it failed, None while it waits."""

    op: str
    peer: int
    seq: int
    took: float | None


@dataclass
class _Entry:
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


class Diagnosis:
    """Watches one model; the session calls ``update()`` periodically under its lock."""

    def __init__(self, model: Model, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.model = model
        self.wall_ns = wall_ns
        model.on_collectives = self._collectives
        model.on_transfers = self._transfers
        model.diagnosis = self
        self._active: dict[tuple, Finding] = {}
        self._durations: dict[tuple[int, str, int], collections.deque] = {}
        self._streaks: dict[tuple[int, str, int], _Streak] = {}  # (group, op, size) ->
        self._waits: dict[tuple[int, int], _Waits] = {}  # (group, straggler) -> its streaks'
        self._mismatched: dict[tuple[int, int], tuple[Finding, float]] = {}
        self._pairs: dict[tuple[str, int], dict[tuple[int, int], collections.deque]] = {}
        self._pair_seq: dict[tuple[int, int], int] = {}
        self._ended: dict[tuple, Finding] = {}  # found by finish(): they hold from then on
        self._slow_since: dict[tuple, float] = {}  # slow candidates: since when
        self._seen: dict[tuple[int, int], float] = {}  # (rank, op id) -> when first known
        self._touched: set[tuple[int, int]] = set()
        self._quiet: dict[int, float] = {}  # rank -> when it first looked lost
        self._left_silent: dict[int, float] = {}  # rank lost as its job ended -> silence then
        self._jobs: dict[tuple, set[int]] = {}  # finding key -> the jobs of its ranks
        self._completed: set[tuple] = set()  # hang keys whose instance completed since
        # hang key -> what its missing ranks did while it hung, as its failure will say
        self._hung: dict[tuple, tuple[str, str]] = {}
        self._replacements = 0  # of the model's replaced incarnations, those looked at
        self._late: dict[tuple[int, int], Lateness] = {}  # (rank, job) -> its late arrivals
        self.history: collections.deque[Finding] = collections.deque(maxlen=HISTORY)

    # ---- API ------------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Findings that hold now, oldest first (messages kept up to date)."""
        return sorted(self._active.values(), key=lambda f: f.since)

    def update(self) -> list[Finding]:
        """Re-evaluate every condition; returns what is new: findings, then resolutions."""
        now, wall = self.model.clock(), self.wall_ns()
        self._touched = set()
        unmatched = self._unmatched(now)
        current: dict[tuple, Finding] = dict(self._ended)
        lost = self._lost(now, wall)
        gone = {f.ranks[0] for f in lost}
        # a lost rank before what it leaves its peers in (a hang, a failed op)
        for found in (self._straggling(now, wall), lost, self._hangs(now, wall, unmatched, gone),
                      self._mismatches(now, wall, unmatched), self._slow(now, wall)):
            for f in found:
                current.setdefault(f.key, f)
        events = self._replaced(now, wall)
        for key, f in current.items():
            old = self._active.get(key)
            if old is None or old.type != f.type:  # new, or a hang that ended in failure
                events.append(f)
                self._jobs[key] = {self.model.ranks[r].job for r in f.ranks
                                   if r in self.model.ranks}
            elif f.type == "failed":  # over: it says what each rank did when it was found
                current[key] = old
            else:
                current[key] = replace(f, since=old.since, t_ns=old.t_ns)
        for key, old in self._active.items():
            if key not in current:
                jobs = self._jobs.pop(key, set())
                over = (bool(jobs) and all(map(self.model.job_over, jobs))
                        and key not in self._completed)
                if over and old.type == "lost_rank":
                    continue  # said once: a lost rank of a job that is over stays lost
                events.append(_resolved(old, now, wall, max(jobs) if over else None))
        self._active = current
        self._completed = set()
        self._hung = {k: v for k, v in self._hung.items() if k in current}
        self._seen = {k: v for k, v in self._seen.items() if k in self._touched}
        self.history.extend(events)
        return events

    def finish(self, ended: Iterable[int]) -> list[Finding]:
        """The job has ended (``ended``: its ranks): name those that left without a goodbye,
        but for those its launcher says it stopped (SIGTERM)."""
        now, wall = self.model.clock(), self.wall_ns()
        events = []
        for r in sorted(set(ended)):
            s = self.model.ranks.get(r)
            key = ("lost_rank", r)
            code = self.model.exit_codes.get(r) if s is None else s.exit_code
            # stopped by its launcher (torchrun stops the others when one fails): not lost
            if (s is not None and s.exited) or key in self._active or code == -signal.SIGTERM:
                continue
            how_en, how_pt = _how_ended(code)
            if s is None:  # it died before its first heartbeat could leave
                en = f"rank {r} ended before it reported anything ({how_en})"
                pt = f"rank {r} terminou antes de enviar qualquer coisa ({how_pt})"
            else:
                last_en, last_pt = _last_record(s)
                en = f"rank {r} ended without saying goodbye ({how_en}){last_en}"
                pt = f"rank {r} terminou sem se despedir ({how_pt}){last_pt}"
            f = Finding("lost_rank", (r,), None, None, en, pt, key, now, wall)
            self._active[key] = self._ended[key] = f
            events.append(f)
        self.history.extend(events)
        # what the others failed in without them, now that they will not come
        return events + (self.update() if events else [])

    def late_arrivals(self) -> list[tuple[int, Lateness]]:
        """The ranks shown now that arrived late at a collective, the others waiting for
        them, longest waited for first."""
        found = [(r, self._late[(r, s.job)]) for r, s in self.model.ranks.items()
                 if (r, s.job) in self._late]
        return sorted(found, key=lambda item: (-item[1].waited_ns, item[0]))

    def silent(self) -> list[int]:
        """Ranks neither gone with a goodbye nor heard from for LOST_AFTER_S."""
        now = self.model.clock()
        return sorted(r for r, s in self.model.ranks.items()
                      if not s.exited and now - s.last_seen > LOST_AFTER_S)

    # ---- model callbacks: arrivals of matched instances ----------------------------------
    def _collectives(self, rows: dict[str, np.ndarray], starts: np.ndarray) -> None:
        counts = np.diff(np.r_[starts, len(rows["rank"])])
        multi = counts >= 2
        if not multi.any():
            return
        run = np.repeat(np.arange(len(starts)), counts)
        t0 = rows["t_start"]
        order = np.lexsort((t0, run))  # within each instance, by arrival
        ends = starts + counts - 1
        last_i, second_i = order[ends], order[np.maximum(ends - 1, starts)]
        lateness = t0[last_i] - t0[second_i]
        transfer = np.maximum.reduceat(rows["t_end"], starts) - t0[last_i]
        failed = np.logical_or.reduceat((rows["flags"] & protocol.FLAG_FAILED) > 0, starts)
        row_sizes = self.model.sizes_of(rows)
        sizes = row_sizes[starts]
        self._check_uniform(rows, row_sizes, starts, counts)
        keep = multi & ~failed
        gk, op, seq = rows["gkey"][starts], rows["op"][starts], rows["seq"][starts]
        if any(k[0] == "hang" for k in self._active):  # completed: resolved, not unresolved
            self._completed.update(k for k in zip(["hang"] * len(gk), gk[~failed].tolist(),
                                                  seq[~failed].tolist()) if k in self._active)
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
                window = self._durations.get(key)
                if window is None:
                    _make_room(self._durations)
                    window = self._durations[key] = collections.deque(maxlen=WINDOW)
                mine = kind_of == k
                window.extend(transfer[idx[mine]][-WINDOW:].tolist())
                keys.append(key)
                limits[mine] = _late_threshold(window)
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

    def _tally(self, rank: int, start: int, end: int, op: str, seq: int, gkey: int) -> None:
        state = self.model.ranks.get(rank)
        group = self.model.groups[gkey][1]
        # a subgroup's sequence numbers are its own: named with it
        sub = group if state is not None and len(group) < state.world else ()
        key = (rank, state.job if state is not None else 0)
        late = self._late.get(key)
        if late is None:
            if len(self._late) >= KEYS_MAX:
                del self._late[next(iter(self._late))]
            late = self._late[key] = Lateness()
        late.add(start, end, op, seq, sub)

    def _arrival(self, key: tuple[int, str, int], seq: int, last: int, lateness: int,
                 threshold: float, arrivals: Iterable[tuple[int, int]]) -> None:
        s = self._streaks.get(key)
        if lateness <= threshold:  # on time: breaks a streak; clears a named one after 3
            if s is not None:
                s.on_time += 1
                if s.late < STRAGGLER_AFTER or s.on_time >= STRAGGLER_CLEAR:
                    self._end_streak(key)
            return
        if s is None or s.rank != last:
            if s is not None:
                self._end_streak(key)
            if len(self._streaks) >= KEYS_MAX:
                self._end_streak(next(iter(self._streaks)))
            s = self._streaks[key] = _Streak(last)
        s.late += 1
        s.on_time = 0
        s.lateness_ns += lateness
        s.seq = seq
        waits = self._waits.setdefault((key[0], last), _Waits())
        arrivals = dict(arrivals)
        for r, t in arrivals.items():
            if r != last:
                waits.add(r, t, arrivals[last])

    def _end_streak(self, key: tuple[int, str, int]) -> None:
        """Forget a streak, and its rank's waits once none of its streaks in the group is left."""
        s = self._streaks.pop(key)
        if not any(k[0] == key[0] and o.rank == s.rank for k, o in self._streaks.items()):
            self._waits.pop((key[0], s.rank), None)

    def _check_uniform(self, rows: dict[str, np.ndarray], sizes: np.ndarray,
                       starts: np.ndarray, counts: np.ndarray) -> None:
        """Note matched instances whose ranks disagree on op, dtype or size."""
        head = np.repeat(starts, counts)
        differs = (rows["op"] != rows["op"][head]) | (rows["dtype"] != rows["dtype"][head])
        differs |= _sized(rows["op"]) & (sizes != sizes[head])
        bad = np.logical_or.reduceat(differs, starts)
        now, wall = self.model.clock(), self.wall_ns()
        for i in np.flatnonzero(bad).tolist():
            sl = slice(starts[i], starts[i] + counts[i])
            gkey, seq = int(rows["gkey"][starts[i]]), int(rows["seq"][starts[i]])
            entries = {r: _Entry(r, protocol.OPS[o], sz, _dtype(d), 0.0, False, False)
                       for r, o, sz, d in zip(rows["rank"][sl].tolist(), rows["op"][sl].tolist(),
                                              sizes[sl].tolist(), rows["dtype"][sl].tolist())}
            f = self._mismatch_finding(gkey, seq, entries, now, wall)
            if f is not None:
                self._mismatched[(gkey, seq)] = (f, now + MISMATCH_HOLD_S)

    def _transfers(self, recv: dict[str, np.ndarray], send: dict[str, np.ndarray]) -> None:
        ready = np.maximum(recv["t_start"], send["t_start"])
        took = (np.maximum(recv["t_end"], send["t_end"]) - ready).tolist()
        for src, dst, op, size, seq, t in zip(send["rank"].tolist(), recv["rank"].tolist(),
                                              send["op"].tolist(), send["bytes_in"].tolist(),
                                              send["seq"].tolist(), took):
            if (protocol.OPS[op], size) not in self._pairs:
                _make_room(self._pairs)
            by_pair = self._pairs.setdefault((protocol.OPS[op], size), {})
            window = by_pair.get((src, dst))
            if window is None:
                window = by_pair[(src, dst)] = collections.deque(maxlen=SLOW_WINDOW)
            window.append(t)
            self._pair_seq[(src, dst)] = seq
            for key in (("hang-p2p", src, dst, seq, True), ("hang-p2p", src, dst, seq, False)):
                if key in self._active:  # it completed: resolved, not unresolved with its job
                    self._completed.add(key)

    # ---- detectors ---------------------------------------------------------------------------
    def _straggling(self, now: float, wall: int) -> list[Finding]:
        named: dict[tuple[int, int], tuple[str, _Streak]] = {}  # (group, rank) -> longest
        for (gkey, op, _), s in self._streaks.items():
            late = self.model.ranks.get(s.rank)
            if s.late < STRAGGLER_AFTER or (late is not None and late.job
                                            and late.job != self.model.job_of(gkey)):
                continue  # not yet named, or that rank is now another job's process
            best = named.get((gkey, s.rank))
            if best is None or s.late > best[1].late:
                named[(gkey, s.rank)] = (op, s)
        out = []
        for (gkey, _), (op, s) in named.items():
            group = self.model.groups[gkey][1]
            waits = self._waits.get((gkey, s.rank))
            avg = s.lateness_ns / s.late / 1e6
            waited = sum(waits.total_ns.values()) / 1e9 if waits else 0.0
            each = waited / max(len(group) - 1, 1)  # they wait at once: the sum is no wall time
            out.append(Finding(
                "straggler", (s.rank,), group, s.seq,
                f"rank {s.rank} arrived last at {op} in group {_group(group)} {s.late} times "
                f"in a row, on average {avg:.0f} ms after the others, who waited {each:.2f} s "
                f"each for it in all ({waited:.2f} s of rank time)",
                f"rank {s.rank} chegou por último em {s.late} instâncias seguidas de {op} no "
                f"grupo {_group(group)}, em média {avg:.0f} ms depois dos outros, que "
                f"esperaram por ele {each:.2f} s cada um no total ({waited:.2f} s de tempo de "
                "rank somados)",
                ("straggler", gkey, s.rank), now, wall,
                links=tuple((r, s.rank) for r in group if r != s.rank)))
        return out

    def _age(self, rank: int, op_id: int, now: float, seen: float | None = None) -> float:
        """Seconds since a rank entered an op, on the viewer's clock (see the module doc)."""
        key = (rank, op_id)
        self._touched.add(key)
        first = self._seen.setdefault(key, now if seen is None else seen)
        return now - first + ANNOUNCE_S

    def _unmatched(self, now: float) -> dict[tuple[int, int], dict[int, _Entry]]:
        """Per (group, seq): each rank's pending or in-flight collective record, for the
        instances someone waits in, failed in, or disagrees on."""
        by_key: dict[tuple[int, int], dict[int, _Entry]] = {}
        for f in self.model.inflight.values():
            if f.op not in protocol.P2P and f.gkey >= 0:
                by_key.setdefault((f.gkey, f.seq), {})[f.rank] = _Entry(
                    f.rank, f.op, f.size, f.dtype, self._age(f.rank, f.op_id, now, f.seen),
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
        sig_s, size_s = sig[order], np.where(_sized(rows["op"]), sizes, -1)[order]
        head = np.repeat(starts, np.diff(np.r_[starts, len(k)]))
        varied = np.logical_or.reduceat((sig_s != sig_s[head]) | (size_s != size_s[head]), starts)
        wanted = set(k[starts][varied].tolist()) | set(key[failed].tolist())
        wanted |= {g << 40 | s for g, s in by_key}
        pick = np.flatnonzero(np.isin(key, np.fromiter(wanted, np.int64, len(wanted))))
        for i in pick.tolist():
            gk, seq, r = int(rows["gkey"][i]), int(rows["seq"][i]), int(rows["rank"][i])
            by_key.setdefault((gk, seq), {}).setdefault(r, _Entry(
                r, protocol.OPS[rows["op"][i]], int(sizes[i]), _dtype(int(rows["dtype"][i])),
                self._age(r, int(rows["id"][i]), now), False, bool(failed[i]),
                int(rows["t_end"][i] - rows["t_start"][i]) / 1e9,
                self.model.site_of(int(rows["site"][i]))))
        return by_key

    def _hangs(self, now: float, wall: int, unmatched: dict[tuple[int, int], dict[int, _Entry]],
               lost: set[int]) -> list[Finding]:
        """``lost``: ranks found lost in this update."""
        out: list[Finding] = []
        waits: dict[int, set[int]] = {}  # rank -> ranks it waits on, for deadlock cycles
        where: dict[int, _Wait] = {}  # rank -> the op it waits in, for a deadlock's words
        for (gkey, seq), entries in unmatched.items():
            group, job = self.model.groups[gkey][1], self.model.job_of(gkey)
            # a rank never heard from is not missing: its reports are (a viewer started late,
            # a first connection still under way); only ranks whose reports are current are,
            # and only in their own job (a rank number of a later job is another process)
            missing = tuple(r for r in group if r not in entries and r in self.model.ranks
                            and self.model.ranks[r].job in (0, job))
            if not missing or not any(e.waiting or e.failed for e in entries.values()):
                continue
            inside = tuple(sorted(entries))
            # a rank that said goodbye inside it (stopped there) waits no more: with others
            # failed in it, it is a failed op
            failing = any(e.failed for e in entries.values())
            live = any(e.waiting and not (failing and self._exited(r)) for r, e in entries.items())
            gone = all(self._gone(m, lost) for m in missing)
            # < now: they all said goodbye, or their whole job is gone
            end = self._job_end(job, now, lost)
            until = min(self._until(inside + missing, now), end)
            age = max(0.0, max(e.age for e in entries.values()) - (now - until))
            # a new hang once a rank in it was heard from after it waited that long: one that
            # died waiting, or a job that is gone (nobody is left to wait), makes none
            known = max((e.age - (now - self._heard(r, job, now)) for r, e in entries.items()
                         if e.waiting), default=0.0)
            if ("hang", gkey, seq) not in self._active and (
                    known < HANG_AFTER_S or end < now if live else
                    age < HANG_AFTER_S and not gone):
                continue
            op = _majority(entries)[0]
            for r, e in entries.items():
                if e.waiting or e.failed:
                    waits.setdefault(r, set()).update(missing)
                    where.setdefault(r, _Wait(e.op, -1, seq, None if e.waiting else e.took))
            why_en, why_pt = _why(missing, [self._doing(m, wall, lost) for m in missing])
            links = tuple((r, m) for r in inside for m in missing)
            if not live:
                out.append(self._failed(gkey, seq, op, group, entries, missing, why_en,
                                        why_pt, now, wall, links))
                continue
            ended = until < now
            # what the missing did while it hung; once one is in no op any more (the timeout
            # ended its side first), what was found before stays
            if self._in_ops(missing) or ("hang", gkey, seq) not in self._hung:
                self._hung[("hang", gkey, seq)] = _why(
                    missing, [self._doing(m, wall, lost, timed=False) for m in missing])
            at_en, at_pt = _at(entries, inside)
            out.append(Finding(
                "hang", missing, group, seq,
                f"{op} #{seq}{at_en} in group {_group(group)} "
                + (f"hung for {age:.1f} s, until the ranks exited" if ended else
                   f"hangs for {age:.1f} s")
                + f": {_ranks(inside)} inside, {_ranks(missing)} missing ({why_en})",
                f"{op} #{seq}{at_pt} no grupo {_group(group)} "
                + (f"ficou travado {age:.1f} s, até os ranks saírem" if ended else
                   f"travado há {age:.1f} s")
                + f": {_ranks(inside, 'pt')} dentro, {_ranks(missing, 'pt')} faltando "
                f"({why_pt})",
                ("hang", gkey, seq), now, wall, links=links, op=op))
        out += self._p2p_hangs(now, wall, waits, where, lost)
        out += self._deadlocks(now, wall, waits, where, lost)
        return out

    def _failed(self, gkey: int, seq: int, op: str, group: tuple[int, ...],
                entries: dict[int, _Entry], missing: tuple[int, ...], why_en: str,
                why_pt: str, now: float, wall: int, links: tuple) -> Finding:
        """A collective that no rank waits in any more, some failed in, others sent no record
        of: they never came, or died inside it before their record left (the emitter sends
        every 50 ms), so the words claim neither."""
        failed = tuple(sorted(r for r, e in entries.items() if e.failed))
        took = max(entries[r].took for r in failed)
        one, none = len(failed) == 1, len(missing) == 1
        at_en, at_pt = _at(entries, failed)
        key = ("hang", gkey, seq)
        if key in self._hung:  # the timeout ended a hang: say what it found, and its cause
            (why_en, why_pt), (cause_en, cause_pt) = self._hung[key], self._cause(failed, missing)
            return Finding(
                "failed", missing, group, seq,
                f"{op} #{seq}{at_en} in group {_group(group)} hung until a timeout ended it after "
                f"{_took(took)}: {_ranks(failed)} failed in it waiting for {_ranks(missing)} "
                f"({why_en}){cause_en}",
                f"{op} #{seq}{at_pt} no grupo {_group(group)} ficou travado até um timeout "
                "encerrá-lo "
                f"após {_took(took)}: {_ranks(failed, 'pt')} {'falhou' if one else 'falharam'} "
                f"nele esperando {'pelo' if none else 'pelos'} "
                f"{_ranks(missing, 'pt').removeprefix('os ')} ({why_pt}){cause_pt}",
                key, now, wall, links=links, op=op, hung=True)
        return Finding(
            "failed", missing, group, seq,
            f"{_ranks(failed)} failed in {op} #{seq}{at_en} in group {_group(group)} after "
            f"{_took(took)}: no record from {_ranks(missing)} for #{seq} ({why_en})",
            f"{_ranks(failed, 'pt')} {'falhou' if one else 'falharam'} em {op} #{seq}{at_pt} no "
            f"grupo {_group(group)} após {_took(took)}: nenhum registro "
            f"{'do' if none else 'dos'} {_ranks(missing, 'pt').removeprefix('os ')} "
            f"para o #{seq} ({why_pt})",
            key, now, wall, links=links, op=op)

    def _cause(self, waiting: Iterable[int], missing: Iterable[int]) -> tuple[str, str]:
        """The deadlock that ``waiting`` and ``missing`` were in, as a clause to append, in
        (en, pt); empty if none was found."""
        waiting, missing = set(waiting), set(missing)
        for key in self._active:
            if key[0] == "deadlock" and waiting & set(key[1]) and missing & set(key[1]):
                ranks = ",".join(map(str, sorted(key[1])))  # a cycle: two ranks at least
                return (f"; cause: the deadlock of ranks {ranks}",
                        f"; causa: o deadlock (espera circular) dos ranks {ranks}")
        return "", ""

    def _in_ops(self, ranks: Iterable[int]) -> bool:
        """Whether each of ``ranks`` is inside an op now."""
        busy = {f.rank for f in self.model.inflight.values()}
        return all(r in busy for r in ranks)

    def _exited(self, rank: int) -> bool:
        s = self.model.ranks.get(rank)
        return s is not None and s.exited

    def _gone(self, rank: int, lost: Container[int]) -> bool:
        """Whether ``rank`` will not come: it said goodbye, or it is found lost (before, or
        in ``lost``: this update)."""
        return self._exited(rank) or rank in lost or ("lost_rank", rank) in self._active

    def _until(self, ranks: Iterable[int], now: float) -> float:
        """``now``, or when the last of ``ranks`` left if all of them said goodbye: how long
        a wait among them lasted stops counting there."""
        states = [self.model.ranks[r] for r in ranks if r in self.model.ranks]
        if not states or not all(s.exited for s in states):
            return now
        return min(now, max(s.last_seen for s in states))

    def _heard(self, rank: int, job: int, now: float) -> float:
        """When ``rank`` of ``job`` was last heard from (``now`` if it never was): a wait is
        known to go on as long as its rank is heard from."""
        members = self.model.jobs[job - 1] if 0 < job <= len(self.model.jobs) else {}
        s = members.get(rank) or self.model.ranks.get(rank)
        return now if s is None else min(now, s.last_seen)

    def _job_end(self, job: int, now: float, lost: Container[int] = ()) -> float:
        """``now``, or, once every rank of ``job`` is gone (said goodbye, was replaced, or was
        found lost: before, or in ``lost``), when the last of them was heard from: how long a
        wait or a silence in a job that ended lasted stops counting there."""
        members = self.model.jobs[job - 1] if 0 < job <= len(self.model.jobs) else {}
        if not members or not all(s.exited or s.superseded or r in lost
                                   or ("lost_rank", r) in self._active
                                   for r, s in members.items()):
            return now
        return min(now, max(s.last_seen for s in members.values()))

    def _p2p_hangs(self, now: float, wall: int, waits: dict[int, set[int]],
                   where: dict[int, _Wait], lost: set[int]) -> list[Finding]:
        """Sends and receives that wait, or failed waiting, for a counterpart with no record."""
        rows = self.model.pending()[1]
        failed = np.flatnonzero((rows["flags"] & protocol.FLAG_FAILED) > 0)
        job_of = self.model.job_of
        # (rank, op, peer, seq, seconds waited, seconds in it before failing or None if live,
        # job)
        waiters = [(f.rank, f.op, f.peer, f.seq, self._age(f.rank, f.op_id, now, f.seen), None,
                    job_of(f.gkey)) for f in self.model.inflight.values() if f.op in protocol.P2P]
        waiters += [(r, protocol.OPS[op], peer, seq, self._age(r, i, now), (t1 - t0) / 1e9,
                     job_of(g))
                    for r, op, peer, seq, i, t0, t1, g in zip(*(rows[k][failed].tolist() for k in (
                        "rank", "op", "peer", "seq", "id", "t_start", "t_end", "gkey")))]
        ends = {job: self._job_end(job, now, lost) for job in {w[6] for w in waiters}}
        known = [secs - (now - self._heard(r, job, now)) >= HANG_AFTER_S and ends[job] >= now
                 for r, _, _, _, secs, _, job in waiters]
        waiters = [(r, op, peer, seq, max(0.0, secs - (now - min(self._until((r, peer), now),
                                                                 ends[job]))), took, job)
                   for r, op, peer, seq, secs, took, job in waiters]
        # a failed one is named at once if its peer has exited or is lost: that peer will not
        # come; a live one as a collective's (see _hangs)
        old = [w for w, fresh in zip(waiters, known) if w[2] >= 0 and (
            _p2p_key(w) in self._active or fresh if w[5] is None
            else w[4] >= HANG_AFTER_S or self._gone(w[2], lost))]
        if not old:
            return []
        posted = set(zip(rows["rank"].tolist(), _is_send(rows["op"]).tolist(),
                         rows["peer"].tolist(), rows["seq"].tolist(),
                         map(job_of, rows["gkey"].tolist())))
        posted |= {(r, op in protocol.SENDS, peer, seq, job)
                   for r, op, peer, seq, _, _, job in waiters}
        out = []
        for rank, op, peer, seq, secs, took, job in old:
            sending = op in protocol.SENDS
            if (peer, not sending, rank, seq, job) in posted:
                continue  # the other side is there: data is moving, however slowly
            src, dst = (rank, peer) if sending else (peer, rank)
            waits.setdefault(rank, set()).add(peer)
            where.setdefault(rank, _Wait(op, peer, seq, took))
            key = _p2p_key((rank, op, peer, seq))
            hung = self._hung.get(key) if took is not None else None
            # the timeout ended a hang: what it found, not what the peer did since (exited)
            en, pt = hung or self._doing(peer, wall, lost)
            cause_en = cause_pt = ""
            ended = min(self._until((rank, peer), now), ends[job]) < now
            if hung is not None:
                wait_en, wait_pt = f"hung until a timeout ended it after {_took(took)} waiting", \
                    f"ficou travado até um timeout encerrá-lo após {_took(took)} esperando"
                cause_en, cause_pt = self._cause((rank,), (peer,))
            elif took is not None:
                wait_en, wait_pt = f"failed after {_took(took)} waiting", \
                    f"falhou após {_took(took)} esperando"
            elif ended:
                wait_en, wait_pt = f"waited {secs:.1f} s, until the ranks exited,", \
                    f"esperou {secs:.1f} s, até os ranks saírem,"
            else:
                wait_en, wait_pt = f"waits {secs:.1f} s", f"espera há {secs:.1f} s"
            what_en = (f"send {src} -> {dst} #{seq} {wait_en} for its recv"
                       if sending else f"recv at {dst} from {src} #{seq} {wait_en} for its send")
            what_pt = (f"send {src} -> {dst} #{seq} {wait_pt} pelo recv"
                       if sending else f"recv em {dst} de {src} #{seq} {wait_pt} pelo send")
            if took is None and (self._in_ops((peer,)) or key not in self._hung):
                self._hung[key] = self._doing(peer, wall, lost, timed=False)
            out.append(Finding("hang" if took is None else "failed", (peer,), (src, dst), seq,
                               f"{what_en}: no record of it from rank {peer} ({en}){cause_en}",
                               f"{what_pt}: nenhum registro dele vindo do rank {peer} ({pt})"
                               f"{cause_pt}", key, now, wall, links=((src, dst),),
                               op="recv" if sending else "send", hung=hung is not None))
        return out

    def _deadlocks(self, now: float, wall: int, waits: dict[int, set[int]],
                   where: dict[int, _Wait], lost: set[int]) -> list[Finding]:
        """Cycles of waits, with the ranks that wait on them. Once the timeout has failed
        every wait of a cycle, it is a failed finding, as its hangs are; once its ranks are
        gone, it says it lasted until then."""
        out = []
        for cycle in dict.fromkeys(_cycles(waits)):
            behind = _behind(waits, cycle)
            took = [where[r].took for r in cycle]
            over = None not in took
            job = self.model.ranks[cycle[0]].job if cycle[0] in self.model.ranks else 0
            ended = min(self._until(cycle, now), self._job_end(job, now, lost)) < now
            en, pt = _deadlock_words(cycle, behind, where, past=over or ended)
            if over:
                head_en = f"deadlock, until a timeout ended it after {max(took):.1f} s"
                head_pt = ("deadlock (espera circular), até um timeout encerrá-lo após "
                           f"{max(took):.1f} s")
            elif ended:
                head_en, head_pt = ("deadlock, until the ranks exited",
                                    "deadlock (espera circular), até os ranks saírem")
            else:
                head_en, head_pt = "deadlock", "deadlock (espera circular)"
            links = tuple(zip(cycle, cycle[1:] + cycle[:1])) + tuple(
                (r, q) for r, on in behind.items() for q in sorted(on))
            out.append(Finding("failed" if over else "hang", cycle + tuple(sorted(behind)),
                               None, None, f"{head_en}: {en}", f"{head_pt}: {pt}",
                               ("deadlock", cycle), now, wall, links=links, hung=over))
        return out

    def _lost(self, now: float, wall: int) -> list[Finding]:
        out = []
        latest = max((s.last_seen for s in self.model.ranks.values()), default=0.0)
        for r, s in sorted(self.model.ranks.items()):
            silent = now - s.last_seen
            mates = self.model.jobs[s.job - 1] if s.job else {}
            left = sorted(q for q, o in mates.items() if o is not s and o.exited)
            if s.exited or silent <= LOST_AFTER_S or (latest - s.last_seen <= LOST_AFTER_S
                                                      and not left):
                self._quiet.pop(r, None)
                self._left_silent.pop(r, None)
                continue
            if now - self._quiet.setdefault(r, now) < LOST_CONFIRM_S:
                continue
            last_en, last_pt = _last_record(s)
            if left and latest - s.last_seen <= LOST_AFTER_S:  # its job ended around it
                silent = self._left_silent.setdefault(r, silent)  # as found: the job is over
                out.append(Finding(
                    "lost_rank", (r,), None, None,
                    f"rank {r} ended without saying goodbye (it crashed or was killed): "
                    f"nothing from it for {silent:.1f} s, and {_ranks(left)} said goodbye"
                    f"{last_en}",
                    f"rank {r} terminou sem se despedir (caiu ou foi morto): nada dele havia "
                    f"{silent:.1f} s, e {_ranks(left, 'pt')} "
                    f"{'já se despediu' if len(left) == 1 else 'já se despediram'}{last_pt}",
                    ("lost_rank", r), now, wall))
                continue
            if self._job_end(s.job, now, (r,)) < now:  # its job is over: the silence as found
                silent = self._left_silent.setdefault(r, silent)
            stuck = sorted((f for f in self.model.inflight.values()
                            if f.rank != r and not self._exited(f.rank)), key=lambda f: f.seen)
            by_rank: dict[int, Any] = {}
            for f in stuck:
                by_rank.setdefault(f.rank, f)
            shared = next((f for f in by_rank.values() if r in f.group or f.peer == r), None)
            tail_en = tail_pt = ""
            if by_rank:
                tail_en = "; " + ", ".join(f"rank {q} is stuck in {_op(f)}"
                                           for q, f in by_rank.items())
                tail_pt = "; " + ", ".join(f"rank {q} está preso em {_op(f, 'pt')}"
                                           for q, f in by_rank.items())
            out.append(Finding(
                "lost_rank", (r,), shared.group if shared else None,
                shared.seq if shared else None,
                f"rank {r} is lost: nothing from it for {silent:.1f} s (process died or "
                f"network broke){last_en}{tail_en}",
                f"rank {r} perdido: nada dele há {silent:.1f} s (o processo morreu ou a rede "
                f"caiu){last_pt}{tail_pt}",
                ("lost_rank", r), now, wall,
                links=tuple((q, r) for q in by_rank)))
        return out

    def _replaced(self, now: float, wall: int) -> list[Finding]:
        """Incarnations replaced by another process of the same rank number (a new job)
        without a goodbye and not found lost before: each named once, then forgotten."""
        model = self.model
        new = min(model.replacements - self._replacements, len(model.replaced))
        self._replacements = model.replacements
        out = []
        for s in list(model.replaced)[len(model.replaced) - new:]:
            if s.exited or ("lost_rank", s.rank) in self._active:
                continue
            f = Finding("lost_rank", (s.rank,), None, None,
                        f"rank {s.rank} of job {s.job} (pid {s.pid}) ended without saying "
                        "goodbye (it crashed or was killed)",
                        f"rank {s.rank} do job {s.job} (pid {s.pid}) terminou sem se despedir "
                        "(caiu ou foi morto)",
                        ("lost_rank", s.rank, s.job, s.pid), now, wall)
            out.append(f)
        return out

    def _mismatches(self, now: float, wall: int,
                    unmatched: dict[tuple[int, int], dict[int, _Entry]]) -> list[Finding]:
        out = []
        for (gkey, seq), entries in unmatched.items():
            if (len(entries) < len(self.model.groups[gkey][1])
                    and max(e.age for e in entries.values()) < MISMATCH_WAIT_S):
                continue  # the others' records are on their way: name every side at once
            f = self._mismatch_finding(gkey, seq, entries, now, wall)
            if f is not None:
                out.append(f)
        for key, (f, until) in list(self._mismatched.items()):
            if now > until:
                del self._mismatched[key]
            else:
                out.append(f)
        return out

    def _mismatch_finding(self, gkey: int, seq: int, entries: dict[int, _Entry], now: float,
                          wall: int) -> Finding | None:
        sig = {r: (e.op, e.dtype, e.size if e.op in _SIZED else None) for r, e in entries.items()}
        if len(set(sig.values())) < 2:
            return None
        common = _majority(entries)
        odd = tuple(sorted(r for r, s in sig.items() if s != common))
        same = tuple(sorted(r for r, s in sig.items() if s == common))
        group = self.model.groups[gkey][1]
        desc = "; ".join(f"{_ranks((r,))} called {_call(entries[r])}{_at(entries, (r,))[0]}"
                         for r in odd)
        desc_pt = "; ".join(f"{_ranks((r,), 'pt')} chamou {_call(entries[r])}"
                            f"{_at(entries, (r,))[1]}" for r in odd)
        base_at, base_at_pt = _at(entries, same)
        base = _call(entries[same[0]])
        # named before every rank's record is in (MISMATCH_WAIT_S): say who is not, so that the
        # line, recorded once, is not read as the whole group
        out = [r for r in group if r not in entries]
        late = late_pt = ""
        if out:
            late = f" ({_ranks(out)} {'has' if len(out) == 1 else 'have'} not reached it yet)"
            late_pt = (f" ({_ranks(out, 'pt')} ainda não "
                       f"{'chegou' if len(out) == 1 else 'chegaram'} a ele)")
        return Finding(
            "mismatch", odd, group, seq,
            f"ranks disagree at #{seq} in group {_group(group)}: {desc}, while {_ranks(same)} "
            f"called {base}{base_at}{late}",
            f"os ranks divergem no #{seq} do grupo {_group(group)}: {desc_pt}, enquanto "
            f"{_ranks(same, 'pt')} {'chamou' if len(same) == 1 else 'chamaram'} {base}"
            f"{base_at_pt}{late_pt}",
            ("mismatch", gkey, seq), now, wall)

    def _slow(self, now: float, wall: int) -> list[Finding]:
        """Slow pairs and groups that stay slow for SLOW_HOLD_S: a loaded machine makes a
        pair look slow for a moment, a slow link stays slow."""
        found = self._slow_pairs(now, wall) + self._slow_groups(now, wall)
        since = {f.key: self._slow_since.get(f.key, now) for f in found}
        self._slow_since = since
        return [f for f in found if now - since[f.key] >= SLOW_HOLD_S or f.key in self._active]

    def _slow_pairs(self, now: float, wall: int) -> list[Finding]:
        out = []
        for (op, size), pairs in self._pairs.items():
            for pair, (med, others) in _outliers(pairs).items():
                src, dst = pair
                out.append(Finding(
                    "slow", pair, pair, self._pair_seq.get(pair),
                    f"{op} {src} -> {dst} of {size} B takes {med / 1e6:.1f} ms (median), "
                    f"{med / max(others, 1):.0f}x the other pairs ({others / 1e6:.1f} ms)",
                    f"{op} {src} -> {dst} de {size} B leva {med / 1e6:.1f} ms (mediana), "
                    f"{med / max(others, 1):.0f}x os outros pares ({others / 1e6:.1f} ms)",
                    ("slow", op, size, pair), now, wall, links=(pair,)))
        return out

    def _slow_groups(self, now: float, wall: int) -> list[Finding]:
        """Groups of the same size whose transfers (after the last arrival) of the same op and
        size take far longer than the other groups': a slow link inside that group."""
        kinds: dict[tuple[str, int, int], dict[int, collections.deque]] = {}
        for (gkey, op, size), window in self._durations.items():
            n = len(self.model.groups[gkey][1])
            kinds.setdefault((op, size, n), {})[gkey] = window
        out = []
        for (op, size, _), windows in kinds.items():
            for gkey, (med, others) in _outliers(windows).items():
                group = self.model.groups[gkey][1]
                out.append(Finding(
                    "slow", group, group, None,
                    f"{op} of {size} B in group {_group(group)} takes {med / 1e6:.1f} ms "
                    f"(median, waiting excluded), {med / max(others, 1):.0f}x the other "
                    f"groups of {len(group)} ({others / 1e6:.1f} ms)",
                    f"{op} de {size} B no grupo {_group(group)} leva {med / 1e6:.1f} ms "
                    f"(mediana, sem a espera), {med / max(others, 1):.0f}x os outros grupos "
                    f"de {len(group)} ({others / 1e6:.1f} ms)",
                    ("slow-group", op, size, gkey), now, wall,
                    links=tuple(zip(group, group[1:] + group[:1]))))
        return out

    # ---- helpers ---------------------------------------------------------------------------
    def _doing(self, rank: int, wall: int, lost: Container[int] = (),
               timed: bool = True) -> tuple[str, str]:
        """What a rank is doing instead, in (en, pt). ``lost``: ranks found lost in this
        update; ``timed``: with how long (not in words kept once the wait is over)."""
        s = self.model.ranks.get(rank)
        if s is None:
            return "never reported", "nunca se reportou"
        if s.exited:
            return "exited", "já saiu"
        last_en, last_pt = _last_record(s)
        if rank in lost or ("lost_rank", rank) in self._active:
            return f"lost, no goodbye{last_en}", f"perdido, sem se despedir{last_pt}"
        now = self.model.clock()
        silent = self._job_end(s.job, now) - s.last_seen  # stops where its job ended
        if silent > LOST_AFTER_S:  # no goodbye: what it did last is not known
            return (f"silent for {silent:.1f} s, no goodbye: it may have crashed inside the "
                    f"call{last_en}", f"em silêncio há {silent:.1f} s, sem se despedir: pode "
                    f"ter caído dentro da chamada{last_pt}")
        mine = [f for f in self.model.inflight.values() if f.rank == rank]
        if mine:
            f = min(mine, key=lambda f: f.seen)
            secs = self._age(f.rank, f.op_id, self.model.clock(), f.seen)
            if not timed:
                return f"in {_op(f)}", f"em {_op(f, 'pt')}"
            return (f"in {_op(f)} for {secs:.1f} s", f"em {_op(f, 'pt')} há {secs:.1f} s")
        if s.last_op is None:
            return "no op yet", "nenhuma operação ainda"
        if not timed:
            return (f"idle since its last op, {s.last_op}",
                    f"ocioso desde a última operação, {s.last_op}")
        secs = (wall - s.last_end_ns) / 1e9
        return (f"idle since its last op, {s.last_op}, {secs:.1f} s ago",
                f"ocioso desde a última operação, {s.last_op}, há {secs:.1f} s")


def _p2p_key(waiter: tuple) -> tuple:
    """The finding key of a send or receive that waits: (rank, op, peer, seq, ...)."""
    rank, op, peer, seq = waiter[:4]
    sending = op in protocol.SENDS
    src, dst = (rank, peer) if sending else (peer, rank)
    return ("hang-p2p", src, dst, seq, sending)


def _why(ranks: Iterable[int], doing: list[tuple[str, str]]) -> tuple[str, str]:
    """What each of ``ranks`` does, ``3: in recv from 0 #1; 5: exited``, in (en, pt)."""
    ranks = list(ranks)
    return ("; ".join(f"{r}: {en}" for r, (en, _) in zip(ranks, doing)),
            "; ".join(f"{r}: {pt}" for r, (_, pt) in zip(ranks, doing)))


def _make_room(table: dict) -> None:
    """Forget the oldest key of a full table: sizes vary without bound (object collectives)."""
    if len(table) >= KEYS_MAX:
        del table[next(iter(table))]


def _is_send(ops: np.ndarray) -> np.ndarray:
    return np.isin(ops, [protocol.OP_CODE[o] for o in protocol.SENDS])


def _sized(ops: np.ndarray) -> np.ndarray:
    return np.isin(ops, [protocol.OP_CODE[o] for o in _SIZED])


def _outliers(windows: dict) -> dict:
    """The keys whose samples are consistently above all the others' (see the module doc),
    each with (its median, the others' median); at least 3 keys with enough samples."""
    full = {k: np.fromiter(w, np.float64) for k, w in windows.items() if len(w) >= SLOW_SAMPLES}
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


def _late_threshold(durations: Iterable[int]) -> float:
    arr = np.fromiter(durations, np.float64)
    p50 = float(np.median(arr))
    jitter = float(np.percentile(arr, 90)) - p50 if len(arr) >= 5 else 0.0
    return max(MIN_LATE_NS, LATE_DURATION_FACTOR * p50, LATE_JITTER_FACTOR * jitter)


def _resolved(old: Finding, now: float, wall: int, job: int | None = None) -> Finding:
    """The end of a finding: resolved, or, with ``job``, ended because that job ended."""
    took = now - old.since
    if job is None:
        en, pt = f"resolved after {took:.1f} s", f"resolvido após {took:.1f} s"
    else:
        en, pt = (f"ended with job {job}, unresolved after {took:.1f} s",
                  f"terminou com o job {job}, sem solução após {took:.1f} s")
    return Finding("resolved", old.ranks, old.group, old.seq, f"{en}: {old.message}",
                   f"{pt}: {old.message_pt}", ("resolved",) + old.key, now, wall, old.links,
                   old.type, round(took, 3), unresolved=job is not None)


def _majority(entries: dict[int, _Entry]) -> tuple:
    """The most common (op, dtype, size) signature; ties go to the lowest rank's."""
    sigs = [(e.op, e.dtype, e.size if e.op in _SIZED else None)
            for _, e in sorted(entries.items())]
    counts = collections.Counter(sigs)
    return max(sigs, key=lambda s: (counts[s], -sigs.index(s)))


def _behind(waits: dict[int, set[int]], cycle: tuple[int, ...]) -> dict[int, set[int]]:
    """The ranks outside ``cycle`` that wait on it, directly or through one another, each with
    the ranks it waits on among the cycle's and theirs."""
    reached = set(cycle)
    grew = True
    while grew:
        new = {r for r, on in waits.items() if r not in reached and on & reached}
        reached |= new
        grew = bool(new)
    return {r: waits[r] & reached for r in sorted(reached - set(cycle))}


def _deadlock_words(cycle: tuple[int, ...], behind: dict[int, set[int]],
                    where: dict[int, _Wait], past: bool) -> tuple[str, str]:
    """``rank 0 (all_reduce #3) waits on 3 (recv from 0 #1), which waits on 0; ranks 1,2
    (all_reduce #3) wait on 3 too``, in (en, pt); ``past``: in the past tense."""
    def at(r: int, lang: str) -> str:
        w = where[r]
        return f"{r} ({_call_phrase(w.op, w.peer, w.seq, lang)})"

    verb_en, verb_pt = ("waited", "esperava") if past else ("waits", "espera")
    en = f"rank {at(cycle[0], 'en')} {verb_en} on " + "".join(
        f"{at(r, 'en')}, which {verb_en} on " for r in cycle[1:]) + str(cycle[0])
    pt = f"rank {at(cycle[0], 'pt')} {verb_pt} por " + "".join(
        f"{at(r, 'pt')}, que {verb_pt} por " for r in cycle[1:]) + str(cycle[0])
    alike: dict[tuple, list[int]] = {}  # the waiters in the same op on the same ranks
    for r, on in behind.items():
        alike.setdefault((tuple(sorted(on)), where[r][:3]), []).append(r)
    for (on, _), ranks in alike.items():
        targets, many = ",".join(map(str, on)), len(ranks) > 1
        plural_en = "waited" if past else ("wait" if many else "waits")
        plural_pt = verb_pt + ("m" if many else "")
        en += f"; {_ranks(ranks)} ({_call_phrase(*where[ranks[0]][:3])}) {plural_en} on " \
              f"{targets} too"
        pt += f"; {_ranks(ranks, 'pt')} ({_call_phrase(*where[ranks[0]][:3], 'pt')}) também " \
              f"{plural_pt} por {targets}"
    return en, pt


def _cycles(waits: dict[int, set[int]]) -> list[tuple[int, ...]]:
    """Simple cycles of the wait-for graph, each rotated to start at its lowest rank."""
    found = []

    def walk(path: list[int]) -> None:
        for nxt in sorted(waits.get(path[-1], ())):
            if nxt == path[0]:
                found.append(tuple(path))
            elif nxt > path[0] and nxt not in path:
                walk(path + [nxt])

    for start in sorted(waits):
        walk([start])
    return found


def _dtype(code: int) -> str | None:
    return None if code == protocol.NO_CODE else protocol.DTYPES[code]


def _call(e: _Entry) -> str:
    dtype = f" {e.dtype}" if e.dtype else ""
    return f"{e.op} ({e.size} B{dtype})"


def _op(f: Any, lang: str = "en") -> str:
    """An in-flight op as a phrase (see ``_call_phrase``)."""
    return _call_phrase(f.op, f.peer, f.seq, lang)


def _call_phrase(op: str, peer: int, seq: int, lang: str = "en") -> str:
    """An op as a phrase: `all_reduce #3`, `recv from 0 #2`, `send to 1 #2` (`de`, `para`)."""
    if op in protocol.SENDS:
        return f"{op} {'to' if lang == 'en' else 'para'} {peer} #{seq}"
    if op in protocol.RECVS:
        return f"{op} {'from' if lang == 'en' else 'de'} {peer} #{seq}"
    return f"{op} #{seq}"


def _last_record(s: Any) -> tuple[str, str]:
    """A rank's last completed op, as a clause to append, in (en, pt); empty if it had none."""
    if s is None or s.last_op is None:
        return "", ""
    call = (_call_phrase(s.last_op, s.last_peer, s.last_seq),
            _call_phrase(s.last_op, s.last_peer, s.last_seq, "pt"))
    return f"; its last record: {call[0]}", f"; seu último registro: {call[1]}"


def _at(entries: dict[int, _Entry], ranks: Iterable[int]) -> tuple[str, str]:
    """Where ``ranks`` made their call, as a clause (en, pt): " at train.py:32", the file's
    name and line the source panel shows; empty unless they all made it at one known line."""
    sites = {entries[r].site for r in ranks}
    if len(sites) != 1 or None in sites:
        return "", ""
    ((path, line),) = sites
    where = f"{path.rsplit('/', 1)[-1]}:{line}"
    return f" at {where}", f" em {where}"


def _ranks(ranks: Iterable[int], lang: str = "en") -> str:
    ranks = list(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return ("ranks " if lang == "en" else "os ranks ") + ",".join(map(str, ranks))


def _took(seconds: float) -> str:
    """How long a rank was in an op that failed: in seconds, in ms under 0.1 s (a peer that
    had exited failed it at once: "after 0.0 s")."""
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def _group(group: tuple[int, ...]) -> str:
    if len(group) > 2 and group == tuple(range(group[0], group[-1] + 1)):
        return f"{group[0]}-{group[-1]}"
    return ",".join(map(str, group)) if len(group) <= 8 else f"of {len(group)} ranks"
