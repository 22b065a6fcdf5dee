"""``commviz.phase(name)``: compute phases a program marks, sent beside its communication.

Torch-free and cheap: entering and leaving a phase reads the clock twice and appends one
tuple to a deque that the emitter thread drains. Without ``instrument()`` there is no
deque, and a phase does nothing but keep its nesting count.
"""

from __future__ import annotations

import collections
import threading
import time
from contextlib import ContextDecorator
from typing import Any

# protocol.PHASE_NAME_MAX and PHASE_DEPTH_MAX, repeated so that ``import commviz`` stays
# free of numpy and msgpack (a test checks they agree)
NAME_MAX = 64
DEPTH_MAX = 255
# The emitter's phase queue while instrumented, else None: set by hooks.instrument().
queue: collections.deque[tuple[str, int, int, int]] | None = None
_time_ns = time.time_ns


class _Depth(threading.local):
    value = 0


_depth = _Depth()


class phase(ContextDecorator):  # lower case: used like a function, ``with commviz.phase(...)``
    """Mark a compute phase (``"forward"``, ``"backward"``, ...) on this rank.

    As a context manager (``with commviz.phase("backward"): ...``) or as a decorator
    (``@commviz.phase("optimizer")``). Phases nest; each is sent when it ends.
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= NAME_MAX:
            raise ValueError(f"a phase name is a string of 1 to {NAME_MAX} "
                             f"characters, not {name!r}")
        self.name = name
        self._t0 = -1
        self._level = 0

    def _recreate_cm(self) -> phase:
        return phase(self.name)  # a decorated function may run on several threads at once

    def __enter__(self) -> phase:
        self._level = _depth.value
        _depth.value = self._level + 1
        self._t0 = _time_ns() if queue is not None else -1
        return self

    def __exit__(self, *exc: Any) -> bool:
        _depth.value = self._level
        q = queue
        if q is not None and self._t0 >= 0:
            q.append((self.name, min(self._level, DEPTH_MAX), self._t0,
                      _time_ns()))
        return False
