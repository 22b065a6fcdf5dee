"""What the views read from what feeds them: a live ``session.Session``, a recording's
``playback.Playback`` or a test's fake all offer this, so that the TUI reads plain attributes
whichever it is shown."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from commviz.knowledge.nccl_log import NcclLog
from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.model import Model
from commviz.viewer.recording import Recorder


@runtime_checkable
class Source(Protocol):
    """A model written by a collector under ``lock``, and what the screen says of it.
    ``diagnosis``: the one watching ``model`` (None: none does); ``nccl``: what NCCL said
    of itself in the job's output (None: no output is read); ``recorder``: where the run is
    recorded (None: it is not); ``addr``: where messages come from (an address, a file);
    ``rejected``: messages turned away as malformed; ``shed``: telemetry samples, phase
    marks and topology messages let go of while the viewer was behind (viewer/shedding.py);
    ``dropped_by_relays``: op records the relays on the way said they dropped."""

    @property
    def model(self) -> Model: ...

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def diagnosis(self) -> Diagnosis | None: ...

    @property
    def nccl(self) -> NcclLog | None: ...

    @property
    def recorder(self) -> Recorder | None: ...

    @property
    def addr(self) -> str: ...

    @property
    def rejected(self) -> int: ...

    @property
    def shed(self) -> int: ...

    @property
    def dropped_by_relays(self) -> int: ...

    def start(self) -> None:
        """Start collecting (a background thread)."""

    def close(self, ended: Iterable[int] | None = ()) -> None:
        """Stop collecting; ``ended``: the ranks known to have ended (None: the silent)."""

    def reset(self) -> None:
        """Start again from an empty model (a restarted demo, a recording from its start)."""

    def frame_begins(self) -> None:
        """A frame is being drawn: the collector holds back until ``frame_ends``."""

    def frame_ends(self) -> None: ...

    def note_event(self, key: str, fields: dict[str, Any]) -> None:
        """What a launcher told of the ranks' processes ("rank failed"...): how a rank's
        process ended goes to the model; a live session records it too."""
