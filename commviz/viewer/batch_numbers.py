"""Each batch of a process taken once, though its harvester sends its last ones again.

A rank's emitter numbers its ``ops`` batches (1, 2, ...) and notes in its ring which batch
shipped each record. A batch handed to ZeroMQ has not yet left the process: its I/O thread
writes it a moment later, and a process that dies in that moment (``os._exit``, SIGKILL)
takes it along. So the harvester of a dead process sends its last ``ring.RESEND_BATCHES``
batches again, under their own numbers, flagged recovered, before what it never shipped.
A process' batches reach the viewer in order, and the harvester's copies in order too, from
another connection: the first copy of a number is taken, and any later copy of it, or of a
lower number, is dropped (a batch number is never reused, so what is dropped the viewer has).

One int per process (rank, incarnation) the viewer has heard from, one comparison per batch.
"""

from __future__ import annotations

from commviz.wire import protocol


class BatchNumbers:
    """``taken(messages)``: ``messages`` in order, without the batches already had;
    ``dropped``: how many were, in all."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], int] = {}
        self.dropped = 0

    def taken(self, messages: list[protocol.Message]) -> list[protocol.Message]:
        if not any(type(m) is protocol.OpBatch and m.n for m in messages):
            return messages
        out = []
        last = self._last
        for msg in messages:
            if type(msg) is protocol.OpBatch and msg.n:
                peer = (msg.rank, msg.inc)
                if msg.n <= last.get(peer, 0):
                    self.dropped += 1
                    continue
                last[peer] = msg.n
            out.append(msg)
        return out
