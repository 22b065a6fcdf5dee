"""How a failed run ended, told first: the first rank whose process ended, how and after
what, then the op each other rank was inside as it ended and whether its launcher stopped
it. Told live, the moment a harvester says a process ended (its records recovered first),
and again at the job's end where there is more to say.

It reads the harvesters' ``gone`` notices (``Model.first_ended``: when and in what order the
processes ended, their exit codes where a harvester is their parent) and the records in flight
at the end, those a harvester recovered from the dead processes' rings among them. Without
notices (no harvester: a job started outside commviz) there is no account; nor when the first
process to end said goodbye first (it left cleanly, or after an error of its own: the
findings of what it failed in say that already).
"""

from __future__ import annotations

from commviz.viewer.diagnose import facts as fx
from commviz.viewer.diagnose import watch as w
from commviz.viewer.diagnose.finding import Finding
from commviz.viewer.model import InFlight, Model
from commviz.viewer.rank_state import STOPPED_CODES


def first_end(model: Model, now: float, wall: int,
              held: dict[tuple, dict[int, InFlight]]) -> Finding | None:
    """The account of how the run ended, as a finding of its first rank (see the module).
    ``held``: per account, the op each rank was inside as it was first seen ending; kept
    across calls (the live diagnosis makes the account the moment a harvester says, and the
    others then fail in that op or leave it), so that it says where they were, not where
    they are."""
    ended = model.first_ended()
    if not ended:
        return None
    first = ended[0]
    if first.exited:  # it said goodbye: what it failed in, if anything, is found already
        return None
    key = ("first_end", first.rank, first.job)
    latest = _latest_in_flight(model)
    kept = held.setdefault(key, {})
    for r, f in latest.items():
        kept.setdefault(r, f)
    latest = dict(kept)
    own = latest.pop(first.rank, None)
    if own is not None and own.t_start > first.last_end_ns:  # it ended inside an op
        last, where, after, during = _call(own), _where(own.site), None, True
    else:
        last = w.last_record(first)
        where = _where(model.site_of(first.last_site))
        after = (None if last is None or not first.last_end_ns
                 else max(0.0, (first.ended_ns - first.last_end_ns) / 1e6))
        during = False
    groups: dict[tuple, list[int]] = {}
    for r, f in sorted(latest.items()):
        stopped = model.ranks[r].exit_code in STOPPED_CODES
        groups.setdefault((_call(f), _where(f.site), stopped), []).append(r)
    inside = tuple(fx.Inside(tuple(ranks), call, at, stopped)
                   for (call, at, stopped), ranks in groups.items())
    return Finding("lost_rank", (first.rank,), None, None,
                   fx.FirstEnd(first.rank, first.exit_code, after, last, where, inside, during),
                   key, now, wall)


def _latest_in_flight(model: Model) -> dict[int, InFlight]:
    """Each rank's latest op still in flight, for the ranks whose process ended (a harvester
    said so, or it said nothing more: no goodbye)."""
    latest: dict[int, InFlight] = {}
    for f in model.inflight.values():
        s = model.ranks.get(f.rank)
        if s is None or s.exited:
            continue
        if f.rank not in latest or f.t_start > latest[f.rank].t_start:
            latest[f.rank] = f
    return latest


def _call(f: InFlight) -> fx.Call:
    return fx.Call(f.op, f.peer, f.seq)


def _where(site: tuple[str, int] | None) -> str | None:
    return None if site is None else f"{site[0].rsplit('/', 1)[-1]}:{site[1]}"
