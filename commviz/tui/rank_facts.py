"""What the views read of a rank beyond the model's own fields and its state
(``viewer.rank_state``): the operation it is in, and the backend its group runs."""

from __future__ import annotations

from commviz.knowledge import schedules
from commviz.viewer.model import InFlight, Model


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
