"""What the ranks panel says of each node once a job has more ranks than the screen has rows:
its ranks' states counted, its worst rank and by how much, its GPUs' load as min, median and
max, and how it ranks against the others (findings first, then failures and silences, then
lateness, then the healthy, who fold into one line). Pure: words are the panel's."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from commviz.tui.rank_facts import ops_in
from commviz.viewer.diagnose import Finding, Lateness
from commviz.viewer.model import HostClock, Model
from commviz.viewer.rank_state import State, rank_state

LATE_RECENT_NS = 10_000_000_000  # a node late this recently is not folded among the healthy
# the worst first: a finding names a rank of it, a rank failed or fell silent, one was late
FLAGGED, BROKEN, LATE, HEALTHY = range(4)
LOAD_KEYS = ("gpu_util_pct", "gpu_mem_used", "gpu_power_w")


@dataclass(frozen=True)
class Spread:
    """Min, median and max of one measure over a node's GPUs."""

    low: float
    mid: float
    high: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread | None:
        return Spread(min(values), statistics.median(values), max(values)) if values else None


@dataclass(frozen=True)
class Worst:
    """A node's worst rank: named by a finding (``finding``), failed or silent for
    ``silent_s`` (``state``), or late by ``late_ns`` at its longest."""

    rank: int
    state: State
    finding: Finding | None = None
    late_ns: int = 0
    silent_s: float = 0.0


@dataclass(frozen=True)
class NodeRow:
    host: str
    ranks: tuple[int, ...]
    # ranks per state; the in-op ones per (op, seq), the commonest first
    states: Counter[State]
    in_ops: tuple[tuple[str, int, int], ...]  # (op, seq, ranks)
    late: int  # ranks the others waited for lately
    worst: Worst | None
    severity: int  # FLAGGED, BROKEN, LATE or HEALTHY
    clock: HostClock | None
    load: Mapping[str, Spread] = field(default_factory=dict)  # by LOAD_KEYS

    @property
    def healthy(self) -> bool:
        return self.severity == HEALTHY

    def sort_key(self) -> tuple:
        late = self.worst.late_ns if self.worst is not None else 0
        return (self.severity, -late, self.ranks[0])


def node_rows(model: Model, now: float, now_ns: int, flagged: Mapping[int, Finding],
              late: Iterable[tuple[int, Lateness]]) -> list[NodeRow]:
    """Every node's row, the worst first. O(ranks) per call: one state per rank."""
    ops = ops_in(model)
    lateness = {r: t for r, t in late if now_ns - t.last_ns <= LATE_RECENT_NS}
    clocks = model.clock_offsets()
    rows = [_node_row(model, host, ranks, now, ops, flagged, lateness, clocks.get(host))
            for host, ranks in model.nodes().items()]
    return sorted(rows, key=NodeRow.sort_key)


def _node_row(model: Model, host: str, ranks: list[int], now: float, ops: Mapping,
              flagged: Mapping[int, Finding], lateness: Mapping[int, Lateness],
              clock: HostClock | None) -> NodeRow:
    states: Counter[State] = Counter()
    in_ops: Counter[tuple[str, int]] = Counter()
    candidates: list[tuple[tuple, Worst]] = []
    loads: dict[str, list[float]] = {key: [] for key in LOAD_KEYS}
    for rank in ranks:
        s = model.ranks[rank]
        kind = rank_state(s, now, rank in ops, model.behind_s)
        states[kind] += 1
        if kind is State.IN_OP:
            in_ops[(ops[rank].op, ops[rank].seq)] += 1
        if rank in flagged:
            candidates.append(((0, 0.0), Worst(rank, kind, finding=flagged[rank])))
        elif kind in (State.FAILED, State.SILENT):
            silent = now - s.last_seen
            candidates.append(((1, -silent), Worst(rank, kind, silent_s=silent)))
        elif rank in lateness:
            candidates.append(((2, -lateness[rank].longest_ns),
                               Worst(rank, kind, late_ns=lateness[rank].longest_ns)))
        if s.telemetry:
            tel = s.telemetry[-1][1]
            for key in LOAD_KEYS:
                if tel.get(key) is not None:
                    loads[key].append(float(tel[key]))
    worst = min(candidates, key=lambda c: (c[0], c[1].rank))[1] if candidates else None
    severity = HEALTHY if worst is None else (
        FLAGGED if worst.finding else BROKEN if worst.state in (State.FAILED, State.SILENT)
        else LATE)
    spreads = {key: spread for key in LOAD_KEYS if (spread := Spread.of(loads[key]))}
    return NodeRow(host, tuple(ranks), states,
                   tuple((op, seq, n) for (op, seq), n in in_ops.most_common()),
                   sum(r in lateness for r in ranks), worst, severity, clock, spreads)
