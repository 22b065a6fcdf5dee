"""A viewing session: receiver -> model (+ recording), drained on a background thread.

The TUI and the headless printer read the model under ``lock``; only this thread writes it.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from commviz.knowledge.nccl_log import Link, NcclLog
from commviz.viewer import recording
from commviz.viewer.diagnose import Diagnosis, Finding
from commviz.viewer.model import Model
from commviz.viewer.share import Republisher
from commviz.viewer.transport import DEFAULT_BIND, Intake, Receiver
from commviz.wire.protocol import HEARTBEAT_S

POLL_MS = 20
ROUND_S = 0.02
DIAGNOSE_EVERY_S = 0.25  # findings come within this of their threshold, events or not
FRAME_YIELD_S = 0.05  # the longest the collector holds back for a frame being drawn
# messages applied under one hold of the lock: at a thousand ranks a round holds hundreds of
# one-record batches, and a frame waiting for all of them at once missed its time
APPLY_SLICE = 256
STALL_S = 0.5  # a gap this long between polls: this process was not running, catch up first
JOB_TAIL_LINES = 200  # of a job's output kept by job_line


def behind(newest_ns: int, now_ns: int) -> float:
    """How far the viewer is behind the ranks: from the newest time it applied (a heartbeat's
    leaving its rank, or, with a backlog, a record's end; viewer's clock) to now, less the
    heartbeats' own period (a rank sends one every HEARTBEAT_S: that much is no lag); 0
    before any."""
    if not newest_ns:
        return 0.0
    return max(0.0, (now_ns - newest_ns) / 1e9 - HEARTBEAT_S)


class Collector:
    """A background thread that writes ``model`` under ``lock`` (the TUI reads it under the
    same lock), holding back while a frame is drawn; subclasses give its rounds (``_run``)
    and the model."""

    model: Model

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # cleared while the TUI draws a frame: the collector holds back meanwhile, so that a
        # frame does not share the interpreter (its GIL) with receiving and matching
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # a class (``--share``): where what the followers need goes out (``Republisher``),
        # and what serves it and stops with the collector (its pages; ``--metrics``' server)
        self.share: Republisher | None = None
        self.on_close: list[Callable[[], None]] = []

    def frame_begins(self) -> None:
        """The viewer starts drawing a frame: hold back the collector until ``frame_ends``
        (or FRAME_YIELD_S)."""
        self._idle.clear()

    def frame_ends(self) -> None:
        self._idle.set()

    def _yield_to_frame(self) -> None:
        self._idle.wait(FRAME_YIELD_S)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="commviz-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    def note_event(self, key: str, fields: dict) -> None:
        """What the launcher told of the ranks' processes ("rank failed"...): how a rank's
        process ended goes to the model (the ranks table, the end's diagnosis)."""
        if type(fields.get("rank")) is int and type(fields.get("code")) is int:
            with self.lock:
                self.model.process_ended(fields["rank"], fields["code"])

    def _stop_collecting(self) -> None:
        self._stop.set()
        self._idle.set()  # no frame will end now
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _stop_serving(self) -> None:
        """Tell a class it ended, then stop what serves (last, once the collector stopped)."""
        if self.share is not None:
            self.share.close()
            self.share = None
        for stop in self.on_close:
            stop()
        self.on_close = []


class Session(Collector):
    def __init__(self, bind: str = DEFAULT_BIND, record: str | Path | None = None,
                 collect_instances: bool = False, keys: str | Path | None = None,
                 about: dict | None = None, intake: Intake | None = None,
                 share: bool = False) -> None:
        """``about``: what a recording's header says of the run (``title`` per language,
        ``demo``), besides the viewer's host. ``intake``: where messages come from other than
        a receiver bound at ``bind`` (a class's follower: ``share.Subscriber``). ``share``:
        republish what comes in to a class's followers (``share.Republisher``)."""
        super().__init__()
        self.receiver = intake if intake is not None else Receiver(bind, keys, keep_raw=share)
        self.share = Republisher() if share else None
        self.model = Model()
        if collect_instances:
            self.model.new_instances = []
        self.diagnosis = Diagnosis(self.model)
        # what NCCL printed about itself (NCCL_DEBUG=INFO), fed by `commviz run` from the
        # job's output; thread-safe on its own, no need of ``lock``
        self.nccl = NcclLog()
        # the last lines of a job's output read through job_line (headless: what says why
        # it failed)
        self.job_tail: collections.deque[str] = collections.deque(maxlen=JOB_TAIL_LINES)
        # findings and resolutions as they happen, for the headless printer (None: not kept)
        self.new_findings: list[Finding] | None = [] if collect_instances else None
        self._next_diagnosis = 0.0
        self._last_poll = time.monotonic()
        # the wall clock (ns) when the first message arrived: time zero of the headless lines
        self.first_message_ns: int | None = None
        try:
            self.recorder = recording.Recorder(
                record, {"host": self.model.local_host, **(about or {})}) if record else None
        except OSError as exc:
            self.receiver.close()
            if self.share is not None:
                self.share.close()
            raise recording.RecordingError(f"cannot write {record}: {exc.strerror}") from None

    @property
    def addr(self) -> str:
        return self.receiver.addr

    @property
    def rejected(self) -> int:
        return self.receiver.rejected

    @property
    def shed(self) -> int:
        return sum(self.receiver.shed.values())

    @property
    def dropped_by_relays(self) -> int:
        """Op records the relays between the ranks and this viewer said they dropped (read from
        any thread: a copy of the table the collector writes, taken at once)."""
        return sum(dropped for dropped, _ in list(self.receiver.relays.values()))

    def nccl_links(self) -> dict[tuple[int, int], Link]:
        """The transport between each pair of global ranks as NCCL printed it at init
        (P2P/IPC, SHM, NET/IB...); {} without NCCL's log."""
        with self.lock:
            ranks = {(s.host, s.pid): r for r, s in self.model.ranks.items() if s.pid}
        return self.nccl.links(ranks)

    def job_line(self, text: str) -> None:
        """A line of the output of the job commviz runs (any thread): NCCL's own lines are
        read, and every line is recorded."""
        self.nccl.feed(text)
        self.job_tail.append(text)
        recorder = self.recorder
        if recorder is not None:
            recorder.write_output(text)

    def note_event(self, key: str, fields: dict) -> None:
        """As the collector's (``Collector.note_event``), and recorded."""
        super().note_event(key, fields)
        recorder = self.recorder
        if recorder is not None:
            recorder.write_event(key, fields)

    def poll(self, timeout_ms: int = POLL_MS) -> int:
        """Drain once; returns how many messages were applied."""
        if time.monotonic() - self._last_poll > STALL_S + timeout_ms / 1000:
            # the viewer itself did not run (a loaded machine): what the ranks sent meanwhile
            # is still arriving, so judge silences and waits once it has been taken in
            self._next_diagnosis = time.monotonic() + STALL_S
        self._yield_to_frame()
        messages = self.receiver.drain(timeout_ms, pause=self._yield_to_frame)
        self._last_poll = time.monotonic()
        if self.share is not None:  # (every poll: a follower's hello is answered at once)
            self.share.pump(self.receiver.raw or [])
        if messages:
            if self.first_message_ns is None:
                self.first_message_ns = time.time_ns()
            arrived = self.model.clock()  # off the socket now, however long applying takes
            received_ns = time.time_ns()
            for i in range(0, len(messages), APPLY_SLICE):
                self._yield_to_frame()
                with self.lock:
                    self.model.apply(messages[i:i + APPLY_SLICE], arrived)
            with self.lock:
                # with messages left on the socket, its heartbeats were shed but the latest
                # (viewer/shedding.py), never its records: those say how old what it shows is
                m = self.model
                m.behind_s = behind(m.newest_record_ns if self.receiver.backlogged
                                    else m.newest_sent_ns, time.time_ns())
            if self.recorder:
                self.recorder.write(messages, received_ns)
        else:
            self.model.behind_s = 0.0  # nothing left on the socket: caught up
            if self.recorder:
                self.recorder.maybe_flush()
        if time.monotonic() >= self._next_diagnosis:
            self._next_diagnosis = time.monotonic() + DIAGNOSE_EVERY_S
            with self.lock:
                found = self.diagnosis.update()
            self._report(found)
        return len(messages)

    def reset(self) -> None:
        """Start again from an empty model and diagnosis (a restarted demo); the recording is
        not reset."""
        with self.lock:
            model, self.model = self.model, Model(self.model.clock, self.model.local_host)
            if model.new_instances is not None:
                self.model.new_instances = []
            self.diagnosis = Diagnosis(self.model)

    def _report(self, found: list[Finding]) -> None:
        if not found:
            return
        if self.recorder:
            self.recorder.write_findings(found)
        if self.new_findings is not None:
            with self.lock:
                self.new_findings.extend(found)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.poll():
                # let the next round's messages gather: matching and diagnosing cost per
                # round, so under load fewer, larger rounds cost far less
                self._stop.wait(ROUND_S)

    def close(self, ended: Iterable[int] | None = ()) -> None:
        """Drain what already arrived, write the summary and release the socket.

        ``ended``: ranks known to have ended (a demo's, from the launcher); those that left
        without a goodbye are reported as lost before the recording closes. None: the ranks
        gone silent without a goodbye (a watcher is never told that a job ended).
        """
        self._stop_collecting()
        while self.poll(0):
            pass
        with self.lock:
            found = self.diagnosis.update()
            ended = self.diagnosis.silent() if ended is None else sorted(set(ended))
            found += self.diagnosis.finish(ended)
        self._report(found)
        if self.recorder:  # with the ranks judged ended: a playback judges them the same
            self.recorder.close({**self.summary(), "ended": ended})
            self.recorder = None
        self.receiver.close()
        self._stop_serving()

    def summary(self) -> dict:
        m = self.model
        failed, unmatched = m.incomplete()  # the viewer closes: they will not complete now
        return {"records": m.records, "instances": m.instances, "transfers": m.transfers,
                "failed": m.failed + failed, "unmatched": unmatched,
                "rejected_messages": self.receiver.rejected,
                # what the viewer let go of when it fell behind (viewer/shedding.py)
                "shed": {k: n for k, n in self.receiver.shed.items() if n},
                "dropped_by_ranks": {r: s.dropped for r, s in sorted(m.ranks.items())},
                "dropped_by_relays": {n: d for n, (d, _) in sorted(self.receiver.relays.items())},
                "unmatched_pending": m.evicted}
