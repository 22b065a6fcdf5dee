"""What the views read of a rank beyond the model's own fields: which state it is in, by the
one rule the ranks panel and the ring both follow (each says it in its own words and width),
the operation it is in, and the backend its group runs."""

from __future__ import annotations

import enum

from commviz.knowledge import schedules
from commviz.viewer.model import InFlight, Model, RankState

SILENT_AFTER_S = 1.5  # three missed heartbeats


class State(enum.Enum):
    """A rank's state, in the order the rule tries them: what its launcher said of its
    process is plainer than any finding, a goodbye than a silence, a silence than its last
    operation."""

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


def ops_in(model: Model) -> dict[int, InFlight]:
    """The operation each rank is in: of those it has in flight, the one it started first."""
    out: dict[int, InFlight] = {}
    for op in sorted(model.inflight.values(), key=lambda o: o.t_start):
        out.setdefault(op.rank, op)
    return out


def backend_of(model: Model, group: tuple[int, ...]) -> str | None:
    """The backend the group's first rank reported, if it has a schedule."""
    state = model.ranks.get(group[0]) if group else None
    return state.backend if state is not None and state.backend in schedules.BACKENDS else None
