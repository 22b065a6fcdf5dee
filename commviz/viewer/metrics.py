"""Prometheus metrics of a live session (``--metrics [HOST:]PORT``, docs/metrics.md).

Nothing is counted on the intake path: at each scrape, a prometheus-client Collector reads
what the model, the diagnosis and the receiver already keep, under the session's lock, in
O(ranks + statistics rows); the rows' percentiles are figured after it. Bandwidths are the
stats panel's own (``StatRow.summary``, with nccl-tests' formulas of knowledge/bandwidth),
never figured a second way here.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector, CollectorRegistry

from commviz.viewer.diagnose import Diagnosis
from commviz.viewer.diagnose.finding import TYPES
from commviz.viewer.model import TIME_BUCKETS_NS, Model, StatRow
from commviz.viewer.rank_state import State, rank_state
from commviz.viewer.session import Session
from commviz.viewer.shedding import KINDS
from commviz.viewer.transport import BindError

DEFAULT_HOST = "127.0.0.1"  # loopback unless a host is given
LATE_RANKS_MAX = 64  # the late arrivals of the ranks waited for longest, no more (labels)
ALIVE = (State.IN_OP, State.DONE, State.IDLE)
_LE = [f"{ns / 1e9:g}" for ns in TIME_BUCKETS_NS.tolist()] + ["+Inf"]
_OP_LABELS = ["op", "ranks", "size_bucket"]


@dataclass(frozen=True)
class Intake:
    """What the receiver let go of, as the status panel counts it: messages rejected, those
    shed while the viewer was behind (by kind, ``shedding.KINDS``), and op records the ranks
    and the relays dropped."""

    rejected: int = 0
    shed: dict[str, int] = field(default_factory=dict)
    dropped_by_relays: int = 0


def size_bucket(size: int) -> str:
    """The label of a size S in bytes: the power of two at or above it ("0": no data)."""
    return str(1 << (size - 1).bit_length()) if size > 0 else "0"


def families(model: Model, diagnosis: Diagnosis, intake: Intake) -> list[Metric]:
    """Every metric of ``model`` and ``diagnosis`` now (docs/metrics.md says each)."""
    return take(model, diagnosis, intake).families()


@dataclass
class Taken:
    """What a scrape read under the lock: the statistics rows (copies: their summaries, the
    costly part, are read after it) and every other metric already made."""

    rows: list[tuple[tuple[str, int, int], StatRow]]
    others: list[Metric]

    def families(self) -> list[Metric]:
        return [*_op_families(self.rows), *self.others]


def take(model: Model, diagnosis: Diagnosis, intake: Intake) -> Taken:
    """What ``families`` reads of ``model`` and ``diagnosis``, under the lock of whoever writes
    them: O(ranks + statistics rows)."""
    rows = [(key, row.copy()) for key, row in sorted(model.stats.items())]
    return Taken(rows, [*_count_families(model), *_late_families(diagnosis),
                        *_finding_families(diagnosis), *_rank_families(model),
                        *_intake_families(model, intake)])


def _op_families(rows: list[tuple[tuple[str, int, int], StatRow]]) -> list[Metric]:
    ops = CounterMetricFamily("commviz_ops", "Collective instances and p2p transfers "
                              "completed, matched across their ranks", labels=_OP_LABELS)
    nbytes = CounterMetricFamily("commviz_op_bytes", "Bytes the completed ops moved: "
                                 "nccl-tests' size S, once per op", labels=_OP_LABELS)
    times = HistogramMetricFamily("commviz_op_duration_seconds", "Time of each completed op, "
                                  "from its last rank's arrival to its last rank's end",
                                  labels=_OP_LABELS)
    algbw = GaugeMetricFamily("commviz_algbw_bytes_per_second", "nccl-tests' algbw (S over "
                              "the median time), as the stats panel shows it",
                              labels=_OP_LABELS)
    busbw = GaugeMetricFamily("commviz_busbw_bytes_per_second", "nccl-tests' busbw (algbw "
                              "times the op's bus factor), as the stats panel shows it",
                              labels=_OP_LABELS)
    # the statistics rows (op, group size, exact S) summed into size buckets; a bucket's
    # bandwidth is its rows' figures weighted by their op counts
    buckets: dict[tuple[str, str, str], _Bucket] = {}
    for (op, n, size), row in rows:
        buckets.setdefault((op, str(n), size_bucket(size)), _Bucket()).add(row, size)
    for key, b in buckets.items():
        labels = list(key)
        ops.add_metric(labels, b.count)
        nbytes.add_metric(labels, b.moved)
        times.add_metric(labels, list(zip(_LE, b.times.cumsum().tolist())), b.time_sum_ns / 1e9)
        for family, (weighted, weight) in ((algbw, b.algbw), (busbw, b.busbw)):
            if weight:
                family.add_metric(labels, weighted / weight)
    return [ops, nbytes, times, algbw, busbw]


def _count_families(model: Model) -> list[Metric]:
    return [CounterMetricFamily("commviz_op_records", "Op records the ranks sent, one per rank "
                                "per op, as the viewer took them in", value=model.records),
            CounterMetricFamily("commviz_ops_failed", "Ops matched across their ranks that "
                                "failed on some rank or that the ranks called differently",
                                value=model.failed)]


@dataclass
class _Bucket:
    """The statistics rows of one (op, group size, size bucket): their sums, and each
    bandwidth (bytes/s) times its row's op count, with the counts that have one."""

    count: int = 0
    moved: int = 0
    times: np.ndarray = field(default_factory=lambda: np.zeros(len(_LE), np.int64))
    time_sum_ns: int = 0
    algbw: tuple[float, int] = (0.0, 0)
    busbw: tuple[float, int] = (0.0, 0)

    def add(self, row: StatRow, size: int) -> None:
        self.count += row.count
        self.moved += row.count * size
        self.times += row.buckets
        self.time_sum_ns += row.time_sum_ns
        summary = row.summary()  # the stats panel's figures
        for name in ("algbw", "busbw"):
            gbps = summary[f"{name}_gbps"]
            if gbps is not None:
                weighted, weight = getattr(self, name)
                setattr(self, name, (weighted + gbps * 1e9 * row.count, weight + row.count))


def _late_families(diagnosis: Diagnosis) -> list[Metric]:
    count = CounterMetricFamily("commviz_late_arrivals", "Times the others waited for this "
                                f"rank at a collective (the {LATE_RANKS_MAX} ranks waited for "
                                "longest)", labels=["rank"])
    waited = CounterMetricFamily("commviz_late_arrival_wait_seconds", "How long the others "
                                 "waited for this rank, in all", labels=["rank"])
    for rank, late in diagnosis.late_arrivals()[:LATE_RANKS_MAX]:
        count.add_metric([str(rank)], late.count)
        waited.add_metric([str(rank)], late.waited_ns / 1e9)
    return [count, waited]


def _finding_families(diagnosis: Diagnosis) -> list[Metric]:
    kinds = [t for t in TYPES if t != "resolved"]
    open_now = GaugeMetricFamily("commviz_findings_open", "Findings that hold now",
                                 labels=["type"])
    told = CounterMetricFamily("commviz_findings", "Findings reported", labels=["type"])
    ended = CounterMetricFamily("commviz_findings_resolved", "Findings that cleared, by the "
                                "type of the finding", labels=["type"])
    holding = {t: 0 for t in kinds}
    for f in diagnosis.findings():
        holding[f.type] = holding.get(f.type, 0) + 1
    for t in kinds:
        open_now.add_metric([t], holding[t])
        told.add_metric([t], diagnosis.reported[(t, None)])
        ended.add_metric([t], diagnosis.reported[("resolved", t)])
    return [open_now, told, ended]


def _rank_families(model: Model) -> list[Metric]:
    alive = GaugeMetricFamily("commviz_ranks_alive", "Ranks heard from lately and not ended "
                              "(the ranks panel's rule: in an op, between ops or idle)",
                              labels=["node"])
    by_state = GaugeMetricFamily("commviz_ranks", "Ranks by node and state, as the ranks "
                                 "panel says it", labels=["node", "state"])
    now, in_op = model.clock(), {op.rank for op in model.inflight.values()}
    for host, ranks in model.nodes().items():
        states = {s: 0 for s in State}
        for r in ranks:
            states[rank_state(model.ranks[r], now, r in in_op, model.behind_s)] += 1
        alive.add_metric([host], sum(states[s] for s in ALIVE))
        for s, n in states.items():
            by_state.add_metric([host, s.name.lower()], n)
    return [alive, by_state]


def _intake_families(model: Model, intake: Intake) -> list[Metric]:
    behind = GaugeMetricFamily("commviz_viewer_behind_seconds", "How far the viewer is behind "
                               "the ranks (0: caught up)", value=model.behind_s)
    rejected = CounterMetricFamily("commviz_messages_rejected", "Messages the viewer rejected "
                                   "as malformed or foreign", value=intake.rejected)
    shed = CounterMetricFamily("commviz_messages_shed", "Messages the viewer let go of while "
                               "behind, by kind", labels=["kind"])
    for kind in KINDS:
        shed.add_metric([kind], intake.shed.get(kind, 0))
    dropped = CounterMetricFamily("commviz_op_records_dropped", "Op records dropped before "
                                  "the viewer: by the ranks (a full queue) or the relays",
                                  labels=["by"])
    dropped.add_metric(["ranks"], sum(s.dropped for s in model.ranks.values()))
    dropped.add_metric(["relays"], intake.dropped_by_relays)
    return [behind, rejected, shed, dropped]


class Families(Collector):
    """A prometheus-client collector of ``read()``'s metric families, read at each scrape."""

    def __init__(self, read: Callable[[], Iterable[Metric]]) -> None:
        self.read = read

    def collect(self) -> Iterable[Metric]:
        return self.read()


def parse_address(spec: str) -> tuple[str, int]:
    """``[HOST:]PORT`` as (host, port); loopback without a host. ValueError says what is
    wrong."""
    host, _, port = spec.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{spec!r}: give [HOST:]PORT, a port from 1 to 65535 (e.g. 9464)")
    return host, int(port)


class MetricsServer:
    """The HTTP server of a session's ``/metrics``, on a thread of its own until ``close``."""

    def __init__(self, session: Session, host: str, port: int) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Families(lambda: _of_session(session)))
        try:
            self._server, self._thread = start_http_server(port, host, registry=registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise BindError(f"--metrics {host}:{port}: the port is already in use (another "
                                "commviz, or an exporter?): pick another") from None
            raise BindError(f"--metrics {host}:{port}: cannot listen there: "
                            f"{exc.strerror or exc}") from None
        self.url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)


def _of_session(session: Session) -> list[Metric]:
    """The session's metrics (on the server's thread): the receiver's counters are the
    collector thread's, written outside the lock, and copied at once."""
    receiver = session.receiver
    intake = Intake(receiver.rejected, dict(receiver.shed), session.dropped_by_relays)
    with session.lock:
        taken = take(session.model, session.diagnosis, intake)
    return taken.families()
