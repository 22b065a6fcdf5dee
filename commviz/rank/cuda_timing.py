"""GPU completion times of ops on CUDA tensors through NCCL, from CUDA events.

With NCCL a call returns once its work is queued: the host time then says when it was
queued, not when the GPU finished it. So when such an op completes on the host side (the
call returned, its future's callback ran, or ``wait()`` returned), the hooks record a CUDA
event on the current stream, which torch has by then made wait for NCCL's stream; the
record keeps ``t_end = -1``. The emitter thread polls ``event.query()`` every tick, which
never blocks and never synchronizes the job, and sets ``t_end`` once the event has completed.

An event's completion becomes wall-clock time through a reference event per device,
recorded on a side stream of commviz's own and synchronized on the emitter thread (that
blocks only the emitter, and the side stream is idle): the reference ran between the host
times taken before the record and after the sync, so its wall time is their midpoint, give
or take half their distance (``uncertainty_ns``). ``reference.elapsed_time(event)`` then
places the event. The reference is renewed every RECALIBRATE_S so the GPU's clock cannot
drift far from the host's.

Loaded only by records.py when a CUDA tensor goes through an NCCL group: never on CPU.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from commviz.wire.protocol import COLUMNS

# a record's fields are in the protocol's column order (rank/records.py checks it); taken from
# the protocol, not from records, which imports this module when a first CUDA op needs it
FLAGS, T_START, T_END = (list(COLUMNS).index(name) for name in ("flags", "t_start", "t_end"))

RECALIBRATE_S = 10.0


class Reference(NamedTuple):
    event: Any           # a completed CUDA event with timing
    wall_ns: int         # its wall-clock time, estimated
    uncertainty_ns: int  # half the interval that surely holds it
    made_at: float       # monotonic seconds when it was made


class GpuTimer:
    """Pending events of one rank process, and the references that place them in time.

    ``cuda`` is ``torch.cuda`` (tests give a fake with the same ``Event``, ``Stream``,
    ``current_stream`` and ``current_device``).
    """

    def __init__(self, cuda: Any, clock: Callable[[], int] = time.time_ns,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._cuda = cuda
        self._clock = clock
        self._monotonic = monotonic
        # (record, event, device): appended by the rank's threads, popped by the emitter's
        self.pending: collections.deque[tuple[list, Any, int]] = collections.deque()
        self.references: dict[int, Reference] = {}
        self._side: dict[int, Any] = {}
        self.fallbacks = 0  # records that got a host time because an event call failed

    def track(self, rec: list, flag: int) -> None:
        """The op of ``rec`` has completed on the host side: time it by an event on the
        current stream. If no event can be recorded, it is ended now by host time and its
        ``flag`` (the GPU-timed bit) cleared."""
        try:
            device = self._cuda.current_device()
            event = self._cuda.Event(enable_timing=True)
            event.record(self._cuda.current_stream(device))
        except Exception:
            self.fallbacks += 1
            rec[FLAGS] &= ~flag
            rec[T_END] = self._clock()
            return
        self.pending.append((rec, event, device))

    def poll(self) -> int:
        """On the emitter thread: end the records whose event has completed; returns how many.

        Each pending entry is looked at once per call; those still running go back to the
        end of the queue, so entries the rank appends meanwhile are never lost.
        """
        pending = self.pending
        done = 0
        for _ in range(len(pending)):
            rec, event, device = pending.popleft()
            try:
                if not event.query():
                    pending.append((rec, event, device))
                    continue
                ref = self._reference(device)
                t_end = ref.wall_ns + round(ref.event.elapsed_time(event) * 1e6)
            except Exception:  # a failed query or timing: the host time of noticing
                self.fallbacks += 1
                t_end = self._clock()
            rec[T_END] = max(t_end, rec[T_START])  # never before its start (calibration error)
            done += 1
        return done

    def _reference(self, device: int) -> Reference:
        ref = self.references.get(device)
        if ref is None or self._monotonic() - ref.made_at >= RECALIBRATE_S:
            ref = self.references[device] = self.calibrate(device)
        return ref

    def calibrate(self, device: int) -> Reference:
        """A new reference event for ``device``, on commviz's own idle stream."""
        stream = self._side.get(device)
        if stream is None:
            stream = self._side[device] = self._cuda.Stream(device=device)
        event = self._cuda.Event(enable_timing=True)
        t0 = self._clock()
        event.record(stream)
        event.synchronize()
        t1 = self._clock()
        return Reference(event, (t0 + t1) // 2, (t1 - t0) // 2, self._monotonic())
