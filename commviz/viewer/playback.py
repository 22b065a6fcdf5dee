"""A recording played back as if live (``commviz play``).

``Playback`` stands in for a live ``Session``: the same model and diagnosis, written by a
background thread and read by the TUI under ``lock``. Its messages reach the model when a
``PlaybackClock`` that runs the recording's own time passes theirs: an op at its end, an op
announced as running ``ANNOUNCE_S`` after its start, a heartbeat, a phase or a goodbye at
its own time; a line of a job's output when the viewer read it. So the screen shows what the
live viewer showed, paced as the ranks ran. The clock runs at a chosen speed;
``PlaybackControl`` pauses it, steps it from one operation to the next and, for a demo's
recording, holds it while the replay animates (as a live demo holds its ranks). A compact
recording is read as it plays, a chunk once something in it may be due (``Timetable``), so
that a 10-minute recording of 1,024 ranks opens at once and is never whole in memory; a
pass in the background keeps the model's state every minute (``Snapshot``), so that a seek
there restores it rather than taking in everything before. Pure: no Textual.
"""

from __future__ import annotations

import copy
import io
import pickle
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import zstandard

from commviz.knowledge.nccl_log import NcclLog
from commviz.launch.job import OutputBuffer
from commviz.viewer import compact, recording
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model, Records
from commviz.viewer.plain_text import cell_safe
from commviz.viewer.recording import Received
from commviz.viewer.session import DIAGNOSE_EVERY_S, FRAME_YIELD_S, ROUND_S, Collector  # as live
from commviz.viewer.share import ClockFollower, Republisher, clock_frame
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
# ... each as long as the diagnosis' period (what it judges at each update is what it would
# have judged live, to within a period), not the collector's 20 ms: at 1,024 ranks a round
# costs some 10 ms whatever it holds
WARMUP_ROUND_NS = int(DIAGNOSE_EVERY_S * 1e9)
ROUND_NS = int(ROUND_S * 1e9)
# a seek starts from a copy of the model's state taken this often in the recording (at 1,024
# FSDP-like ranks: 18-29 MB, compressed), by a pass that takes PASS_STEP_NS at a time
SNAPSHOT_EVERY_S = 60.0
PASS_STEP_NS = 1_000_000_000
SPEEDS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_ANNOUNCE_NS = int(ANNOUNCE_S * 1e9)
RESTART_LINE = "──── played again from the start ────"
# a class's student this far behind the teacher's playback seeks to it (a late joiner, the
# teacher's `f` or --from) rather than take in what lies between at the teacher's speed
FOLLOW_SEEK_NS = 1_000_000_000


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

    def follow(self, at_ns: int, speed: float, running: bool) -> None:
        """Where another playback's clock is (a teacher's, ``--share``): there at once (never
        back: what was taken in stays), at its speed, stopped while it is (``"teacher"``)."""
        with self._lock:
            self._rebase()
            self._at_ns = max(self._at_ns, at_ns)
            self.speed = speed
            if running:
                self._stops.discard("teacher")
            else:
                self._stops.add("teacher")

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
    after its start).

    Fed part by part (``source``: a compact recording's chunks, ``recording.Parts``), it
    reads a part only once what is due may be in it (its ``bound_ns`` is reached), and lets
    go of what it took: a 10-minute recording of 1,024 ranks is never whole in memory. Fed
    messages (JSON Lines, or a test's), it holds them all. A copy of it (``copy.deepcopy``)
    takes on from where it was."""

    def __init__(self, messages: Iterable[protocol.Message | Records | Received] | None = None,
                 source: recording.Parts | None = None) -> None:
        self._source = source
        self._start = copy.deepcopy(source)  # what rewind reads again
        self._fed = list(messages) if messages is not None else None
        self.last_ns: int | None = None
        self._fresh()
        if source is None:
            self.last_ns = self.first_ns if self._due.size == 0 else int(self._due[-1])
        elif source.last_ns != compact.NO_TIME:
            self.last_ns = source.last_ns

    def _fresh(self) -> None:
        self._messages: dict[int, protocol.Message | Records | Received] = {}  # not all taken
        self._left: dict[int, int] = {}  # their rows not taken yet
        self._count = 0  # messages numbered so far
        self._last_due: int | None = None  # of the last message read that carries a time
        self._due = np.zeros(0, np.int64)  # what is not taken: when, which message, which row
        self._msg = np.zeros(0, np.int64)
        self._row = np.zeros(0, np.int64)
        if self._fed is not None:
            self._add(self._fed)
        self.first_ns = self.next_ns()

    def _add(self, messages: list[protocol.Message | Records | Received]) -> None:
        """Messages read, in the order they were recorded, to what is due."""
        if not messages:
            return
        dues = [_dues(m) for m in messages]
        counts = np.array([len(d) for d in dues], dtype=np.int64)
        due = np.concatenate(dues)
        # a message that carries no time (a rank's identity, a GPU topology) is due with the
        # one recorded before it (before any, with the earliest)
        known = due >= 0
        if known.any():
            before = self._last_due if self._last_due is not None else int(due[known].min())
            last_known = np.maximum.accumulate(np.where(known, np.arange(len(due)), -1))
            due = np.where(known, due, np.where(last_known >= 0, due[last_known], before))
            self._last_due = int(due[np.flatnonzero(known)[-1]])
        elif self._last_due is not None:
            due[:] = self._last_due
        else:
            due[:] = 0  # nothing timed yet: with the first that is
        numbers = np.arange(self._count, self._count + len(messages))
        self._messages.update(zip(numbers.tolist(), messages))
        self._left.update(zip(numbers.tolist(), counts.tolist()))
        self._count += len(messages)
        msg = np.repeat(numbers, counts)
        row = np.arange(len(due)) - np.repeat(np.cumsum(counts) - counts, counts)
        order = np.lexsort((row, msg, due))
        due, msg, row = due[order], msg[order], row[order]
        # merged into what waits (by time, then message, then row): the new messages come
        # after every one waiting, so at an equal time after them
        at = np.searchsorted(self._due, due, side="right")
        self._due, self._msg, self._row = (np.insert(old, at, new) for old, new in (
            (self._due, due), (self._msg, msg), (self._row, row)))

    def _read_until(self, until_ns: int) -> None:
        """Read the parts that may hold something due by ``until_ns``."""
        src, read = self._source, []
        while src is not None and (bound := src.bound_ns) is not None and bound <= until_ns:
            read += src.read()
        self._add(read)  # at once: each addition sorts what is not taken yet

    def __len__(self) -> int:
        """Rows (an op record, or a message) read and not taken yet."""
        return len(self._due)

    @property
    def done(self) -> bool:
        return self.next_ns() is None

    def next_ns(self) -> int | None:
        """When the next message not yet taken is due; None: every one was taken."""
        src = self._source
        while src is not None and src.bound_ns is not None and (
                not self._due.size or src.bound_ns <= self._due[0]):
            self._add(src.read())
        return int(self._due[0]) if self._due.size else None

    def rewind(self) -> None:
        self._source = copy.deepcopy(self._start)
        self._fresh()

    def take(self, until_ns: int) -> list[protocol.Message | Records]:
        """The messages due up to ``until_ns`` not taken yet, in time order; an op batch's
        rows due then as one batch (at its first row's place)."""
        self._read_until(until_ns)
        end = int(np.searchsorted(self._due, until_ns, side="right"))
        if not end:
            return []
        msgs, rows = self._msg[:end], self._row[:end]
        self._due, self._msg, self._row = self._due[end:], self._msg[end:], self._row[end:]
        order = np.argsort(msgs, kind="stable")  # each message's rows together
        by_msg, their_rows = msgs[order], rows[order]
        starts = np.flatnonzero(np.r_[True, by_msg[1:] != by_msg[:-1]])
        bounds = np.r_[starts, len(by_msg)]
        firsts = order[starts]  # where each message comes first, in time order
        out = []
        for k in np.argsort(firsts).tolist():
            number = int(by_msg[starts[k]])
            self._left[number] -= int(bounds[k + 1] - bounds[k])
            if self._left[number]:
                msg = self._messages[number]
            else:  # all taken: let go of it
                del self._left[number]
                msg = self._messages.pop(number)
            if isinstance(msg, Records | protocol.OpBatch):
                mine = np.sort(their_rows[bounds[k]:bounds[k + 1]])
                if len(mine) < len(msg):
                    msg = _rows(msg, mine)
            out.append(msg.message if isinstance(msg, Received) else msg)
        return out


def _rows(msg: Records | protocol.OpBatch, rows: np.ndarray) -> Records | protocol.OpBatch:
    """The records ``rows`` of an op message, as a message of the same kind."""
    if isinstance(msg, Records):
        return Records(msg.whos, msg.who[rows], {k: v[rows] for k, v in msg.cols.items()},
                       msg.groups, msg.sites)
    return protocol.OpBatch(msg.rank, {k: v[rows] for k, v in msg.cols.items()}, msg.groups,
                            msg.sites, msg.inc)


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


def _dues(msg: protocol.Message | Records | Received) -> np.ndarray:
    """When each part of ``msg`` reached the live viewer, as near as its times tell (-1: it
    carries no time)."""
    if isinstance(msg, Received):  # the recording says
        return np.array([msg.at_ns], dtype=np.int64)
    if isinstance(msg, protocol.OpBatch | Records):
        t_end, t_start = msg.cols["t_end"], msg.cols["t_start"]
        return np.where(t_end >= 0, t_end, t_start + _ANNOUNCE_NS).astype(np.int64)
    if isinstance(msg, protocol.Heartbeat | protocol.Bye | protocol.Gone):
        t = msg.t_ns if msg.t_ns > 0 else -1
    elif isinstance(msg, protocol.Phases):
        t = max(span.t_end for span in msg.spans)
    else:
        t = -1
    return np.array([t], dtype=np.int64)


class Snapshot:
    """The state of a playback's model, diagnosis and timetable at ``at_ns`` of the
    recording, kept pickled and compressed (a fraction of the objects' memory; restoring
    makes new objects, so that it serves every seek). Only this process reads it back."""

    def __init__(self, at_ns: int, data: bytes, warm: float | None = None) -> None:
        self.at_ns = at_ns
        self.data = data
        # a state a seek to ``at_ns`` leaves (warmed up): when its diagnosis is next due
        self.warm = warm

    @classmethod
    def of(cls, at_ns: int, model: Model, diagnosis: Diagnosis, table: Timetable,
           clock: PlaybackClock, warm: float | None = None) -> Snapshot:
        """A pass's state; its clock ``clock`` is not kept (it has a lock): a restored state
        has the clock it is given."""
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = lambda obj: "clock" if obj is clock else None  # type: ignore
        pickler.dump((model, diagnosis, table))
        return cls(at_ns, zstandard.ZstdCompressor(level=1).compress(out.getbuffer()), warm)

    def restore(self, clock: PlaybackClock) -> tuple[Model, Diagnosis, Timetable]:
        """The state, with the clock ``clock``."""
        raw = zstandard.ZstdDecompressor().decompress(self.data)
        unpickler = pickle.Unpickler(io.BytesIO(raw))
        unpickler.persistent_load = lambda pid: clock  # type: ignore
        return unpickler.load()


class Snapshots:
    """The snapshots a pass has taken so far, by time (written by one thread, read by
    another)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: list[Snapshot] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._taken)

    def add(self, snap: Snapshot) -> None:
        with self._lock:
            self._taken.append(snap)

    def latest(self, until_ns: int) -> Snapshot | None:
        """The latest snapshot to take on from at or before ``until_ns`` (not a warmed one;
        None: none yet)."""
        with self._lock:
            return next((s for s in reversed(self._taken)
                         if s.at_ns <= until_ns and s.warm is None), None)

    def warmed(self, at_ns: int) -> Snapshot | None:
        """The warmed snapshot of ``at_ns`` exactly, if there is one."""
        with self._lock:
            return next((s for s in self._taken if s.at_ns == at_ns and s.warm is not None),
                        None)


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
        # a compact recording is read as it plays, chunk by chunk; JSON Lines, whole (it has
        # no index to find a time's chunk by)
        self.streamed = compact.is_compact(path)
        if self.streamed:
            source = recording.Parts(path)
            self.cut = source.cut
            found, extra = recording.extras(path)
            self.timetable = Timetable(source=source)
        else:
            self.timetable = Timetable(recording.read(path, found, self.cut, playback=True,
                                                      lines=extra, records=True))
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
        if self.timetable.first_ns is None:
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
        # the model's state at some times, from a pass over the recording in the background
        # (``take_snapshots``): a seek starts from the latest one before it
        self.snapshots = Snapshots()
        self._pass_due = False  # the pass is started after the first frame (``frame_ends``)
        self.epoch = 0  # times it was played again from the start: a class follows them
        # a class (``play --share``): the teacher's clock goes out on ``share``; a student's
        # playback goes where ``following`` says the teacher's is
        self.following: ClockFollower | None = None
        self._teacher_epoch: int | None = None
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

    def share_class(self) -> Republisher:
        """Tell this playback's clock to a class's followers from now on (the teacher's)."""
        self.share = Republisher()
        return self.share

    def follow_class(self, teacher: ClockFollower) -> None:
        """Go where the teacher's playback of this recording goes (a student's): its place,
        speed, pauses and holds, seeks and restarts; standing still until it first tells."""
        self.following = teacher
        self.stop_at_each_op = False  # the teacher's clock holds for the replay
        self.clock.stop("teacher")

    def _follow_teacher(self, teacher: ClockFollower) -> None:
        told = teacher.take()
        if told is None:
            return
        at_ns, speed, running, epoch = told
        if epoch != self._teacher_epoch:  # the teacher played it again from the start
            if self._teacher_epoch is not None:
                self.reset()
            self._teacher_epoch = epoch
        if at_ns - self.clock.wall_ns() > FOLLOW_SEEK_NS:
            self.seek((at_ns - self.origin_ns) / 1e9)
        self.clock.follow(at_ns, speed, running)

    def _fresh(self) -> None:
        if not hasattr(self, "_first_table"):  # what the snapshots' pass starts from
            self._first_table = copy.deepcopy(self.timetable)
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
        in a second of it at a time (from the latest snapshot before then that is ahead of
        the playback, if there is one), the rest in rounds, so that the diagnosis sees how
        long ranks have waited or gone quiet there as it did live. The clock waits
        meanwhile."""
        with self.lock:
            to = min(self.end_ns, self.origin_ns + round(seconds * 1e9))
            self.clock.stop("seeking")
            try:
                at = self.clock.wall_ns()
                warm = self.snapshots.warmed(to)
                if warm is not None and to > at:  # the state this seek would leave, ready
                    self.model, self.diagnosis, self.timetable = warm.restore(self.clock)
                    self._next_diagnosis = warm.warm  # type: ignore[assignment]
                    self.clock.jump(to)
                    self._output_until(to)
                    return
                snap = self.snapshots.latest(to - WARMUP_NS)
                if snap is not None and snap.at_ns > at:
                    self.model, self.diagnosis, self.timetable = snap.restore(self.clock)
                    self._next_diagnosis = float("-inf")
                    self.clock.jump(snap.at_ns)
                while to - WARMUP_NS > (now := self.clock.wall_ns()):  # a step at a time:
                    self.clock.jump(min(to - WARMUP_NS, now + PASS_STEP_NS))  # bounded memory
                    self._take(self.clock.wall_ns(), each_op=False)
                self._rounds_until(to, step_ns=WARMUP_ROUND_NS)
                self._round(to, each_op=False)
            finally:
                self.clock.go("seeking")

    def take_snapshots(self, every_s: float = SNAPSHOT_EVERY_S,
                       stop: Callable[[], bool] = lambda: False) -> None:
        """Play the recording through on a model of its own, in large steps, and keep a copy
        of its state (``Snapshot``) every ``every_s`` of it, WARMUP_NS before each whole
        ``every_s``, and one of a copy of it warmed up to the whole ``every_s`` as a seek
        there warms up (so that a seek to it has nothing left to do); until the end or
        ``stop()``. What the copies hold is the whole history up to them, as a seek from the
        start would have taken it in."""
        clock = PlaybackClock(self.start_ns, real=lambda: 0.0)
        clock.stop("snapshots")
        model = Model(clock.seconds, self.host if isinstance(self.host, str) else None)
        diagnosis = Diagnosis(model, wall_ns=clock.wall_ns)
        table = copy.deepcopy(self._first_table)
        every = int(every_s * 1e9)
        at = self.origin_ns + every - WARMUP_NS
        while at < self.end_ns and not stop():
            while clock.wall_ns() < at and not stop():
                clock.jump(min(at, clock.wall_ns() + PASS_STEP_NS))
                msgs = table.take(clock.wall_ns())
                if msgs:
                    model.apply(msgs)
            if stop():
                return
            snap = Snapshot.of(at, model, diagnosis, table, clock)
            self.snapshots.add(snap)
            if at + WARMUP_NS < self.end_ns:
                self.snapshots.add(self._warmed(snap, at + WARMUP_NS))
            at += every

    def _warmed(self, snap: Snapshot, to: int) -> Snapshot:
        """``snap``'s state taken on to ``to`` as a seek there does, on a playback of its own
        that shows nothing (no output, no lock the screen waits on)."""
        clock = PlaybackClock(snap.at_ns, real=lambda: 0.0)
        clock.stop("snapshots")
        shadow = copy.copy(self)
        shadow.lock, shadow.clock, shadow.output = threading.Lock(), clock, None
        shadow._lines, shadow._lines_ns = [], np.zeros(0, np.int64)
        shadow.model, shadow.diagnosis, shadow.timetable = snap.restore(clock)
        shadow._next_diagnosis = float("-inf")
        shadow._rounds_until(to, step_ns=WARMUP_ROUND_NS)
        shadow._round(to, each_op=False)
        return Snapshot.of(to, shadow.model, shadow.diagnosis, shadow.timetable, clock,
                           warm=shadow._next_diagnosis)

    def start(self) -> None:
        super().start()
        self._pass_due = self.streamed  # once the first frame is drawn: it comes first

    def frame_ends(self) -> None:
        super().frame_ends()
        if self._pass_due:
            self._pass_due = False
            threading.Thread(target=self.take_snapshots, kwargs={"stop": self._stop.is_set},
                             name="commviz-snapshots", daemon=True).start()

    def _rounds_until(self, to: int, done: Callable[[], bool] = lambda: False,
                      step_ns: int = ROUND_NS) -> None:
        """The collector's rounds, ``step_ns`` apart, up to ``to`` or until ``done``."""
        while (now := self.clock.wall_ns()) < to and not done():
            self.clock.jump(min(to, now + step_ns))
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
            self.epoch += 1
            self._fresh()
            if self.output is not None and self.output.total:
                self.output.append("stdout", RESTART_LINE)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._idle.wait(FRAME_YIELD_S)
            if self.following is not None:
                self._follow_teacher(self.following)
            self.advance()
            if self.share is not None:  # (every round: a follower's hello is answered at once)
                clock = self.clock
                self.share.pump([], clock_frame(clock.wall_ns(), clock.speed,
                                                not clock.stopped(), self.epoch))
            self._stop.wait(ROUND_S)

    def close(self, ended: Iterable[int] | None = ()) -> None:
        """Stop taking messages; the model stays as it is (what the screen showed last). A
        class is told it ended."""
        self._stop_collecting()
        if self.following is not None:
            self.following.close()
            self.following = None
        self._stop_serving()


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
