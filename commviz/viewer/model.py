"""The viewer's pure model of a job: ranks, ops in flight, matched collectives and transfers.

No Textual, no sockets, no wall clock of its own (time comes from an injected clock), so
every behaviour is unit-testable with scripted messages. Op batches are applied column-wise
with numpy: records are matched across ranks in bulk, once per drain round, which is what
lets one viewer keep up with millions of records per second.

Matching rules (the protocol's): a collective instance is the records of one process group
(name + global ranks) with one sequence number, one per member rank; a transfer is the k-th
send a->b together with the k-th receive at b from a.

Several jobs into one viewer (``commviz watch``): ranks are numbered from 0 again and
sequence numbers restart at 1, so matching never crosses jobs. Each process that reports as
a rank is one *incarnation*: its incarnation id (``inc``, which every message of a current
rank carries), or for older ranks its host and pid. A new incarnation supersedes the
earlier one of its rank number that has the same job key (``job``: the heartbeat's
rendezvous address, so a job running beside it with other keys is left alone), and joins
the oldest job generation with its job key that has no incarnation of that rank yet, the
same world size and no superseded member, or else starts a new generation (a rank seen
for the first time joins the job under way: it may report late, even after a job-mate
left). Process groups are keyed per generation, so collectives (group + seq) and transfers
(k-th send/recv of a pair) match only within one. Records of an incarnation not heard by
heartbeat yet wait for it (a viewer started late). The rule reads only the order of
messages, so ``commviz stats`` replays a recording into the same generations.
``ranks`` holds one incarnation per rank number, what the views show: the newest one that
has not left. Known limits: ranks without ``inc`` (older commviz) are told apart by rank
number only, as are jobs without a TCP rendezvous store; a rank of a job that never
reported is not told from the same rank of the next job, if that one reports first.

Several hosts: each host's clock offset to the viewer is estimated from the round trips
ranks report in their heartbeats (``commviz/wire/clocksync.py``), and every time a rank on
another host reports is moved onto the viewer's clock as it arrives, with its host's
estimate of that moment, so skews, waits and the timeline compare like with like. Ranks on
the viewer's own host, and hosts without an estimate yet, are taken as they come.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from commviz.knowledge import bandwidth, group_shapes
from commviz.viewer import arrivals
from commviz.viewer.groups import GroupNumbers
from commviz.viewer.inflight import Flying, InFlight
from commviz.viewer.waiting_rows import WaitingRows
from commviz.wire import nodes, protocol
from commviz.wire.clocksync import Offset, Sample, Window


def _by_code(flags: list[bool]) -> np.ndarray:
    """A lookup table indexed by op code (all 256 values, so bad codes cannot overflow)."""
    return np.array(flags + [False] * (256 - len(flags)))


_P2P_CODES = _by_code([op in protocol.P2P for op in protocol.OPS])
_SEND_CODES = _by_code([op in protocol.SENDS for op in protocol.OPS])
_SIZE_IN = _by_code([s == "in" for s in bandwidth.SIZE_SOURCE])
_SIZE_OUT = _by_code([s == "out" for s in bandwidth.SIZE_SOURCE])
_SIZE_TIMES_N = _by_code(list(bandwidth.SIZE_TIMES_N))

# Pending (unmatched) rows kept per kind; beyond this the oldest are dropped and counted.
PENDING_MAX = 1_000_000
UNHEARD_MAX = 100_000  # records held for incarnations not heard by heartbeat yet
RECENT_MAX = 2_000
SEGMENTS_MAX = 2_000  # completed ops kept per rank for the timeline
LANE_COLUMNS = 5  # a lane's row: op code, t_start, t_ready, t_end, gkey
SAMPLES_MAX = 100_000
# the upper bounds (ns) of the buckets every StatRow counts its times in, from its first
# sample on (its percentiles read only the newest SAMPLES_MAX): the metrics' histograms
TIME_BUCKETS_NS = np.array([10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000,
                            10_000_000, 30_000_000, 100_000_000, 300_000_000, 1_000_000_000,
                            3_000_000_000, 10_000_000_000], np.int64)
PHASES_MAX = 2_000  # compute phases kept per rank
TELEMETRY_MAX = 240
# A row's ``id`` is the rank's op id plus its job generation << ID_JOB_SHIFT: each process
# numbers its ops from 0, and what is keyed by (rank, id) (ops in flight, the diagnosis'
# waits) must not take a later job's op for an earlier job's
ID_JOB_SHIFT = 48

# a rank's lane before its first row (never written)
_NO_LANE = (np.empty((0, LANE_COLUMNS), np.int64), 0)
# the GPUs' links by pair, the pairs by label, the ranks without a GPU by their note
_GpuFacts = tuple[dict[tuple[int, int], str], dict[str, list[tuple[int, int]]],
                  dict[str, list[int]]]
_ROW_FIELDS = ("rank", "id", "op", "parent", "gkey", "seq", "peer", "bytes_in", "bytes_out",
               "dtype", "flags", "t_start", "t_end", "site")
_COLUMNS = tuple(protocol.COLUMNS)


@dataclass(frozen=True)
class Records:
    """Op records of many processes in one message, as a recording's reader gives them
    (``commviz stats``, ``commviz play``): applied as the ``OpBatch`` of each process in
    ``whos`` order (each with its records in their order) would be, one after the other, but
    at the model's cost per process, not per batch of a few records. ``who`` indexes ``whos``
    ((rank, inc) pairs); ``cols`` are the wire's columns (``protocol.COLUMNS``), their
    ``gid`` and ``site`` keys of ``groups`` and ``sites``."""

    whos: Sequence[tuple[int, int]]
    who: np.ndarray
    cols: dict[str, np.ndarray]
    groups: Mapping[int, tuple[str, tuple[int, ...]]]
    sites: Mapping[int, tuple[str, int]] | Sequence[tuple[str, int]]

    def __len__(self) -> int:
        return len(self.who)


class _Whos:
    """The incarnations of a ``Records`` table's processes (``whos``), kept while messages
    come with the same table (a compact recording's reader grows one table chunk by chunk):
    a (rank, inc) heard by heartbeat is that incarnation for good (``Model._incs`` never
    changes an entry), so it is looked up once, not in every message of MAX_BATCH records
    (at 1,024 ranks, 1,024 of them a message). Per process: its state, rank number, job and
    host (an index into ``hosts``), ``heard`` where kept."""

    def __init__(self, whos: Sequence[tuple[int, int]]) -> None:
        self.whos = whos
        self.states: list[RankState | None] = []
        self.rank = np.zeros(0, np.int64)
        self.job = np.zeros(0, np.int64)
        self.host = np.zeros(0, np.int64)
        self.heard = np.zeros(0, bool)
        self.hosts: list[str] = []
        self._host_numbers: dict[str, int] = {}
        self._hosts_version = 0

    def grow(self, hosts_version: int) -> None:
        """Room for every process of the table as it is now; the hosts again if a rank's host
        changed (``Model.hosts_version``)."""
        more = len(self.whos) - len(self.states)
        if more > 0:
            self.states += [None] * more
            self.rank, self.job, self.host = (np.r_[a, np.zeros(more, np.int64)]
                                              for a in (self.rank, self.job, self.host))
            self.heard = np.r_[self.heard, np.zeros(more, bool)]
        if hosts_version != self._hosts_version:
            self._hosts_version = hosts_version
            for w in np.flatnonzero(self.heard).tolist():
                self.host[w] = self.host_number(self.states[w].host)  # type: ignore[union-attr]

    def keep(self, w: int, state: RankState) -> None:
        self.states[w] = state
        self.rank[w], self.job[w] = state.rank, state.job
        self.host[w] = self.host_number(state.host)
        self.heard[w] = True

    def host_number(self, host: str) -> int:
        number = self._host_numbers.get(host)
        if number is None:
            number = self._host_numbers[host] = len(self.hosts)
            self.hosts.append(host)
        return number


class _Arrived(NamedTuple):
    """A batch, with what was true of its process when it came (Model._arrived)."""

    batch: protocol.OpBatch
    job: int
    shift_ns: int
    gkeys: dict[int, int]  # its group ids -> Model.groups indexes
    sites: dict[int, int]  # its site ids -> Model.sites indexes


@dataclass
class RankState:
    rank: int
    world: int = 0
    host: str = "?"
    pid: int = 0
    backend: str = "?"
    device: str = "?"
    last_seen: float = 0.0
    exited: bool = False
    exit_ns: int = 0  # when it said goodbye (wall ns, viewer's clock); 0 before
    dropped: int = 0
    ops: int = 0
    bytes_out: int = 0
    bytes_in: int = 0
    last_op: str | None = None
    last_seq: int = 0    # of last_op
    last_peer: int = -1  # of last_op: a send's or receive's peer, else -1
    last_end_ns: int = 0
    last_site: int = -1  # of last_op: an index into Model.sites (site_of)
    job: int = 0  # the job generation of this incarnation (1, 2, ...); 0 before a heartbeat
    inc: int = 0  # its incarnation id (protocol ``inc``), 0 for a rank that sends none
    job_key: str = ""  # protocol ``job``: what the ranks of its job share
    simulated: bool = False  # its heartbeats said ``sim``: a simulator's rank, no real job's
    superseded: bool = False  # a later process of its rank number and job key reported
    # its process's exit code as its launcher told (a negative signal number: killed), None
    # before: a rank that died without a goodbye is said dead rather than silent for ever
    exit_code: int | None = None
    # what the node's harvester said of its process' end (protocol ``gone``): when (wall ns,
    # the viewer's clock; 0: not said), its place among its node's ends (1: first), and the
    # records it recovered from the process' ring
    ended_ns: int = 0
    end_order: int = 0
    recovered: int = 0
    telemetry: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=TELEMETRY_MAX))


@dataclass(frozen=True)
class Instance:
    """One collective instance matched across its group, or one matched p2p transfer."""

    op: str
    group: tuple[int, ...]  # global ranks of the process group; (src, dst) for a transfer
    seq: int
    size: int               # nccl-tests' S in bytes
    t_first_start: int
    t_last_start: int
    t_end: int
    dtype: str | None
    parent: str | None
    root: int | None = None  # global rank of a rooted collective's root
    site: tuple[str, int] | None = None  # the program's file and line that made the call
    ddp: bool = False  # issued by DistributedDataParallel (a gradient bucket, a broadcast)
    # a p2p transfer's receive end: its data has arrived (the sender may return later)
    t_recv_end: int | None = None

    @property
    def time_ns(self) -> int:
        """max(t_end) - max(t_start): the time from the last arrival to the last finish."""
        return self.t_end - self.t_last_start

    @property
    def skew_ns(self) -> int:
        return self.t_last_start - self.t_first_start


class HostClock(NamedTuple):
    """A host's clock as the viewer sees it: ``offset_ns`` (its clock minus the viewer's)
    lies within ``uncertainty_ns`` of the truth; None before its first round trip. The
    viewer's own host is ``local`` (offset 0, exactly)."""

    host: str
    local: bool
    offset_ns: int | None
    uncertainty_ns: int | None
    samples: int


class Segment(NamedTuple):
    """One completed op on one rank, as the timeline draws it.

    From t_start to t_ready the rank waited for its peers (t_ready is the last arrival of the
    collective instance, or the later start of a send/recv pair); from t_ready to t_end it
    transferred. t_ready is clamped into [t_start, t_end]: hosts' clocks may disagree.
    """

    op: str
    t_start: int
    t_ready: int
    t_end: int


@dataclass
class StatRow:
    op: str
    n: int
    size: int
    count: int = 0
    updated: int = 0  # the model's count of instances and transfers when this row grew
    _times: list = field(default_factory=list)
    _skews: list = field(default_factory=list)
    _kept: int = 0
    # per TIME_BUCKETS_NS bucket (and one beyond the last), the times that fell in it; their sum
    buckets: np.ndarray = field(
        default_factory=lambda: np.zeros(len(TIME_BUCKETS_NS) + 1, np.int64))
    time_sum_ns: int = 0

    def add(self, times: np.ndarray, skews: np.ndarray) -> None:
        self.count += len(times)
        self.buckets += np.bincount(np.searchsorted(TIME_BUCKETS_NS, times),
                                    minlength=len(self.buckets))
        self.time_sum_ns += int(times.sum())
        self._times.append(times)
        self._skews.append(skews)
        self._kept += len(times)
        if self._kept > 2 * SAMPLES_MAX:  # keep the newest samples only
            times = np.concatenate(self._times)[-SAMPLES_MAX:]
            skews = np.concatenate(self._skews)[-SAMPLES_MAX:]
            self._times, self._skews, self._kept = [times], [skews], len(times)

    def copy(self) -> StatRow:
        """A copy that later ``add``s leave as it is: its summary can be read apart from the
        model's lock (the samples' arrays are never written once added)."""
        return replace(self, _times=list(self._times), _skews=list(self._skews),
                       buckets=self.buckets.copy())

    def summary(self) -> dict:
        times = np.concatenate(self._times) / 1e3
        skews = np.concatenate(self._skews) / 1e3
        p50 = float(np.percentile(times, 50))
        factor = bandwidth.bus_factor(self.op, self.n)
        # a barrier moves no data: no bandwidth to speak of, rather than 0 GB/s
        algbw = bandwidth.gbps(self.size, p50 / 1e6) if self.size else None
        busbw = algbw * factor if algbw is not None and factor is not None else None
        return {"op": self.op, "ranks": self.n, "size": self.size, "count": self.count,
                "time_p50_us": p50, "time_p99_us": float(np.percentile(times, 99)),
                "skew_p50_us": float(np.percentile(skews, 50)),
                "algbw_gbps": algbw, "busbw_gbps": busbw}


class Model:
    """Everything the views need, updated from decoded protocol messages."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 local_host: str | None = None, lanes: bool = True) -> None:
        """``lanes``: keep each rank's completed ops for the timeline (``lanes()``); a model
        nothing draws (``commviz stats``) needs none."""
        self.clock = clock
        self.keeps_lanes = lanes
        self.local_host = nodes.hostname() if local_host is None else local_host
        self._clock_samples: dict[str, Window] = {}  # per host, its round trips
        self._offsets: dict[str, Offset] = {}
        self.ranks: dict[int, RankState] = {}
        self.exit_codes: dict[int, int] = {}  # how ranks never heard from ended, as launched
        self._ended: list[RankState] = []  # those a harvester said ended (``first_ended``)
        self.groups: list[tuple[str, tuple[int, ...]]] = []
        self._group_keys = GroupNumbers()  # by (job, name) and ranks: indexes into groups
        self._group_sizes = np.zeros(0, dtype=np.int64)
        self._group_jobs = np.zeros(0, dtype=np.int64)  # per gkey: its job generation
        # the groups' layouts (knowledge/group_shapes): ``shapes`` the distinct ones, and
        # per gkey its index there, for the statistics per shape
        self.shapes: list[group_shapes.Shape] = []
        self._shape_keys: dict[group_shapes.Shape, int] = {}
        self._group_shapes = np.zeros(0, dtype=np.int64)
        self.hosts_version = 0  # bumped when a rank's host changes: group_families' cache
        self._families: tuple[tuple, tuple[list, list]] | None = None
        self._nodes: tuple[tuple[int, int], dict[str, list[int]]] | None = None  # nodes()
        # per job generation (job n at index n - 1): its incarnations by rank number
        self.jobs: list[dict[int, RankState]] = []
        self._incs: dict[tuple[int, int], RankState] = {}  # by (rank, inc), inc != 0
        self._whos: _Whos | None = None  # the incarnations of the latest Records' table
        # op batches of incarnations not heard by heartbeat yet, and how many records
        self._unheard: dict[tuple[int, int], list[protocol.OpBatch]] = {}
        self._unheard_records = 0
        # incarnations a later process of the same rank number replaced, oldest first
        self.replaced: collections.deque[RankState] = collections.deque(maxlen=RECENT_MAX)
        self.replacements = 0  # ever appended to ``replaced``
        self.sites: list[tuple[str, int]] = []
        self._site_keys: dict[tuple[str, int], int] = {}
        # the records in flight, as they came (``flying.records``), and as the diagnosis
        # reads them (``flying``'s indexes)
        self.flying = Flying()
        self.inflight: dict[tuple[int, int], InFlight] = self.flying.records
        self.recent: collections.deque[Instance] = collections.deque(maxlen=RECENT_MAX)
        self.first_transfer_ns: dict[tuple[int, int], int] = {}  # (src, dst): its time
        self.new_instances: list[Instance] | None = None  # set to [] to collect every instance
        self.stats: dict[tuple[str, int, int], StatRow] = {}
        # the same instances and transfers by (op, shape: index into ``shapes``, size)
        self.shape_stats: dict[tuple[str, int, int], StatRow] = {}
        # the latest time a heartbeat left its rank (wall ns, viewer's clock), and how far
        # the viewer is behind the ranks (s), as the live session measures it from these
        self.newest_sent_ns = 0
        self.newest_record_ns = 0  # the latest end of an op record applied (same clock)
        self.behind_s = 0.0
        self.records = 0
        self.instances = 0
        self.transfers = 0
        # matched, but not what happened: some rank failed in it, or the ranks called
        # different ops at the same (group, seq); left out of the statistics and the replay
        # (the live diagnosis reports them)
        self.failed = 0
        self.evicted = 0
        self._coll = WaitingRows(_empty_rows())  # by (group, seq): see _match_collectives
        self._p2p = _empty_rows()
        # per rank: rows of op code, t_start, t_ready, t_end, gkey (int64) and how many are used
        self._lanes: dict[int, tuple[np.ndarray, int]] = {}
        # per rank: the latest t_end of a segment dropped from its lane (older is not shown)
        self.lane_horizon: dict[int, int] = {}
        # lanes(): the window it last copied began here, and each lane's first row in it
        self._lanes_since = 0
        self._lane_from: dict[int, int] = {}
        self._phases: dict[int, collections.deque[protocol.PhaseSpan]] = {}
        self.gpu_topology: dict[int, protocol.GpuTopology] = {}  # per rank, its latest ``topo``
        self._gpu: _GpuFacts | None = None  # gpu_links() and co, until a topology changes
        # Observers of each matching round, set by a diagnosis (viewer/diagnose/): called
        # with the member rows of the collective instances just matched (sorted by instance)
        # and the first row of each; and with the receive and send rows of the transfers
        # just paired, aligned.
        self.on_collectives: Callable[[dict[str, np.ndarray], np.ndarray], None] | None = None
        self.on_transfers: Callable[[dict[str, np.ndarray], dict[str, np.ndarray]],
                                    None] | None = None
        # and of the records in flight whose op just ended (as they were in flight)
        self.on_landed: Callable[[list[InFlight]], None] | None = None

    # ---- messages -------------------------------------------------------------------
    def apply(self, messages: Iterable[protocol.Message | Records],
              arrived: float | None = None) -> None:
        """Apply one drain round of messages; records are matched once for the round.
        ``arrived``: when the viewer took them off its socket (its clock; None: now), when
        their ranks were last heard from, however long applying a backlog takes."""
        now = self.clock() if arrived is None else arrived
        batches: list[_Arrived | dict[str, np.ndarray]] = []  # rows made already: Records
        for msg in messages:
            if isinstance(msg, Records):
                rows = self._rows_of_records(msg)
                if rows is not None:
                    batches.append(rows)
            elif isinstance(msg, protocol.OpBatch):
                state = self._state_of(msg.rank, msg.inc)
                if state is not None:
                    batches.append(self._arrived(msg, state, now))
                else:
                    self._hold(msg)
            elif isinstance(msg, protocol.Heartbeat):
                state = self._heartbeat(msg, now)
                if self._unheard:  # (seldom: a viewer started while the job ran)
                    held = self._unheard.pop((msg.rank, msg.inc), [])
                    self._unheard_records -= sum(map(len, held))
                    batches += [self._arrived(b, state, now) for b in held]
            elif isinstance(msg, protocol.Bye):
                state = self._state_of(msg.rank, msg.inc)
                if state is not None:  # a goodbye of a process never heard says nothing
                    state.exited, state.dropped, state.last_seen = True, msg.dropped, now
                    state.exit_ns = msg.t_ns - self._offset_ns(state)
                    self._show_live(state)
            elif isinstance(msg, protocol.Phases):
                state = self._state_of(msg.rank, msg.inc) or self._rank(msg.rank)
                state.last_seen = now
                spans = self._phases.get(msg.rank)
                if spans is None:
                    spans = self._phases[msg.rank] = collections.deque(maxlen=PHASES_MAX)
                shift = self._offset_ns(state)
                spans.extend(msg.spans if not shift else (
                    protocol.PhaseSpan(p.name, p.depth, p.t_start - shift, p.t_end - shift)
                    for p in msg.spans))
            elif isinstance(msg, protocol.Gone):
                state = self._state_of(msg.rank, msg.inc)
                if state is not None:
                    self._gone(state, msg)
            elif isinstance(msg, protocol.GpuTopology):
                if self.gpu_topology.get(msg.rank) != msg:  # repeated every 10 s, seldom new
                    self.gpu_topology[msg.rank] = msg
                    self._gpu = None
        if batches:
            parts, run = [], []  # the rows in the order the messages came
            for b in batches:
                if isinstance(b, _Arrived):
                    run.append(b)
                    continue
                if run:
                    parts.append(self._rows_of(run))
                    run = []
                parts.append(b)
            if run:
                parts.append(self._rows_of(run))
            rows = parts[0] if len(parts) == 1 else \
                {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            if len(rows["t_end"]):
                self.newest_record_ns = max(self.newest_record_ns, int(rows["t_end"].max()))
            self._apply_rows(rows)

    def _gone(self, state: RankState, msg: protocol.Gone) -> None:
        """The harvester of its node saw ``state``'s process end: when, and how where it knows
        (what the launcher says of it, ``process_ended``, stands)."""
        if not state.ended_ns:
            self._ended.append(state)
        state.ended_ns = msg.t_ns - self._offset_ns(state)
        state.end_order = msg.order
        state.recovered = msg.recovered + msg.running
        if state.exit_code is None and msg.code is not None:
            state.exit_code = msg.code

    def first_ended(self) -> list[RankState]:
        """The ranks whose end a harvester noted, the first to end first (by time; on one
        node, by the harvester's order): read by every diagnosis pass once one has, so kept
        as they come rather than found among a thousand ranks."""
        ranks = self.ranks
        self._ended = [s for s in self._ended if ranks.get(s.rank) is s]  # (not replaced)
        return sorted(self._ended, key=lambda s: (s.ended_ns, s.end_order))

    def process_ended(self, rank: int, code: int) -> None:
        """The launcher says rank ``rank``'s process ended with ``code`` (a demo's, or what a
        recording says it said): its state keeps it, ``exit_codes`` that of a rank not heard
        from (a code there would be another job's for a rank number heard from later)."""
        state = self.ranks.get(rank)
        if state is not None:
            state.exit_code = code
        else:
            self.exit_codes[rank] = code

    def nodes(self) -> dict[str, list[int]]:
        """Hosts -> their ranks (sorted): the viewer's own host first, then by lowest rank.
        Ranks not heard from by heartbeat yet are under ``"?"``. Not to be changed: with one
        job, the same answer is given until a rank or a host is new (every panel asks every
        frame, 1 ms at 1,024 ranks)."""
        key = (len(self.ranks), self.hosts_version)
        if len(self.jobs) < 2 and self._nodes is not None and self._nodes[0] == key:
            return self._nodes[1]
        by_host: dict[str, list[int]] = {}
        shown = self.shown_ranks()
        for rank in sorted(shown):
            by_host.setdefault(shown[rank].host, []).append(rank)
        nodes = dict(sorted(by_host.items(), key=lambda kv: (kv[0] != self.local_host,
                                                              kv[1][0])))
        self._nodes = (key, nodes)
        return nodes

    def backend(self) -> str | None:
        """The backend every rank reported; None before any, or with several."""
        backends = {s.backend for s in self.ranks.values()}
        return backends.pop() if len(backends) == 1 else None

    def clock_offsets(self) -> dict[str, HostClock]:
        """Every known host's clock offset to the viewer ± its uncertainty (see HostClock),
        in the order of ``nodes()``."""
        out = {}
        for host in self.nodes():
            if host == self.local_host:
                out[host] = HostClock(host, True, 0, 0, 0)
            else:
                est = self._offsets.get(host)
                out[host] = (HostClock(host, False, *est) if est is not None
                             else HostClock(host, False, None, None, 0))
        return out

    def group_of(self, gkey: int) -> tuple[str, tuple[int, ...]]:
        return self.groups[gkey]

    def job_of(self, gkey: int) -> int:
        """The job generation a group belongs to (1, 2, ...; 0 for no group, gkey -1)."""
        return int(self._group_jobs[gkey]) if 0 <= gkey < len(self._group_jobs) else 0

    def shown_groups(self) -> list[int]:
        """The gkeys of the groups of two ranks or more of the jobs ``shown_ranks`` belong
        to, in the order the groups came: the timeline's lanes by group."""
        jobs = list({s.job for s in self.shown_ranks().values()})
        return np.flatnonzero(np.isin(self._group_jobs, jobs)
                              & (self._group_sizes >= 2)).tolist()

    def shown_ranks(self) -> dict[int, RankState]:
        """``ranks`` but the retired ones, whose last process belongs to a job that is over
        and that a later job without their rank number followed (``commviz watch``: a 3-rank
        job, then a 2-rank one): the panels show the job under way, without its rank 2."""
        if len(self.jobs) < 2:  # one job: none retired (every frame asks)
            return self.ranks
        later: list[set[int]] = [set()]  # later[-j]: the rank numbers of jobs after job n-j+1
        for members in reversed(self.jobs[1:]):
            later.append(later[-1] | members.keys())
        later.reverse()  # later[j - 1]: the rank numbers of the jobs after job j
        over = {job: self.job_over(job) for job in {s.job for s in self.ranks.values()}}
        return {r: s for r, s in self.ranks.items()
                if not (s.job and over[s.job] and later[s.job - 1] and r not in later[s.job - 1])}

    def job_over(self, job: int) -> bool:
        """Whether every incarnation of a job generation has said goodbye or been replaced."""
        members = self.jobs[job - 1] if 0 < job <= len(self.jobs) else {}
        return bool(members) and all(s.exited or s.superseded for s in members.values())

    def stats_table(self) -> list[dict]:
        return [row.summary() for _, row in sorted(self.stats.items())]

    def shape_stats_table(self) -> list[dict]:
        """``stats_table``'s rows kept per group shape, each with its ``shape`` (an index into
        ``shapes``), by shape, then op and size."""
        return [{**row.summary(), "shape": key[1]}
                for key, row in sorted(self.shape_stats.items(),
                                       key=lambda kv: (self.shapes[kv[0][1]], kv[0]))]

    def group_families(self) -> tuple[list[group_shapes.Family], list[group_shapes.Family]]:
        """The families of the job's groups and of the rank pairs transfers went between
        (``group_shapes.families``, ``pair_families``), by the ranks' hosts now; kept until
        a group, a pair or a host is new, since every frame may ask."""
        key = (len(self.groups), len(self.first_transfer_ns), len(self.ranks),
               self.hosts_version)
        if self._families is None or self._families[0] != key:
            def host_of(rank: int) -> str | None:
                state = self.ranks.get(rank)
                return state.host if state is not None and state.host != "?" else None

            found = (group_shapes.families((g for _, g in self.groups), host_of,
                                           self.world_size()),
                     group_shapes.pair_families(self.first_transfer_ns, host_of))
            self._families = (key, found)
        return self._families[1]

    def latest_stats(self, count: int) -> list[dict]:
        """``stats_table`` rows of the ``count`` shapes that completed most recently, newest
        first: what a screen with room for a few rows shows."""
        rows = sorted(self.stats.values(), key=lambda r: r.updated, reverse=True)[:count]
        return [row.summary() for row in rows]

    def pending(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Completed records still waiting for their match: (collective rows, p2p rows).

        Read-only: the arrays are the model's own (columns as in ``_ROW_FIELDS``, ``gkey``
        indexing ``groups``).
        """
        return self._coll.rows(), self._p2p

    def incomplete(self) -> tuple[int, int]:
        """Collective instances and transfers that some ranks' records are still waiting in:
        (those a rank failed in, the others). A failed one can no longer succeed; the others
        may still complete while their job runs, not once it has ended (a rank that died
        inside the call sends no record). What a summary adds to ``failed``, and reports
        beside it as unmatched."""
        coll, p2p = self.pending()
        send = _SEND_CODES[p2p["op"]]
        failed = unmatched = 0
        for rows, key in ((coll, (coll["seq"], coll["gkey"])),
                          (p2p, (p2p["seq"], np.where(send, p2p["peer"], p2p["rank"]),
                                 np.where(send, p2p["rank"], p2p["peer"]),
                                 self._group_jobs[p2p["gkey"]]))):
            if not len(rows["rank"]):
                continue
            order = np.lexsort(key)  # as matched: (group, seq); (job, src, dst, seq)
            cols = np.stack(key)[:, order]
            starts = np.flatnonzero(np.r_[True, (cols[:, 1:] != cols[:, :-1]).any(axis=0)])
            bad = np.logical_or.reduceat(_failed(rows)[order], starts)
            failed += int(bad.sum())
            unmatched += int((~bad).sum())
        return failed, unmatched

    def sizes_of(self, rows: dict[str, np.ndarray]) -> np.ndarray:
        """nccl-tests' S of each row (of ``pending()`` or an observer's), in its own group."""
        return self._sizes(rows, self._group_sizes[rows["gkey"]])

    def world_size(self) -> int:
        shown = self.shown_ranks()
        return max([s.world for s in shown.values()] + [len(shown)])

    def timeline(self, since_ns: int, until_ns: int | None = None) -> dict[int, list[Segment]]:
        """Every rank's completed ops overlapping [since_ns, until_ns], by start time (but the
        retired ranks')."""
        return {rank: list(map(Segment, [protocol.OPS[op] for op in lane[:, 0].tolist()],
                               *lane[:, 1:].T.tolist()))
                for rank, lane in self.lanes(since_ns, until_ns).items()}

    def lanes(self, since_ns: int, until_ns: int | None = None,
              groups: bool = False) -> dict[int, np.ndarray]:
        """``timeline`` as copied (n, 4) int64 arrays of op code, t_start, t_ready, t_end:
        cheap enough to take under the session lock at a frame rate. ``groups``: (n, 5),
        each row's group too (its gkey, an index into ``groups``), for lanes by group.

        A frame's window only moves on, so each lane is read from the first row the last call
        kept (``_lane_from``; a row before it ended before that window began): every lane's
        new rows and those still in view, in one array, filtered and sorted at once. A window
        that begins earlier (zoomed out, a seek back) looks for each lane's first row again."""
        retired = self.ranks.keys() - self.shown_ranks().keys()  # (a later job has none)
        ranks = sorted((self.ranks.keys() | self._lanes.keys()) - retired)
        columns = LANE_COLUMNS if groups else LANE_COLUMNS - 1
        if since_ns < self._lanes_since:
            self._lane_from.clear()
        self._lanes_since = since_ns
        lanes, lane_from = self._lanes, self._lane_from
        tails = []
        for rank in ranks:
            lane, n = lanes.get(rank, _NO_LANE)
            at = lane_from.get(rank)
            if at is None:  # its first row in view (n: none), looked for once
                at = int((lane[:n, 3] >= since_ns).argmax()) if n else 0
                if n and lane[at, 3] < since_ns:
                    at = n
                lane_from[rank] = at
            tails.append(lane[at:n, :columns])
        counts = np.fromiter(map(len, tails), np.int64, len(tails))
        rows = np.concatenate([np.zeros((0, columns), np.int64), *tails])
        lane_of = np.repeat(np.arange(len(ranks)), counts)
        in_view = np.flatnonzero(rows[:, 3] >= since_ns)
        # each lane's first row in view is where the next call begins (none: past its rows)
        advance = counts.copy()
        if len(in_view):
            seen = lane_of[in_view]
            heads = np.r_[True, seen[1:] != seen[:-1]]
            first = in_view[heads]  # each lane's first row in view, in ``rows``
            advance[seen[heads]] = first - (np.cumsum(counts) - counts)[seen[heads]]
        for rank, step in zip(ranks, advance.tolist()):
            if step:
                lane_from[rank] += step
        if until_ns is not None:
            in_view = in_view[rows[in_view, 1] <= until_ns]
        lane_of = lane_of[in_view]
        order = _by_lane_then_start(lane_of, rows[in_view, 1])
        out_rows = rows[in_view[order]] if order is not None else \
            rows if len(in_view) == len(rows) else rows[in_view]
        return arrivals.Lanes(ranks, out_rows, np.bincount(lane_of, minlength=len(ranks)))

    def phases(self, since_ns: int, until_ns: int | None = None
               ) -> dict[int, list[protocol.PhaseSpan]]:
        """Every rank's compute phases (``commviz.phase``) overlapping [since_ns, until_ns],
        by start time; the last PHASES_MAX per rank are kept. Ranks without phases are absent.

        A span's ``depth`` is its nesting level on the rank's thread (0: outermost).
        """
        out = {}
        for rank, spans in sorted(self._phases.items()):
            out[rank] = sorted((s for s in spans if s.t_end >= since_ns
                                and (until_ns is None or s.t_start <= until_ns)),
                               key=lambda s: (s.t_start, s.depth))
        return out

    def last_phase_end_ns(self) -> int:
        """When the latest compute phase any rank reported ended (0: none)."""
        return max((spans[-1].t_end for spans in self._phases.values() if spans), default=0)

    def gpu_links(self) -> dict[tuple[int, int], str]:
        """How the GPUs of two ranks on one host are joined, as ``nvidia-smi topo -m`` labels
        it: ``NV#`` (that many NVLinks), else the PCIe path (PIX, PXB, PHB, NODE, SYS), or
        ``same GPU``; per pair (r, s), r < s, of ranks that reported their GPU. Kept until a
        rank's topology changes, as are ``gpu_link_kinds`` and ``gpu_notes``: the TUI asks
        every frame. Pairs are only looked for within a host: O(ranks + pairs on one host),
        where every pair of the job was half a million at 1,024 ranks."""
        return self._gpu_facts()[0]

    def gpu_link_kinds(self) -> dict[str, list[tuple[int, int]]]:
        """``gpu_links`` by label, each label's pairs in order."""
        return self._gpu_facts()[1]

    def gpu_notes(self) -> dict[str, list[int]]:
        """The ranks without a GPU link to show by why (their note, "no GPU: ..."), in rank
        order."""
        return self._gpu_facts()[2]

    def _gpu_facts(self) -> _GpuFacts:
        if self._gpu is not None:
            return self._gpu
        links: dict[tuple[int, int], str] = {}
        notes: dict[str, list[int]] = {}
        by_host: dict[str, list[int]] = {}
        for r in sorted(self.gpu_topology):
            t = self.gpu_topology[r]
            if t.gpu >= 0:
                by_host.setdefault(t.host, []).append(r)
            elif t.note:
                notes.setdefault(t.note, []).append(r)
        for ranks in by_host.values():
            for i, r in enumerate(ranks):
                t = self.gpu_topology[r]
                by_pair = {(li[0], li[1]): li for li in t.links}
                for s in ranks[i + 1:]:
                    a, b = sorted((t.gpu, self.gpu_topology[s].gpu))
                    if a == b:
                        links[(r, s)] = "same GPU"
                        continue
                    link = by_pair.get((a, b))
                    if link is not None and (link[2] or link[3]):
                        links[(r, s)] = f"NV{link[2]}" if link[2] else link[3]
        kinds: dict[str, list[tuple[int, int]]] = {}
        for pair, kind in sorted(links.items()):
            kinds.setdefault(kind, []).append(pair)
        self._gpu = (links, kinds, notes)
        return self._gpu

    # ---- internals --------------------------------------------------------------------
    def _rank(self, rank: int) -> RankState:
        state = self.ranks.get(rank)
        if state is None:
            state = self.ranks[rank] = RankState(rank)
        return state

    def _state_of(self, rank: int, inc: int) -> RankState | None:
        """The incarnation a message comes from; None for an ``inc`` not heard by heartbeat.
        A message without ``inc`` (an older rank) is taken as from its rank number's."""
        return self._incs.get((rank, inc)) if inc else self._rank(rank)

    def _hold_records(self, msg: Records, mine: np.ndarray) -> None:
        """Hold the records ``mine`` picks of ``msg`` (one process's) as its batch."""
        rank, inc = msg.whos[int(msg.who[np.argmax(mine)])]
        cols = {c: v[mine] for c, v in msg.cols.items()}
        self._hold(protocol.OpBatch(
            rank, cols, {g: msg.groups[g] for g in _in_order(cols["gid"])},
            {s: msg.sites[s] for s in _in_order(cols["site"])}, inc))

    def _hold(self, batch: protocol.OpBatch) -> None:
        """Keep a batch until its incarnation's heartbeat says which job it belongs to."""
        if self._unheard_records + len(batch) > UNHEARD_MAX:
            self.evicted += len(batch)
            return
        self._unheard.setdefault((batch.rank, batch.inc), []).append(batch)
        self._unheard_records += len(batch)

    def _heartbeat(self, hb: protocol.Heartbeat, now: float) -> RankState:
        s = self._incs.get((hb.rank, hb.inc)) if hb.inc else None
        if s is None:
            s = self._rank(hb.rank)
            if s.pid and (s.inc or hb.inc or (s.host, s.pid) != (hb.host, hb.pid)):
                s = self.ranks[hb.rank] = RankState(hb.rank)  # another process
            if hb.inc:
                s.inc = hb.inc
                self._incs[(hb.rank, hb.inc)] = s
        if s.host != hb.host:
            self.hosts_version += 1
        s.world, s.host, s.pid, s.simulated = hb.world, hb.host, hb.pid, hb.simulated
        if not s.job:
            s.job_key = hb.job
            self._supersede(hb.rank, hb.job)
            s.job = self._join(hb.rank, hb.world, hb.job)
            self.jobs[s.job - 1][hb.rank] = s
        s.backend, s.device = hb.backend, hb.device
        s.dropped, s.last_seen, s.exited = hb.dropped, now, False
        if hb.clock and hb.host != self.local_host:  # ranks of one host share its clock
            window = self._clock_samples.get(hb.host)
            if window is None:
                window = self._clock_samples[hb.host] = Window()
            for row in hb.clock:
                window.add(Sample(*row))
            est = window.estimate()
            if est is not None:
                self._offsets[hb.host] = est
        if hb.t_ns > 0:
            # when it left its rank, on the viewer's clock (a host's of unknown offset: not
            # known; its clock may be seconds off)
            est = None if hb.host == self.local_host else self._offsets.get(hb.host)
            if est is not None or hb.host == self.local_host:
                shift = 0 if est is None else est.offset_ns  # as _offset_ns(s)
                self.newest_sent_ns = max(self.newest_sent_ns, hb.t_ns - shift)
        if hb.telemetry:  # none in an identity read back from a recording's `rank` line
            s.telemetry.append((hb.t_ns - self._offset_ns(s), hb.telemetry))
        return s

    def _supersede(self, rank: int, key: str) -> None:
        """A new process of ``rank`` with job key ``key``: the earlier one of that rank and
        key is gone (its ops will never end); one of another job running beside it is not."""
        for job, members in enumerate(self.jobs, start=1):
            old = members.get(rank)
            if old is None or old.superseded or old.job_key != key:
                continue
            old.superseded = True
            self.replaced.append(old)
            self.replacements += 1
            for i in [i for i in self.flying.by_rank.get(rank, ()) if i >> ID_JOB_SHIFT == job]:
                self.flying.pop((rank, i))

    def _show_live(self, state: RankState) -> None:
        """After ``state`` left: show the newest live incarnation of its rank number instead,
        if a job running beside its own has one."""
        if self.ranks.get(state.rank) is not state:
            return
        for members in reversed(self.jobs):
            other = members.get(state.rank)
            if other is not None and not (other.exited or other.superseded):
                self.ranks[state.rank] = other
                return

    def _join(self, rank: int, world: int, key: str) -> int:
        """The job generation a new incarnation of ``rank`` belongs to (see the module doc)."""
        for job, members in enumerate(self.jobs, start=1):
            if rank not in members and all(s.world == world and s.job_key == key
                                           and not s.superseded for s in members.values()):
                return job
        self.jobs.append({})
        return len(self.jobs)

    def _offset_ns(self, state: RankState) -> int:
        """What to subtract from an incarnation's times to put them on the viewer's clock."""
        if state.host == self.local_host:
            return 0
        est = self._offsets.get(state.host)
        return est.offset_ns if est is not None else 0

    def _gkey(self, job: int, name: str, ranks: tuple[int, ...]) -> int:
        key, new = self._group_keys.number((job, name), ranks)
        if new:
            self.groups.append((name, ranks))
            self._group_sizes = np.append(self._group_sizes, len(ranks))
            self._group_jobs = np.append(self._group_jobs, job)
            self._group_shapes = np.append(self._group_shapes,
                                           self._shape(group_shapes.shape_of(ranks)))
        return key

    def _shape(self, shape: group_shapes.Shape) -> int:
        key = self._shape_keys.get(shape)
        if key is None:
            key = self._shape_keys[shape] = len(self.shapes)
            self.shapes.append(shape)
        return key

    def site_of(self, index: int) -> tuple[str, int] | None:
        """The program's file and line of a row's ``site``; None where unknown."""
        site = self.sites[index] if 0 <= index < len(self.sites) else None
        return site if site is not None and site[1] > 0 else None

    def _site(self, site: tuple[str, int]) -> int:
        key = self._site_keys.get(site)
        if key is None:
            key = self._site_keys[site] = len(self.sites)
            self.sites.append(site)
        return key

    def _arrived(self, batch: protocol.OpBatch, state: RankState, now: float) -> _Arrived:
        """What is true of a batch's process as the batch comes: its job, its clock's shift,
        the model's keys of the groups and sites its ids name."""
        state.last_seen = now
        job = state.job or max(len(self.jobs), 1)  # no heartbeat yet: the newest job's
        return _Arrived(batch, job, self._offset_ns(state),
                        {g: self._gkey(job, *v) for g, v in batch.groups.items()},
                        {s: self._site(v) for s, v in batch.sites.items()})

    def _rows_of(self, arrived: list[_Arrived]) -> dict[str, np.ndarray]:
        """The rows of a round's batches: one numpy pass per column for all of them, since at
        a thousand ranks a round holds hundreds of small batches."""
        batches = [a.batch for a in arrived]
        lengths = np.fromiter(map(len, batches), np.int64, len(batches))

        def each(values: Iterable[int]) -> np.ndarray:  # one value per batch -> per row
            return np.repeat(np.fromiter(values, np.int64, len(batches)), lengths)

        cols = protocol.join_columns([b.cols for b in batches], _COLUMNS)
        rows = {"rank": each(b.rank for b in batches)}
        for name in ("id", "seq", "bytes_in", "bytes_out", "t_start", "t_end"):
            rows[name] = cols[name].astype(np.int64)
        rows["id"] += each(a.job for a in arrived) << ID_JOB_SHIFT
        if any(a.shift_ns for a in arrived):  # onto the viewer's clock; t_end -1 stays -1
            shift = each(a.shift_ns for a in arrived)
            rows["t_start"] -= shift
            rows["t_end"] = np.where(rows["t_end"] >= 0, rows["t_end"] - shift, -1)
        for name in ("op", "parent", "dtype", "flags"):
            rows[name] = cols[name]
        rows["peer"] = cols["peer"].astype(np.int64)
        rows["gkey"] = _translate(cols["gid"], lengths, [a.gkeys for a in arrived])
        rows["site"] = _translate(cols["site"], lengths, [a.sites for a in arrived])
        return rows

    def _rows_of_records(self, msg: Records) -> dict[str, np.ndarray] | None:
        """The rows of ``msg`` as ``_rows_of`` would make them of its processes' batches, in
        their order; a process not heard by heartbeat yet has its records held as a batch.
        None: no rows."""
        who = msg.who.astype(np.int64)
        present, first = np.unique(who, return_index=True)
        present = present[np.argsort(first)].tolist()  # the processes' order: their batches'
        now, newest = self.clock(), max(len(self.jobs), 1)
        known = self._whos
        if known is None or known.whos is not msg.whos:
            known = self._whos = _Whos(msg.whos)
        known.grow(self.hosts_version)
        size = len(msg.whos)
        rank_of, job_of, host_of = known.rank.copy(), known.job.copy(), known.host.copy()
        heard_of = known.heard.copy()
        states = known.states
        live = [states[w] for w in present if states[w] is not None]
        # the others (as _state_of): heard from since the last message, rank numbers
        # without ``inc`` (whose incarnation may change), or not heard by heartbeat yet
        at = np.asarray(present, np.int64)
        for w in at[~heard_of[at]].tolist():
            rank, inc = msg.whos[w]
            state = self._incs.get((rank, inc)) if inc else self._rank(rank)
            if state is None:  # held, as a batch of its own
                self._hold_records(msg, who == w)
                continue
            if inc:  # this (rank, inc)'s for good: _incs never changes an entry
                known.keep(w, state)
            live.append(state)
            heard_of[w] = True
            rank_of[w], job_of[w] = rank, state.job or newest  # as _arrived
            host_of[w] = known.host_number(state.host)
        for state in live:
            state.last_seen = now
        shift_by_host = {host: est.offset_ns for host, est in self._offsets.items()}
        shift_by_host[self.local_host] = 0  # as _offset_ns
        shift_of = np.array([shift_by_host.get(h, 0) for h in known.hosts] or [0],
                            np.int64)[host_of]  # (the rows of processes not heard: dropped)
        place = np.zeros(size, np.int64)
        place[present] = np.arange(len(present))
        heard = heard_of[present]
        order = np.argsort(place[who], kind="stable")
        if not heard.all():
            order = order[heard_of[who[order]]]
        if not len(order):
            return None
        # each column taken in that order (a copy: the message's own arrays stay as they are)
        col = lambda name, dtype=np.int64: msg.cols[name][order].astype(dtype, copy=False)
        who = who[order]
        job = job_of[who]
        # the model's keys of (job, group) and sites, made in the order the batches would
        # have made them: by process, then by first use
        gkey = _keyed(job, col("gid"), lambda j, g: self._gkey(j, *msg.groups[g]))
        site = _keyed(np.zeros(len(who), np.int64), col("site"),
                      lambda _, s: self._site(msg.sites[s]))
        rows = {"rank": rank_of[who]}
        for name in ("id", "seq", "bytes_in", "bytes_out", "t_start", "t_end"):
            rows[name] = col(name)
        rows["id"] += job << ID_JOB_SHIFT
        shift = shift_of[who]
        if shift.any():
            rows["t_start"] -= shift
            rows["t_end"] = np.where(rows["t_end"] >= 0, rows["t_end"] - shift, -1)
        for name in ("op", "parent", "dtype", "flags"):
            rows[name] = col(name, protocol.COLUMN_DTYPES[name])
        rows["peer"] = col("peer")
        rows["gkey"], rows["site"] = gkey, site
        return rows

    def _apply_rows(self, rows: dict[str, np.ndarray]) -> None:
        done = rows["t_end"] >= 0
        if not done.all():
            self._note_inflight(_take(rows, ~done))
            rows = _take(rows, done)
        if self.inflight:
            records = self.inflight
            ended = [k for k in zip(rows["rank"].tolist(), rows["id"].tolist()) if k in records]
            landed = [f for f in map(self.flying.pop, ended) if f is not None]
            if landed and self.on_landed is not None:
                self.on_landed(landed)
        if not len(rows["rank"]):
            return
        self.records += len(rows["rank"])
        self._count_per_rank(rows)
        failed = _failed(rows)  # waited until it failed: on the lanes now, matched or not
        if failed.any():
            self._note_segments(rows["rank"][failed], rows["op"][failed],
                                rows["t_start"][failed], rows["t_end"][failed],
                                rows["t_end"][failed], rows["gkey"][failed])
        p2p = _P2P_CODES[rows["op"]]
        self._p2p = self._match_p2p(_concat(self._p2p, _take(rows, p2p)))
        self._match_collectives(_take(rows, ~p2p))

    def _note_inflight(self, rows: dict[str, np.ndarray]) -> None:
        sizes = self.sizes_of(rows)
        now = self.clock()
        flying = self.flying
        for r, i, op, g, seq, peer, t0, size, dt, site in zip(*(rows[k].tolist() for k in (
                "rank", "id", "op", "gkey", "seq", "peer", "t_start")), sizes.tolist(),
                rows["dtype"].tolist(), rows["site"].tolist()):
            flying.add(InFlight(
                r, protocol.OPS[op], self.groups[g][1], seq, peer, t0, g, size,
                None if dt == protocol.NO_CODE else protocol.DTYPES[dt], i, now,
                self.site_of(site), flying.noted))

    def _count_per_rank(self, rows: dict[str, np.ndarray]) -> None:
        """Each rank's counters and its latest op (the latest t_end; of equal ones the
        earliest row), counted per rank number rather than sorted (a round of 65,536 rows
        of 1,024 ranks: a sort by three keys cost 40 times as much)."""
        ranks = rows["rank"]
        size = int(ranks.max()) + 1
        counts = np.bincount(ranks, minlength=size)
        present = np.flatnonzero(counts)
        sums_in, sums_out = np.zeros(size, np.int64), np.zeros(size, np.int64)
        np.add.at(sums_in, ranks, rows["bytes_in"])
        np.add.at(sums_out, ranks, rows["bytes_out"])
        latest = np.full(size, np.iinfo(np.int64).min)
        np.maximum.at(latest, ranks, rows["t_end"])
        at_latest = np.flatnonzero(rows["t_end"] == latest[ranks])  # ascending
        _, first = np.unique(ranks[at_latest], return_index=True)
        last = at_latest[first]
        for r, n, b_in, b_out, op, seq, peer, t_end, site in zip(
                present.tolist(), counts[present].tolist(), sums_in[present].tolist(),
                sums_out[present].tolist(),
                *(rows[k][last].tolist() for k in ("op", "seq", "peer", "t_end", "site"))):
            state = self._rank(r)
            state.ops += n
            state.bytes_in += b_in
            state.bytes_out += b_out
            if t_end >= state.last_end_ns:
                state.last_op = protocol.OPS[op]
                state.last_seq, state.last_peer, state.last_end_ns = seq, peer, t_end
                state.last_site = site

    def _sizes(self, rows: dict[str, np.ndarray], n: np.ndarray) -> np.ndarray:
        op = rows["op"]
        base = np.where(_SIZE_IN[op], rows["bytes_in"],
                        np.where(_SIZE_OUT[op], rows["bytes_out"],
                                 np.maximum(rows["bytes_in"], rows["bytes_out"])))
        return np.where(_SIZE_TIMES_N[op], base * n, base)

    def _match_collectives(self, new: dict[str, np.ndarray]) -> None:
        """Merge a round's collective rows into those waiting, and take out the instances
        they complete.

        What waits (``WaitingRows``) is kept sorted by (group, seq), in arrival order within
        each: a round sorts only its own rows and merges their places in, and only the
        instances it touched can have completed, so it costs a pass over the index of what
        waits rather than a sort of it, or a copy of its columns (at a thousand ranks, a
        hundred thousand rows wait for the slowest rank).
        """
        if not len(new["rank"]):
            return
        new_key = (new["gkey"] << 40) | new["seq"]  # seq < 2**40, groups < 2**23
        order = np.argsort(new_key, kind="stable")
        new_key = new_key[order]
        waiting = self._coll
        new_at = waiting.add(new)[order]
        # the places of (waiting, new) merged in key order: the new ones go after the waiting
        # ones of their key, so that each instance's rows stay in arrival order
        old_at, old_key = waiting.at, waiting.key
        if len(old_key):
            into = np.searchsorted(old_key, new_key, side="right") + np.arange(len(new_key))
            merged = np.empty(len(old_key) + len(new_key), np.int64)
            key = np.empty(len(merged), np.int64)
            is_old = np.ones(len(merged), bool)
            is_old[into] = False
            merged[into], merged[is_old] = new_at, old_at
            key[into], key[is_old] = new_key, old_key
        else:
            merged, key = new_at, new_key
        touched = new_key[np.r_[True, new_key[1:] != new_key[:-1]]]
        lo = np.searchsorted(key, touched, side="left")
        counts = np.searchsorted(key, touched, side="right") - lo
        n = self._group_sizes[touched >> 40]
        complete = counts >= n
        kept = merged
        if complete.any():
            counts, n = counts[complete], n[complete]
            members = np.repeat(lo[complete] - np.r_[0, np.cumsum(counts)[:-1]], counts) \
                + np.arange(int(counts.sum()))
            self._emit_instances(waiting.take(merged[members]),
                                 np.r_[0, np.cumsum(counts)[:-1]], counts,
                                 np.ones(len(counts), bool), n)
            rest = np.ones(len(key), bool)
            rest[members] = False
            kept, key = merged[rest], key[rest]
        extra = len(key) - PENDING_MAX
        if extra > 0:
            self.evicted += extra
            newest = np.sort(np.argsort(waiting.column("t_end", kept), kind="stable")[extra:])
            kept, key = kept[newest], key[newest]
        waiting.keep(kept, key)

    def _emit_instances(self, rows: dict[str, np.ndarray], starts: np.ndarray,
                        counts: np.ndarray, complete: np.ndarray, n: np.ndarray) -> None:
        member = np.repeat(complete, counts)
        if self.on_collectives is not None:
            self.on_collectives(_take(rows, member), np.r_[0, np.cumsum(counts[complete])[:-1]])
        last_all = np.maximum.reduceat(rows["t_start"], starts)
        failed = np.bitwise_or.reduceat(rows["flags"] & protocol.FLAG_FAILED, starts) != 0
        mixed = np.minimum.reduceat(rows["op"], starts) != np.maximum.reduceat(rows["op"], starts)
        wrong = complete & (failed | mixed)
        # an instance that failed, or whose ranks called different ops, waited until it ended:
        # its lanes show no transfer (a record that failed itself is on them already)
        ready = np.where(np.repeat(wrong, counts), rows["t_end"], np.repeat(last_all, counts))
        noted = member & ~_failed(rows)
        self._note_segments(rows["rank"][noted], rows["op"][noted], rows["t_start"][noted],
                            ready[noted], rows["t_end"][noted], rows["gkey"][noted])
        if wrong.any():
            self.failed += int(wrong.sum())
            complete = complete & ~wrong
            if not complete.any():
                return
        sizes = self._sizes(rows, np.repeat(n, counts))
        first = np.minimum.reduceat(rows["t_start"], starts)[complete]
        last = last_all[complete]
        end = np.maximum.reduceat(rows["t_end"], starts)[complete]
        size = np.maximum.reduceat(sizes, starts)[complete]
        heads = starts[complete]
        self._record(rows["op"][heads], rows["gkey"][heads], rows["seq"][heads],
                     n[complete], size, first, last, end, rows["dtype"][heads],
                     rows["parent"][heads], rows["peer"][heads], rows["site"][heads],
                     rows["flags"][heads], transfers=None)

    def _match_p2p(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        total = len(rows["rank"])
        if not total:
            return rows
        send = _SEND_CODES[rows["op"]]
        src = np.where(send, rows["rank"], rows["peer"])
        dst = np.where(send, rows["peer"], rows["rank"])
        job = self._group_jobs[rows["gkey"]]  # the k-th send/recv of a pair, in one job
        order = np.lexsort((send, rows["seq"], dst, src, job))
        rows, src, dst, send, job = (_take(rows, order), src[order], dst[order], send[order],
                                     job[order])
        s = rows["seq"]
        starts = np.flatnonzero(np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
                                      | (s[1:] != s[:-1]) | (job[1:] != job[:-1])])
        counts = np.diff(np.r_[starts, total])
        # a pair: one receive then one send (lexsort puts recv, False, first)
        complete = (counts == 2) & ~send[starts] & send[np.minimum(starts + 1, total - 1)] \
            & (src[starts] >= 0)
        if complete.any():
            recv_i, send_i = starts[complete], starts[complete] + 1
            ok = ((rows["flags"][recv_i] | rows["flags"][send_i]) & protocol.FLAG_FAILED) == 0
            self.failed += int((~ok).sum())
            r_ok, s_ok = recv_i[ok], send_i[ok]
            if len(r_ok):
                self._record(rows["op"][s_ok], None, s[s_ok], np.full(len(r_ok), 2),
                             rows["bytes_in"][s_ok],
                             np.minimum(rows["t_start"][s_ok], rows["t_start"][r_ok]),
                             np.maximum(rows["t_start"][s_ok], rows["t_start"][r_ok]),
                             np.maximum(rows["t_end"][s_ok], rows["t_end"][r_ok]),
                             rows["dtype"][s_ok], rows["parent"][s_ok],
                             np.full(len(r_ok), -1), rows["site"][s_ok], rows["flags"][s_ok],
                             transfers=np.stack([src[r_ok], dst[r_ok]], axis=1),
                             recv_end=rows["t_end"][r_ok])
            if self.on_transfers is not None:
                self.on_transfers(_take(rows, recv_i), _take(rows, send_i))
            # a pair that failed waited until it ended; a record that failed itself is on
            # the lanes already
            both = np.r_[recv_i, send_i]
            ready = np.maximum(rows["t_start"][send_i], rows["t_start"][recv_i])
            ready = np.where(np.r_[ok, ok], np.r_[ready, ready], rows["t_end"][both])
            keep = ~_failed(rows)[both]
            both = both[keep]
            self._note_segments(rows["rank"][both], rows["op"][both], rows["t_start"][both],
                                ready[keep], rows["t_end"][both], rows["gkey"][both])
        keep = np.repeat(~complete, counts)
        return self._bounded(_take(rows, keep))

    def _record(self, ops, gkeys, seqs, ns, sizes, first, last, end, dtypes, parents, roots,
                sites, flags, transfers, recv_end=None) -> None:
        count = len(ops)
        if transfers is None:
            self.instances += count
        else:
            self.transfers += count
        times, skews = end - last, last - first
        # statistics per (op, n, size), like nccl-tests' rows, and per (op, shape, size): a
        # shape has one n, so one pass over the (op, shape) pairs fills both
        op_shape = ops.astype(np.int64) << 32 | self._shapes_of(gkeys, transfers)
        for combo in np.unique(op_shape).tolist():
            in_combo = op_shape == combo
            name, shape = protocol.OPS[combo >> 32], combo & 0xFFFFFFFF
            n = int(ns[in_combo][0])  # one per shape (a group's members: its shape's)
            combo_sizes = sizes[in_combo]
            uniq, inverse = np.unique(combo_sizes, return_inverse=True)
            for j, size in enumerate(uniq.tolist()):
                sel = inverse == j if len(uniq) > 1 else slice(None)
                t, s = times[in_combo][sel], skews[in_combo][sel]
                for table, key in ((self.stats, (name, n, size)),
                                   (self.shape_stats, (name, shape, size))):
                    row = table.get(key)
                    if row is None:
                        row = table[key] = StatRow(name, n, size)
                    row.add(t, s)
                    row.updated = self.instances + self.transfers
        if transfers is not None:  # each pair's first transfer: it also sets up the connection
            for k in np.flatnonzero(seqs == 1).tolist():
                pair = tuple(transfers[k].tolist())
                self.first_transfer_ns.setdefault(pair, int(end[k] - last[k]))
        collect = self.new_instances is not None
        tail = slice(None) if collect else slice(-RECENT_MAX, None)
        made = []
        ddp = (flags & protocol.FLAG_DDP) != 0
        arrived = None if recv_end is None else recv_end[tail].tolist()
        for i, (op, seq, size, f, la, e, dt, par, root, site, by_ddp) in enumerate(zip(
                *(a[tail].tolist() for a in (ops, seqs, sizes, first, last, end, dtypes,
                                             parents, roots, sites, ddp)))):
            if transfers is None:
                group = self.groups[int(gkeys[tail][i])][1]
            else:
                group = tuple(transfers[tail][i].tolist())
            made.append(Instance(protocol.OPS[op], group, seq, size, f, la, e,
                                 None if dt == protocol.NO_CODE else protocol.DTYPES[dt],
                                 None if par == protocol.NO_CODE else protocol.OPS[par],
                                 None if root < 0 else root, self.sites[site], by_ddp,
                                 None if arrived is None else arrived[i]))
        made.sort(key=lambda inst: inst.t_end)
        self.recent.extend(made)
        if collect:
            self.new_instances.extend(made)  # type: ignore[union-attr]

    def _shapes_of(self, gkeys: np.ndarray | None, transfers: np.ndarray | None) -> np.ndarray:
        """Each instance's shape (its group's), or each transfer's (its pair's distance)."""
        if transfers is None:
            return self._group_shapes[gkeys]
        distance = np.abs(transfers[:, 1] - transfers[:, 0])
        uniq, inverse = np.unique(distance, return_inverse=True)
        keys = np.fromiter((self._shape(group_shapes.pair_shape(0, d)) for d in uniq.tolist()),
                           np.int64, len(uniq))
        return keys[inverse]

    def _note_segments(self, ranks: np.ndarray, ops: np.ndarray, t_start: np.ndarray,
                       ready: np.ndarray, t_end: np.ndarray, gkeys: np.ndarray) -> None:
        """Append matched rows to their ranks' lanes, at the cost of a copy per row.

        A lane keeps the last SEGMENTS_MAX to 2 x SEGMENTS_MAX rows appended (matching
        rounds come in time order); what it drops moves the rank's horizon.
        """
        if not len(ranks) or not self.keeps_lanes:
            return
        ready = np.minimum(np.maximum(ready, t_start), t_end)
        # by rank, each rank's rows in their order: a slice of them a lane
        order = np.argsort(ranks, kind="stable")
        segs = np.stack([ops.astype(np.int64), t_start, ready, t_end, gkeys], axis=1)[order]
        counts = np.bincount(ranks)
        present = np.flatnonzero(counts)
        ends = np.cumsum(counts)[present]
        lanes = self._lanes
        for rank, lo, hi in zip(present.tolist(), (ends - counts[present]).tolist(),
                                ends.tolist()):
            if hi - lo > SEGMENTS_MAX:
                self._drop(rank, segs[lo:hi - SEGMENTS_MAX, 3])
                lo = hi - SEGMENTS_MAX
            lane, n = lanes.get(rank, _NO_LANE)
            m = hi - lo
            if n + m > len(lane) and len(lane) < 2 * SEGMENTS_MAX:  # grow: small jobs stay small
                size = min(2 * SEGMENTS_MAX, max(64, 2 * (n + m)))
                lane = np.concatenate([lane[:n], np.empty((size - n, LANE_COLUMNS), np.int64)])
            if n + m > len(lane):  # full: keep the last rows
                keep = SEGMENTS_MAX - m
                self._lane_from.pop(rank, None)  # its rows moved
                self._drop(rank, lane[:n - keep, 3])
                lane[:keep] = lane[n - keep:n]
                n = keep
            lane[n:n + m] = segs[lo:hi]
            lanes[rank] = (lane, n + m)

    def _drop(self, rank: int, t_end: np.ndarray) -> None:
        """Note that a rank's lane no longer shows anything that ended by these t_end."""
        if len(t_end):
            latest = int(t_end.max())
            self.lane_horizon[rank] = max(self.lane_horizon.get(rank, latest), latest)

    def _bounded(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        extra = len(rows["rank"]) - PENDING_MAX
        if extra <= 0:
            return rows
        self.evicted += extra
        oldest_last = np.argsort(rows["t_end"], kind="stable")[extra:]
        return _take(rows, np.sort(oldest_last))


def _by_lane_then_start(lane: np.ndarray, t_start: np.ndarray) -> np.ndarray | None:
    """The order of rows by lane (ascending already), then start, ties in their order; None
    when they are in it. One stable sort of a key that holds both where the starts span less
    than 2**40 ns (18 minutes; the rows come nearly in that order), else a lexsort."""
    if len(lane) < 2:
        return None
    base = int(t_start.min())
    if int(t_start.max()) - base >= 1 << 40 or int(lane[-1]) >= 1 << 22:
        return np.lexsort((t_start, lane))
    key = (lane << 40) | (t_start - base)
    return None if (key[1:] >= key[:-1]).all() else np.argsort(key, kind="stable")


def _empty_rows() -> dict[str, np.ndarray]:
    rows = {k: np.zeros(0, dtype=np.int64) for k in _ROW_FIELDS}
    for k in ("op", "parent", "dtype", "flags"):
        rows[k] = np.zeros(0, dtype=np.uint8)
    return rows


def _failed(rows: dict[str, np.ndarray]) -> np.ndarray:
    """The records that failed (their op raised or timed out)."""
    return (rows["flags"] & protocol.FLAG_FAILED) != 0


def _take(rows: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    """The rows ``index`` picks; a mask that keeps every row gives the rows themselves
    (never written in place: every step makes new arrays)."""
    if index.dtype == bool and len(index) and index.all():
        return rows
    return {k: v[index] for k, v in rows.items()}


def _concat(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not len(a["rank"]):
        return b
    return {k: np.concatenate([a[k], b[k]]) for k in a}


def _translate(codes: np.ndarray, lengths: np.ndarray,
               mappings: list[dict[int, int]]) -> np.ndarray:
    """Map each batch's own table indexes (``codes``, the batches' rows one after another,
    ``lengths`` of them each) to the model's global ones, through each batch's mapping."""
    if all(len(m) == 1 for m in mappings):  # the usual batch: one group, one call site
        return np.repeat(np.fromiter((next(iter(m.values())) for m in mappings), np.int64,
                                     len(mappings)), lengths)
    keys = np.fromiter((i << 32 | k for i, m in enumerate(mappings) for k in m), np.int64)
    values = np.fromiter((v for m in mappings for v in m.values()), np.int64)
    order = np.argsort(keys)
    wanted = np.repeat(np.arange(len(mappings), dtype=np.int64) << 32, lengths) | codes
    return values[order][np.searchsorted(keys[order], wanted)]


def _in_order(values: np.ndarray) -> list[int]:
    """The distinct values, in the order they first come."""
    uniq, first = np.unique(values, return_index=True)
    return uniq[np.argsort(first)].tolist()


def _keyed(job: np.ndarray, code: np.ndarray, key: Callable[[int, int], int]) -> np.ndarray:
    """Each row's model key of its (job, code): ``key(job, code)`` called once a pair, in the
    order the pairs first come."""
    pair = job << 32 | code
    if len(pair) and pair.min() == pair.max():  # the usual message: one group, one site
        p = int(pair[0])
        return np.full(len(pair), key(p >> 32, p & 0xFFFFFFFF), np.int64)
    uniq, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    keys = np.empty(len(uniq), np.int64)
    for i in np.argsort(first).tolist():
        p = int(uniq[i])
        keys[i] = key(p >> 32, p & 0xFFFFFFFF)
    return keys[inverse.reshape(-1)]
