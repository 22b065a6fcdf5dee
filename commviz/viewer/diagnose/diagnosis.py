"""The diagnosis of one model: runs the detectors, tells what is new and what ended.

Each condition has a stable key: a new key is reported once as a finding, a key that
disappears is reported as ``resolved`` with how long it held, so findings clear themselves
when the condition ends. A job's findings hold until its ranks' numbers come back as a later
job's processes; then they end with the job (all its ranks gone or replaced), and are
reported so, not as resolved by the job's own progress; a hang whose instance completed
meanwhile is resolved.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np

from commviz.viewer.diagnose.ending import first_end
from commviz.viewer.diagnose.finding import Finding, resolved
from commviz.viewer.diagnose.hangs import Hangs
from commviz.viewer.diagnose.lost import LostRanks
from commviz.viewer.diagnose.mismatch import Mismatches
from commviz.viewer.diagnose.slow import SLOW_SAMPLES, SlowLinks
from commviz.viewer.diagnose.stragglers import WINDOW, Lateness, Stragglers
from commviz.viewer.diagnose.watch import Watch
from commviz.viewer.diagnose.windows import Durations
from commviz.viewer.model import Model
from commviz.wire import protocol

HISTORY = 100  # findings and resolutions kept for a panel's history


class Diagnosis:
    """Watches one model; the session calls ``update()`` periodically under its lock.

    Pure like the model it watches: no Textual, no sockets, both clocks injected. The model
    calls back with the rows of every matching round (arrivals per rank, for stragglers and
    slow links) and with the in-flight records whose op ended (``Watch.landed``); ``update()``,
    run a few times a second even when no event arrives (a hang sends none), looks at what is
    still pending or in flight."""

    def __init__(self, model: Model, wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.model = model
        self.wall_ns = wall_ns
        self.watch = Watch(model, wall_ns)
        # the groups' transfer times: the stragglers' thresholds, what the slow links compare
        durations = Durations(WINDOW, SLOW_SAMPLES, model.groups)
        self.stragglers = Stragglers(self.watch, durations)
        self.hangs = Hangs(self.watch)
        self.lost = LostRanks(self.watch)
        self.mismatches = Mismatches(self.watch)
        self.slow = SlowLinks(self.watch, durations)
        self.history: collections.deque[Finding] = collections.deque(maxlen=HISTORY)
        # every finding told, by type, and every resolution, by the type of what it ended
        # (``about``): what the history forgets, for the metrics' counters
        self.reported: collections.Counter[tuple[str, str | None]] = collections.Counter()
        self._ended: dict[tuple, Finding] = {}  # found by finish(): they hold from then on
        self._jobs: dict[tuple, set[int]] = {}  # finding key -> the jobs of its ranks
        self._held: dict[tuple, dict] = {}  # first_end's: where ranks were as one ended
        model.on_collectives = self._collectives
        model.on_transfers = self._transfers
        model.on_landed = self.watch.landed

    # ---- API ------------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Findings that hold now, oldest first (their facts kept up to date)."""
        return sorted(self.watch.active.values(), key=lambda f: f.since)

    def update(self) -> list[Finding]:
        """Re-evaluate every condition; returns what is new: findings, then resolutions."""
        model, watch = self.model, self.watch
        now, wall = model.clock(), self.wall_ns()
        watch.begin()
        unmatched = watch.unmatched(now)
        current: dict[tuple, Finding] = dict(self._ended)
        # how a rank's process ended, the moment its node's harvester says: it stands for
        # the lost rank a silence would make of it a second later
        account = first_end(model, now, wall, self._held)
        if account is not None:
            current.setdefault(account.key, account)
        lost = self.lost.find(now, wall, account is not None)
        gone = {r for f in lost for r in f.ranks}
        # a lost rank before what it leaves its peers in (a hang, a failed op)
        for found in (self.stragglers.find(now, wall), lost,
                      self.hangs.find(now, wall, unmatched, gone),
                      self.mismatches.find(now, wall, unmatched), self.slow.find(now, wall)):
            for f in found:
                current.setdefault(f.key, f)
        events = self.lost.replaced(now, wall)
        for key, f in current.items():
            old = watch.active.get(key)
            if old is None or old.type != f.type:  # new, or a hang that ended in failure
                events.append(f)
                self._jobs[key] = {model.ranks[r].job for r in f.ranks if r in model.ranks}
            elif key[0] == "first_end" and old.facts != f.facts:  # more to tell: told again
                current[key] = replace(f, since=old.since)
                events.append(current[key])
            elif f.type == "failed":  # over: it says what each rank did when it was found
                current[key] = old
            else:
                current[key] = replace(f, since=old.since, t_ns=old.t_ns)
        for key, old in watch.active.items():
            if key not in current:
                jobs = self._jobs.pop(key, set())
                over = (bool(jobs) and all(map(model.job_over, jobs))
                        and key not in watch.completed)
                if over and old.type == "lost_rank":
                    continue  # said once: a lost rank of a job that is over stays lost
                events.append(resolved(old, now, wall, max(jobs) if over else None))
        watch.active = current
        watch.completed = set()
        self.hangs.keep(current)
        watch.end()
        self._tell(events)
        return events

    def finish(self, ended: Iterable[int]) -> list[Finding]:
        """The job has ended (``ended``: its ranks): how it ended, first (``ending``), where
        the harvesters said when its processes ended; then those that left without a goodbye,
        but for those its launcher says it stopped (SIGTERM)."""
        now, wall = self.model.clock(), self.wall_ns()
        events = []
        account = first_end(self.model, now, wall, self._held)  # how it ended, told first
        if account is not None:
            old = self.watch.active.get(account.key)
            same = old is not None and old.facts == account.facts  # (told live already)
            if old is not None:
                account = replace(account, since=old.since,
                                  t_ns=old.t_ns if same else account.t_ns)
            self.watch.active[account.key] = self._ended[account.key] = account
            if not same:
                events.append(account)
        for r in sorted(set(ended)):
            f = self.lost.ended(r, now, wall, account is not None)
            if f is not None:
                self.watch.active[f.key] = self._ended[f.key] = f
                events.append(f)
        self._tell(events)
        # what the others failed in without them, now that they will not come
        return events + (self.update() if events else [])

    def _tell(self, events: list[Finding]) -> None:
        self.history.extend(events)
        self.reported.update((f.type, f.about) for f in events)

    def late_arrivals(self) -> list[tuple[int, Lateness]]:
        """The ranks shown now that arrived late at a collective, the others waiting for
        them, longest waited for first."""
        return self.stragglers.late_arrivals()

    def silent(self) -> list[int]:
        """Ranks neither gone with a goodbye nor heard from for ``LOST_AFTER_S``."""
        return self.lost.silent()

    # ---- model callbacks: each matching round ---------------------------------------------
    def _collectives(self, rows: dict[str, np.ndarray], starts: np.ndarray) -> None:
        counts = np.diff(np.r_[starts, len(rows["rank"])])
        if not (counts >= 2).any():
            return
        sizes = self.model.sizes_of(rows)
        failed = np.logical_or.reduceat((rows["flags"] & protocol.FLAG_FAILED) > 0, starts)
        self.mismatches.check(rows, sizes, starts, counts)
        self.hangs.completed(rows["gkey"][starts], rows["seq"][starts], failed)
        self.stragglers.arrivals(rows, sizes, starts, counts, failed)

    def _transfers(self, recv: dict[str, np.ndarray], send: dict[str, np.ndarray]) -> None:
        self.slow.transfers(recv, send)
        self.hangs.transfers(recv, send)
