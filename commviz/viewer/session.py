"""A viewing session: receiver -> model (+ recording), drained on a background thread.

The TUI and the headless printer read the model under ``lock``; only this thread writes it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from .. import recording
from .model import Model
from .transport import DEFAULT_BIND, Receiver

POLL_MS = 20


class Session:
    def __init__(self, bind: str = DEFAULT_BIND, record: str | Path | None = None,
                 collect_instances: bool = False) -> None:
        self.receiver = Receiver(bind)
        self.model = Model()
        if collect_instances:
            self.model.new_instances = []
        try:
            self.recorder = recording.Recorder(record) if record else None
        except OSError as exc:
            self.receiver.close()
            raise recording.RecordingError(f"cannot write {record}: {exc.strerror}") from None
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def addr(self) -> str:
        return self.receiver.addr

    @property
    def rejected(self) -> int:
        return self.receiver.rejected

    def poll(self, timeout_ms: int = POLL_MS) -> int:
        """Drain once; returns how many messages were applied."""
        messages = self.receiver.drain(timeout_ms)
        if messages:
            with self.lock:
                self.model.apply(messages)
            if self.recorder:
                self.recorder.write(messages)
        elif self.recorder:
            self.recorder.maybe_flush()
        return len(messages)

    def reset(self) -> None:
        """Start again from an empty model (a restarted demo); the recording is not reset."""
        with self.lock:
            model, self.model = self.model, Model(self.model.clock)
            if model.new_instances is not None:
                self.model.new_instances = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="commviz-collector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()

    def close(self) -> None:
        """Drain what already arrived, write the summary and release the socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        while self.poll(0):
            pass
        if self.recorder:
            self.recorder.close(self.summary())
            self.recorder = None
        self.receiver.close()

    def summary(self) -> dict:
        m = self.model
        return {"records": m.records, "instances": m.instances, "transfers": m.transfers,
                "rejected_messages": self.receiver.rejected,
                "dropped_by_ranks": {r: s.dropped for r, s in sorted(m.ranks.items())},
                "unmatched_pending": m.evicted}
