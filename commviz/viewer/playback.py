"""A recording played back as if live (``commviz play``).

``Playback`` stands in for a live ``Session``: the same model and diagnosis, written by a
background thread and read by the TUI under ``lock``. Its messages reach the model when a
``PlaybackClock`` that runs the recording's own time passes theirs: an op at its end, an op
announced as running ``ANNOUNCE_S`` after its start, a heartbeat, a phase or a goodbye at
its own time; a line of a job's output when the viewer read it. So the screen shows what the
live viewer showed, paced as the ranks ran. The clock runs at a chosen speed;
``PlaybackControl`` pauses it, steps it from one operation to the next and, for a demo's
recording, holds it while the replay animates (as a live demo holds its ranks). Pure: no
Textual.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from commviz.knowledge.nccl_log import NcclLog
from commviz.launch.job import OutputBuffer
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.plain_text import cell_safe
from commviz.viewer.session import DIAGNOSE_EVERY_S, FRAME_YIELD_S, ROUND_S, Collector  # as live
from commviz.wire import protocol
from commviz.wire.control import ControlState
from commviz.wire.protocol import ANNOUNCE_S

LEAD_NS = 200_000_000  # the clock starts this long before the first message
# it ends when the viewer closed the recording, at most this long after the last message
# (time enough to find a rank lost: the live diagnosis' LOST_AFTER_S and LOST_CONFIRM_S)
TAIL_NS = 5_000_000_000
LOOKBACK_NS = 2_000_000_000  # `f` lands this long before the next finding the viewer made
SETTLE_NS = 400_000_000  # ... then this long after it, once its diagnosis has come
WARMUP_NS = 5_000_000_000  # a seek takes the last of it in rounds: waits and silences count
ROUND_NS = int(ROUND_S * 1e9)
SPEEDS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_ANNOUNCE_NS = int(ANNOUNCE_S * 1e9)
RESTART_LINE = "──── played again from the start ────"


class PlaybackClock:
    """The recording's wall clock (ns): from ``start_ns`` it runs ``speed`` times as fast as
    ``real`` (seconds) while nothing stops it (a pause, a hold for the replay, the end)."""

    def __init__(self, start_ns: int, speed: float = 1.0,
                 real: Callable[[], float] = time.monotonic) -> None:
        self._real = real
        self._lock = threading.Lock()
        self._at_ns, self._since = start_ns, real()
        self.speed = speed
        self._stops: set[str] = set()

    def wall_ns(self) -> int:
        with self._lock:
            return self._now()

    def seconds(self) -> float:
        """The same time in seconds: the model's and the diagnosis' clock."""
        return self.wall_ns() / 1e9

    def stopped(self, why: str | None = None) -> bool:
        """Whether ``why`` stops it (None: anything)."""
        with self._lock:
            return bool(self._stops) if why is None else why in self._stops

    def stop(self, why: str, at_ns: int | None = None) -> None:
        """Stop the clock for ``why`` (at ``at_ns``, if given, rather than now)."""
        with self._lock:
            self._rebase()
            if at_ns is not None:
                self._at_ns = at_ns
            self._stops.add(why)

    def go(self, why: str) -> None:
        """``why`` no longer stops it: it runs again if nothing else does."""
        with self._lock:
            self._rebase()
            self._stops.discard(why)

    def jump(self, to_ns: int) -> None:
        """Forward to ``to_ns`` at once (never back)."""
        with self._lock:
            self._rebase()
            self._at_ns = max(self._at_ns, to_ns)

    def set_speed(self, speed: float) -> None:
        with self._lock:
            self._rebase()
            self.speed = speed

    def reset(self, start_ns: int) -> None:
        """Back to ``start_ns``; what stopped it for the end no longer does."""
        with self._lock:
            self._at_ns, self._since = start_ns, self._real()
            self._stops.discard("end")

    def _now(self) -> int:
        if self._stops:
            return self._at_ns
        return self._at_ns + int((self._real() - self._since) * self.speed * 1e9)

    def _rebase(self) -> None:
        self._at_ns, self._since = self._now(), self._real()


class Timetable:
    """A recording's messages in the order they fall due, taken up to a time. An op batch is
    taken row by row: each op at its own time (its end; an announced running op shortly
    after its start)."""

    def __init__(self, messages: Iterable[protocol.Message]) -> None:
        self._messages: list[protocol.Message] = []
        dues: list[np.ndarray] = []
        for msg in messages:
            self._messages.append(msg)
            dues.append(_dues(msg))
        counts = np.array([len(d) for d in dues], dtype=np.int64)
        due = np.concatenate(dues) if dues else np.zeros(0, dtype=np.int64)
        # a message that carries no time (a rank's identity, a GPU topology) is due with the
        # one recorded before it (before any, with the earliest)
        known = due >= 0
        if known.any():
            last_known = np.maximum.accumulate(np.where(known, np.arange(len(due)), 0))
            due = np.where(known, due, due[last_known])
            due[: int(np.argmax(known))] = due[known].min()
        self._msg = np.repeat(np.arange(len(counts)), counts)
        self._row = np.arange(len(due)) - np.repeat(np.cumsum(counts) - counts, counts)
        order = np.lexsort((self._row, self._msg, due))
        self._due, self._msg, self._row = due[order], self._msg[order], self._row[order]
        self._next = 0

    def __len__(self) -> int:
        return len(self._due)

    @property
    def done(self) -> bool:
        return self._next >= len(self._due)

    @property
    def first_ns(self) -> int | None:
        return int(self._due[0]) if len(self._due) else None

    @property
    def last_ns(self) -> int | None:
        return int(self._due[-1]) if len(self._due) else None

    def next_ns(self) -> int | None:
        """When the next message not yet taken is due; None: every one was taken."""
        return None if self.done else int(self._due[self._next])

    def rewind(self) -> None:
        self._next = 0

    def take(self, until_ns: int) -> list[protocol.Message]:
        """The messages due up to ``until_ns`` not taken yet, in time order; an op batch's
        rows due then as one batch (at its first row's place)."""
        end = int(np.searchsorted(self._due, until_ns, side="right"))
        if end <= self._next:
            return []
        msgs, rows = self._msg[self._next:end], self._row[self._next:end]
        self._next = end
        firsts = np.unique(msgs, return_index=True)[1]
        out = []
        for i in np.sort(firsts).tolist():
            msg = self._messages[int(msgs[i])]
            if isinstance(msg, protocol.OpBatch):
                mine = np.sort(rows[msgs == msgs[i]])
                if len(mine) < len(msg):
                    msg = protocol.OpBatch(msg.rank, {k: v[mine] for k, v in msg.cols.items()},
                                           msg.groups, msg.sites, msg.inc)
            out.append(msg)
        return out


# the events a recording may hold, and the fields each one's words need
EVENT_FIELDS = {"rank failed": ("who", "code", "line"), "rank finished": ("who",),
                "rank ended": ("who", "code"),
                "stopping others": (), "job ended": ()}


def _well_formed(kind: str, line: dict) -> bool:
    """Whether an ``out`` or ``event`` line has what playing it needs (a hand-edited or
    foreign line is left out, never a crash)."""
    if type(line.get("t_ns")) is not int:
        return False
    if kind == "out":
        return isinstance(line.get("text"), str)
    fields, key = line.get("fields"), line.get("key")
    return key in EVENT_FIELDS and isinstance(fields, dict) and all(
        type(fields.get(name)) in (str, int) for name in EVENT_FIELDS[key]) and \
        type(fields.get("rank", 0)) is int and type(fields.get("code", 0)) is int


def _dues(msg: protocol.Message) -> np.ndarray:
    """When each part of ``msg`` reached the live viewer, as near as its times tell (-1: it
    carries no time)."""
    if isinstance(msg, protocol.OpBatch):
        t_end, t_start = msg.cols["t_end"], msg.cols["t_start"]
        return np.where(t_end >= 0, t_end, t_start + _ANNOUNCE_NS).astype(np.int64)
    if isinstance(msg, protocol.Heartbeat | protocol.Bye | protocol.Gone):
        t = msg.t_ns if msg.t_ns > 0 else -1
    elif isinstance(msg, protocol.Phases):
        t = max(span.t_end for span in msg.spans)
    else:
        t = -1
    return np.array([t], dtype=np.int64)


class Playback(Collector):
    """A recording as a session the TUI can show. ``speed``: how many times as fast as it was
    recorded; ``real``: the clock it runs against (seconds)."""

    def __init__(self, path: str | Path, speed: float = 1.0,
                 real: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.path = str(path)
        self.header = recording.read_header(path)
        self.cut: list[int] = []  # the number of a last line cut short, if one was
        # the live diagnosis's findings, for their times only (this playback diagnoses again)
        found: list[dict] = []
        extra: dict[str, list[dict]] = {"out": [], "event": [], "summary": []}
        self.timetable = Timetable(recording.read(path, found, self.cut, playback=True,
                                                  lines=extra))
        # the job's output lines and the ranks' events, in time order: (t_ns, kind, line)
        timed = sorted(((line["t_ns"], kind, line) for kind in ("out", "event")
                        for line in extra[kind] if _well_formed(kind, line)),
                       key=lambda timed: timed[0])  # at one time: as written
        self._lines_ns = np.array([t for t, _, _ in timed], dtype=np.int64)
        self._lines = [(kind, line) for _, kind, line in timed]
        # the job's output, for its panel (None: no job's output was recorded)
        self.output = OutputBuffer() if extra["out"] else None
        summary = extra["summary"]
        self.closed = bool(summary)  # False: its viewer never closed it (killed?)
        if not len(self.timetable):
            raise recording.RecordingError(f"{path}: nothing was recorded (no rank reported)")
        # the recording lasts from its first message or line of output until the viewer
        # closed it (or, if it was not closed, its last finding or message)
        ends = [t for t in (*(f.get("t_ns") for f in found), *(s.get("t_ns") for s in summary))
                if type(t) is int]
        # when the live diagnosis made each finding (and which): `f` goes to the next one
        self._found = sorted((f["t_ns"], str(f.get("type")), tuple(f.get("ranks") or ()))
                             for f in found
                             if type(f.get("t_ns")) is int and f.get("type") != "resolved")
        self.finding_ns = [t for t, _, _ in self._found]
        # the ranks the viewer judged ended when it closed (None: as a watcher, the silent)
        ended = summary[-1].get("ended") if summary else None
        self.ended = [r for r in ended if type(r) is int] if isinstance(ended, list) else None
        times = [self.timetable.first_ns, self.timetable.last_ns, *self._lines_ns[:1].tolist(),
                 *self._lines_ns[-1:].tolist()]
        # time 0 of the playback: its first message or line of output; the log's times, the
        # playback's place and --from count from it (the clock starts LEAD_NS before it)
        self.origin_ns = int(min(times))  # type: ignore[type-var]
        self.start_ns = self.origin_ns - LEAD_NS
        last = int(max(times))  # type: ignore[type-var]
        self.end_ns = min(max([last, *ends]), last + TAIL_NS)
        self.clock = PlaybackClock(self.start_ns, speed, real)
        self.host = self.header.get("host")  # the viewer's: its clock is the others' reference
        self.stop_at_each_op = False  # hold the clock after each operation (PlaybackControl)
        self.rejected = 0  # nothing is received: nothing is rejected
        self.shed = 0  # nor shed (the live viewer's shedding is in the summary: stats)
        self.dropped_by_relays = 0  # (the live viewer's count is in the summary too)
        self.recorder = None  # what is played back is not recorded again
        self._fresh()

    @property
    def addr(self) -> str:
        return self.path

    @property
    def title(self) -> dict[str, str]:
        """The recorded run's title per language ({} if the header has none)."""
        title = self.header.get("title")
        return {k: v for k, v in title.items() if isinstance(v, str)} \
            if isinstance(title, dict) else {}

    @property
    def demo(self) -> str | None:
        """The demo recorded, if the recording was a demo's."""
        demo = self.header.get("demo")
        return demo if isinstance(demo, str) else None

    def _fresh(self) -> None:
        self.model = Model(self.clock.seconds, self.host if isinstance(self.host, str) else None)
        self.nccl = NcclLog()  # what NCCL printed of itself, read from the job's output
        self._next_line = 0
        self._events: list[tuple[str, dict]] = []
        self.diagnosis = Diagnosis(self.model, wall_ns=self.clock.wall_ns)
        self._next_diagnosis = float("-inf")

    def advance(self) -> int:
        """Give the model what is due by the clock; returns how many messages. Holding
        after each operation, it stops the clock at the first one that completes."""
        with self.lock:
            return self._round(self.clock.wall_ns(), self.stop_at_each_op)

    def _round(self, now_ns: int, each_op: bool) -> int:
        """One round of the collector at ``now_ns`` of the recording: what is due, then the
        diagnosis when its period is over; at the end, the end judged as the viewer did."""
        n = self._take(now_ns, each_op)
        now_ns = min(now_ns, self.clock.wall_ns())  # held at an operation: there
        self._output_until(now_ns)
        ended = now_ns >= self.end_ns and not self.clock.stopped("end")
        if ended:  # the clock stops: what the last messages say is judged now
            self.clock.stop("end", at_ns=self.end_ns)
        if ended or self.clock.seconds() >= self._next_diagnosis:
            self._next_diagnosis = self.clock.seconds() + DIAGNOSE_EVERY_S
            self.diagnosis.update()
        if ended:  # as the viewer closed: ranks that ended without a goodbye are lost
            self.diagnosis.finish(self.diagnosis.silent() if self.ended is None
                                  else self.ended)
        return n

    def seek(self, seconds: float) -> None:
        """Forward to ``seconds`` into the recording: what came before WARMUP_NS of it taken
        in at once, the rest in the collector's rounds, so that the diagnosis sees how long
        ranks have waited or gone quiet there as it did live."""
        with self.lock:
            to = min(self.end_ns, self.origin_ns + round(seconds * 1e9))
            if to - WARMUP_NS > self.clock.wall_ns():
                self.clock.jump(to - WARMUP_NS)
                self._take(self.clock.wall_ns(), each_op=False)
            self._rounds_until(to)
            self._round(to, each_op=False)

    def _rounds_until(self, to: int, done: Callable[[], bool] = lambda: False) -> None:
        """The collector's rounds, ROUND_NS apart, up to ``to`` or until ``done``."""
        while (now := self.clock.wall_ns()) < to and not done():
            self.clock.jump(min(to, now + ROUND_NS))
            self._round(self.clock.wall_ns(), each_op=False)

    def next_finding_ns(self) -> int | None:
        """Where `f` goes: LOOKBACK_NS before the next finding the live diagnosis made, so
        that it is seen coming, or, once closer than that, just after it, at most SETTLE_NS
        (this playback's diagnosis has made it too); None: no later one."""
        now = self.clock.wall_ns()
        t = next((t for t in self.finding_ns if t > now), None)
        if t is None:
            return None
        return t - LOOKBACK_NS if t - LOOKBACK_NS > now else min(self.end_ns, t + SETTLE_NS)

    def to_next_finding(self) -> bool:
        """Forward to ``next_finding_ns``, everything before taken in at once; False if
        there is no later finding. Going to just after a finding, it stops at the first
        round where this playback's diagnosis has made what the live one had by then: on a
        fast demo the operations go on within SETTLE_NS."""
        to = self.next_finding_ns()
        if to is None:
            return False
        t = next(t for t in self.finding_ns if t > self.clock.wall_ns())
        if to < t:
            self.seek((to - self.origin_ns) / 1e9)
            return True
        self.seek((t - self.origin_ns) / 1e9)
        made = {(kind, ranks) for at, kind, ranks in self._found if at <= t}
        with self.lock:  # until this playback's diagnosis has found each (type, ranks)
            self._rounds_until(to, lambda: made <= {(f.type, f.ranks)
                                                     for f in self.diagnosis.history})
        return True

    @property
    def duration_s(self) -> float:
        """From time 0 (``origin_ns``) to the end."""
        return (self.end_ns - self.origin_ns) / 1e9

    @property
    def at_s(self) -> float:
        """Where the playback is, from time 0 (0 during the lead before it)."""
        return max(0.0, (self.clock.wall_ns() - self.origin_ns) / 1e9)

    def step(self) -> None:
        """Forward to the next operation: until a collective instance or a transfer
        completes or fails, or an op is seen running (the end, if none is left)."""
        with self.lock:
            while (due := self.timetable.next_ns()) is not None:
                self.clock.jump(due)
                if self._take(due, each_op=True, running_too=True, hold=False):
                    break
            self._output_until(self.clock.wall_ns())
            self.diagnosis.update()

    def _take(self, until_ns: int, each_op: bool, running_too: bool = False,
              hold: bool = True) -> int:
        """Apply what is due by ``until_ns``. With ``each_op``, only up to the first time at
        which an operation completes or fails (or, ``running_too``, is seen running), where
        the clock then stops (``hold``: until the replay has shown it). Returns how many
        messages were applied (with ``each_op``: 0 unless an operation came)."""
        if not each_op:
            msgs = self.timetable.take(until_ns)
            if msgs:
                self.model.apply(msgs)
            return len(msgs)
        model = self.model
        while (due := self.timetable.next_ns()) is not None and due <= until_ns:
            done, running = model.instances + model.transfers + model.failed, len(model.inflight)
            msgs = self.timetable.take(due)
            model.apply(msgs)
            if (model.instances + model.transfers + model.failed > done
                    or running_too and len(model.inflight) > running):
                if hold:
                    self.clock.stop("held", at_ns=due)
                return len(msgs)
        return 0

    def _output_until(self, until_ns: int) -> None:
        """The job's output lines read by ``until_ns``, to its panel and to NCCL's log, and
        the ranks' events by then, for ``take_events``."""
        end = int(np.searchsorted(self._lines_ns, until_ns, side="right"))
        for kind, line in self._lines[self._next_line:end]:
            if kind == "out":
                self.output.append("stdout", line["text"])  # type: ignore[union-attr]
                self.nccl.feed(line["text"])
            else:  # what a file says is drawn as text only, as a job's own lines are
                self._events.append((line["key"], {k: cell_safe(v) if isinstance(v, str) else v
                                                   for k, v in line["fields"].items()}))
        self._next_line = max(self._next_line, end)

    def take_events(self) -> list[tuple[str, dict]]:
        """What the launcher told of the ranks' processes ("rank failed"...) that came since
        the last call, as the live screen listed it."""
        with self.lock:
            events, self._events = self._events, []
            return events

    def reset(self) -> None:
        """From the start again, on an empty model (the output panel goes on below a line
        that says so)."""
        with self.lock:
            self.timetable.rewind()
            self.clock.reset(self.start_ns)
            self._fresh()
            if self.output is not None and self.output.total:
                self.output.append("stdout", RESTART_LINE)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._idle.wait(FRAME_YIELD_S)
            self.advance()
            self._stop.wait(ROUND_S)

    def close(self, ended: Iterable[int] | None = ()) -> None:
        """Stop taking messages; the model stays as it is (what the screen showed last)."""
        self._stop_collecting()


class PlaybackControl:
    """Play, pause and single-step a playback: what ``control.Controller`` is to a demo's
    ranks, for the TUI's same keys. ``each_op``: hold the clock after each operation until
    the replay has shown it (a demo's recording, as the live demo held its ranks)."""

    def __init__(self, playback: Playback, paused: bool = False, each_op: bool = False) -> None:
        self.playback = playback
        playback.stop_at_each_op = each_op
        if paused:
            playback.clock.stop("paused")

    @property
    def clock(self) -> PlaybackClock:
        return self.playback.clock

    @property
    def paused(self) -> bool:
        return self.clock.stopped("paused")

    @property
    def ended(self) -> bool:
        return self.clock.stopped("end")

    @property
    def state(self) -> ControlState:
        """The state as a demo's controller tells it (``held``: waiting for the replay)."""
        return ControlState("step" if self.paused else "play", -1, 0,
                            held=self.clock.stopped("held"))

    def toggle(self) -> None:
        if self.paused:
            self.clock.go("paused")
        else:
            self.clock.stop("paused")

    def step(self) -> None:
        """Pause when playing; when paused, forward to the next operation."""
        if not self.paused:
            self.clock.stop("paused")
        else:
            self.playback.step()

    def hold(self, on: bool) -> None:
        """Whether the replay is busy: once it is not, an operation held for it is let go."""
        if not on:
            self.clock.go("held")

    def faster(self) -> float:
        return self._speed(+1)

    def slower(self) -> float:
        return self._speed(-1)

    def _speed(self, by: int) -> float:
        at = min(range(len(SPEEDS)), key=lambda i: abs(SPEEDS[i] - self.clock.speed))
        self.clock.set_speed(SPEEDS[max(0, min(len(SPEEDS) - 1, at + by))])
        return self.clock.speed

    def restart(self) -> None:
        """The playback itself rewinds (``Playback.reset``): nothing held is left."""
        self.clock.go("held")
