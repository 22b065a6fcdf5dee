"""What the viewer lets go of when it falls behind, in a fixed order, and never an op record.

The viewer is behind when a drain finds more waiting than one round takes in. It then sheds,
in this order, what the next messages repeat anyway:

1. telemetry: of the heartbeats one process sent in the round, only the latest is applied
   (it says all the earlier ones did about who and where the rank is, and that it is alive);
   their clock round trips are kept, moved onto it, so clock alignment loses nothing;
2. compute phases (``ph``): the lanes' phase bands, which the program marks;
3. GPU topologies (``topo``): each process repeats its own every 10 s, so one shed is
   back within 10 s.

Op records, collectives and transfers alike, and the announcements of ops in flight (what a
hang leaves behind), are never shed here. What the viewer cannot take in at all waits in each
peer's bounded receive queue (transport.RECV_HWM), and past it in the rank's own send queue,
which drops and counts, as the rank's heartbeats then tell (``dropped``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from commviz.wire import protocol

# what shedding counts, in the order it sheds: (key, what the screen and stats call it)
KINDS = {"telemetry": "telemetry samples", "phases": "phase marks",
         "topology": "GPU topology messages"}


def shed(messages: list[protocol.Message], counts: Counter[str]) -> list[protocol.Message]:
    """``messages`` without what a viewer that is behind lets go of (counted in ``counts``)."""
    latest: dict[tuple[int, int], int] = {}  # process -> index of its last heartbeat
    for i, msg in enumerate(messages):
        if type(msg) is protocol.Heartbeat:
            latest[(msg.rank, msg.inc)] = i
    clocks: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    kept: list[protocol.Message] = []
    for i, msg in enumerate(messages):
        kind = type(msg)
        if kind is protocol.Heartbeat:
            who = (msg.rank, msg.inc)
            if latest[who] != i:
                counts["telemetry"] += 1
                clocks.setdefault(who, []).extend(msg.clock)
                continue
            if who in clocks:
                rows = (*clocks.pop(who), *msg.clock)[-protocol.CLOCK_SAMPLES_MAX:]
                msg = dataclasses.replace(msg, clock=rows)
        elif kind is protocol.Phases:
            counts["phases"] += len(msg.spans)
            continue
        elif kind is protocol.GpuTopology:
            counts["topology"] += 1
            continue
        kept.append(msg)
    return kept
