"""A rank's state, by the one rule every view follows (the ranks panel, the ring, the nodes
panel, the metrics' ranks alive): pure, so that the viewer's own modules read it too."""

from __future__ import annotations

import enum
import signal

from commviz.viewer.model import RankState

SILENT_AFTER_S = 1.5  # three missed heartbeats
# how a rank its launcher stopped ends: SIGTERM itself, or exit 128+15 where the program's
# handler exits on it (commviz's demo ranks)
STOPPED_CODES = frozenset({-signal.SIGTERM, 128 + signal.SIGTERM})


class State(enum.Enum):
    """A rank's state, in the order the rule tries them: what its launcher said of its
    process is plainer than any finding, a goodbye than a silence, a silence than its last
    operation."""

    STOPPED = enum.auto()  # its process was stopped by SIGTERM (STOPPED_CODES): a launcher
    # stops the others once one fails, or a scheduler its job; no crash of its own
    FAILED = enum.auto()  # its process failed (a non-zero exit code): no finding is shown
    EXITED = enum.auto()  # it said goodbye
    ENDED = enum.auto()  # its process ended with exit code 0, without a goodbye
    SILENT = enum.auto()  # nothing heard from it for SILENT_AFTER_S
    IN_OP = enum.auto()  # inside an operation
    DONE = enum.auto()  # between operations, after one
    IDLE = enum.auto()  # no operation yet


def rank_state(s: RankState, now: float, in_op: bool, behind: float = 0.0) -> State:
    """The state of the rank ``s`` at ``now`` (the model clock's); ``in_op``: it has an
    operation in flight; ``behind``: how far the viewer is behind the ranks (``Model.
    behind_s``), which a silence must pass as well: a backlog holds their messages. A
    finding that names the rank is shown over any state but ``FAILED``."""
    if s.exit_code in STOPPED_CODES:
        return State.STOPPED
    if s.exit_code:
        return State.FAILED
    if s.exited:
        return State.EXITED
    if s.exit_code is not None:
        return State.ENDED
    if now - s.last_seen > SILENT_AFTER_S + behind:
        return State.SILENT
    if in_op:
        return State.IN_OP
    return State.DONE if s.last_op else State.IDLE
