"""Shared test doubles: protocol messages built by hand, a frozen clock, a scripted session.

Everything here is deterministic (fixed hosts, pids, telemetry and timestamps), so a view
fed from these helpers renders the same on every run and snapshots can be compared.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from commviz.knowledge.nccl_log import NcclLog
from commviz.viewer.diagnose import Diagnosis, Finding
from commviz.viewer.model import Model
from commviz.wire import protocol

DEFAULT_GROUPS: dict[int, tuple[str, tuple[int, ...]]] = {0: ("0", (0, 1, 2, 3))}
DEFAULT_SITES: dict[int, tuple[str, int]] = {0: ("demo.py", 12)}
DURATION_NS = 250_000  # t_end - t_start of a record that does not give t_end

# Scripted time: wall-clock ns of the first op, and the step between successive ops.
T0_NS = 1_700_000_000_000_000_000
STEP_NS = 1_000_000


class FakeClock:
    """A frozen clock: ``monotonic`` seconds and ``wall_ns`` nanoseconds move only on advance().

    The instance itself is callable as the monotonic clock, so it can be handed to
    ``Model(clock=...)`` and ``CommvizApp(clock=..., wall_ns=clock.wall_ns)``.
    """

    def __init__(self, monotonic: float = 100.0, wall_ns: int = T0_NS) -> None:
        self.t = monotonic
        self.ns = wall_ns

    def __call__(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def wall_ns(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.ns += round(seconds * 1e9)

    def set_wall_ns(self, ns: int) -> None:
        self.ns = ns


class FakeDiagnosis:
    """What the views read of a ``Diagnosis``, holding the findings a test made by hand (as
    a demo's run found them): none ended before them, no rank arrived late."""

    def __init__(self, held: Iterable[Finding]) -> None:
        self.held = list(held)
        self.history: list[Finding] = []

    def findings(self) -> list[Finding]:
        return list(self.held)

    def late_arrivals(self) -> list:
        return []


class FakeSession:
    """What CommvizApp uses of a viewer Session (``source.Source``), without a socket or a
    collector thread: no NCCL log is read, nothing is recorded unless a test sets
    ``recorder``, nothing is diagnosed unless a test sets ``diagnosis`` (one it made on
    ``model``, or a stand-in with the findings it wants shown)."""

    def __init__(self, clock: FakeClock | None = None, addr: str = "tcp://127.0.0.1:5555") -> None:
        self.clock = clock if clock is not None else FakeClock()
        self.model = Model(clock=self.clock)
        self.lock = threading.Lock()
        self.addr = addr
        self.rejected = 0
        self.shed = 0
        self.dropped_by_relays = 0
        self.started = False
        self.closed = False
        self.recorder: object | None = None
        self.nccl: NcclLog | None = None
        self.diagnosis: Diagnosis | FakeDiagnosis | None = None
        self.frames_begun = self.frames_ended = 0

    def start(self) -> None:
        self.started = True

    def frame_begins(self) -> None:
        self.frames_begun += 1

    def frame_ends(self) -> None:
        self.frames_ended += 1

    def close(self, ended: Iterable[int] | None = ()) -> None:
        self.closed = True

    def reset(self) -> None:
        with self.lock:
            self.model = Model(clock=self.clock)
            self.diagnosis = None  # made on the model left behind

    def note_event(self, key: str, fields: dict[str, Any]) -> None:
        """As a session's: how a rank's process ended goes to the model."""
        if type(fields.get("rank")) is int and type(fields.get("code")) is int:
            with self.lock:
                self.model.process_ended(fields["rank"], fields["code"])

    def feed(self, messages: Iterable[protocol.Message]) -> None:
        """Apply one drain round, as the collector thread would."""
        with self.lock:
            self.model.apply(list(messages))


def op_batch(rank: int, records: list[Mapping[str, Any]],
             groups: Mapping[int, tuple[str, tuple[int, ...]]] | None = None,
             sites: Mapping[int, tuple[str, int]] | None = None) -> protocol.OpBatch:
    """An OpBatch from readable records.

    Keys: id, op (name), seq, peer (-1), bytes_in, bytes_out (0), t_start, t_end (t_start +
    DURATION_NS; -1 for in flight), parent (name or None), dtype (name, "float32"; None for
    none), flags (0), gid (0), site (0).
    """
    groups = dict(DEFAULT_GROUPS if groups is None else groups)
    sites = dict(DEFAULT_SITES if sites is None else sites)
    values: dict[str, list[int]] = {name: [] for name in protocol.COLUMNS}
    for r in records:
        t_start = int(r["t_start"])
        parent, dtype = r.get("parent"), r.get("dtype", "float32")
        row = {
            "id": r["id"], "op": protocol.OP_CODE[r["op"]],
            "parent": protocol.NO_CODE if parent is None else protocol.OP_CODE[parent],
            "gid": r.get("gid", 0), "seq": r["seq"], "peer": r.get("peer", -1),
            "bytes_in": r.get("bytes_in", 0), "bytes_out": r.get("bytes_out", 0),
            "dtype": protocol.NO_CODE if dtype is None else protocol.DTYPE_CODE[dtype],
            "flags": r.get("flags", 0), "t_start": t_start,
            "t_end": r.get("t_end", t_start + DURATION_NS), "site": r.get("site", 0),
        }
        for name, value in row.items():
            values[name].append(int(value))
    cols = {name: np.array(values[name], dtype=dt) for name, dt in protocol.COLUMN_DTYPES.items()}
    return protocol.OpBatch(rank, cols, groups, sites)


def heartbeat(rank: int, world: int, cpu: float = 25.0, rss: int = 512 * 1024 * 1024,
              t_ns: int = T0_NS, dropped: int = 0) -> protocol.Heartbeat:
    """A CPU rank's heartbeat with fixed identity (host node0, pid 1000+rank, gloo, cpu)."""
    telemetry: dict[str, float | None] = {
        "cpu_pct": cpu, "rss_bytes": rss, "gpu_util_pct": None, "gpu_mem_used": None,
        "gpu_mem_total": None, "gpu_power_w": None,
    }
    return protocol.Heartbeat(rank, world, "node0", 1000 + rank, "gloo", "cpu", t_ns, dropped,
                              telemetry)


def gpu_heartbeat(rank: int, world: int, t_ns: int = T0_NS,
                  **rates: float | None) -> protocol.Heartbeat:
    """An NCCL rank's heartbeat on GPU ``rank`` (cuda:rank), with NVML's telemetry and the
    link ``rates`` given (``nvlink_tx_bps``...; the others None, as NVML leaves them)."""
    telemetry: dict[str, float | None] = {
        "cpu_pct": 100.0, "rss_bytes": 4e9, "gpu_util_pct": 87.0, "gpu_mem_used": 60e9,
        "gpu_mem_total": 141e9, "gpu_power_w": 412.0, "nvlink_tx_bps": None,
        "nvlink_rx_bps": None, "pcie_tx_bps": None, "pcie_rx_bps": None, **rates}
    return protocol.Heartbeat(rank, world, "node0", 1000 + rank, "nccl", f"cuda:{rank}", t_ns,
                              0, telemetry)


def heartbeats(world: int, t_ns: int = T0_NS) -> list[protocol.Heartbeat]:
    """One heartbeat per rank, with a per-rank (but fixed) CPU load."""
    return [heartbeat(r, world, cpu=10.0 + 20 * r, rss=(256 + 64 * r) * 1024 * 1024, t_ns=t_ns)
            for r in range(world)]


def _world_group(world: int) -> dict[int, tuple[str, tuple[int, ...]]]:
    return {0: ("0", tuple(range(world)))}


def scripted_collective(op: str, world: int = 4, steps: int = 3, nbytes: int = 4096,
                        out_factor: int = 1, peer: int = -1, t0_ns: int = T0_NS,
                        first: int = 0) -> list[protocol.Message]:
    """Heartbeats, then one batch per rank holding ``steps`` instances of collective ``op``.

    The steps are first, first+1, ...; step k (op id and seq k) starts at t0 + k*STEP_NS
    on rank 0 and r*10 us later on rank r (so skew is 10 us x (world-1)); it ends on every
    rank at the same time, DURATION_NS + k*50 us after the last rank started.
    """
    messages: list[protocol.Message] = list(heartbeats(world, t0_ns))
    for rank in range(world):
        records = []
        for k in range(first, first + steps):
            start = t0_ns + k * STEP_NS + rank * 10_000
            end = t0_ns + k * STEP_NS + (world - 1) * 10_000 + DURATION_NS + k * 50_000
            records.append({"id": k, "op": op, "seq": k, "peer": peer, "bytes_in": nbytes,
                            "bytes_out": nbytes * out_factor, "t_start": start, "t_end": end})
        messages.append(op_batch(rank, records, groups=_world_group(world)))
    return messages


def scripted_all_gather(world: int = 4, steps: int = 3, nbytes: int = 4096,
                        t0_ns: int = T0_NS, first: int = 0) -> list[protocol.Message]:
    """all_gather of ``nbytes`` per rank: each rank writes world x nbytes."""
    return scripted_collective("all_gather", world, steps, nbytes, out_factor=world,
                               t0_ns=t0_ns, first=first)


def scripted_all_reduce(world: int = 4, steps: int = 3, nbytes: int = 1 << 20,
                        t0_ns: int = T0_NS, first: int = 0) -> list[protocol.Message]:
    return scripted_collective("all_reduce", world, steps, nbytes, t0_ns=t0_ns, first=first)


def scripted_broadcast(world: int = 4, steps: int = 3, nbytes: int = 65536, root: int = 0,
                       t0_ns: int = T0_NS, first: int = 0) -> list[protocol.Message]:
    return scripted_collective("broadcast", world, steps, nbytes, peer=root, t0_ns=t0_ns,
                               first=first)


def scripted_send_recv(world: int = 4, steps: int = 3, nbytes: int = 8192,
                       t0_ns: int = T0_NS) -> list[protocol.Message]:
    """Even ranks send ``steps`` messages to the next odd rank, which receives them."""
    messages: list[protocol.Message] = list(heartbeats(world, t0_ns))
    for rank in range(world):
        sender = rank % 2 == 0
        peer = rank + 1 if sender else rank - 1
        if peer >= world:
            continue
        records = []
        for k in range(steps):
            start = t0_ns + k * STEP_NS + (0 if sender else 5_000)
            records.append({"id": k, "op": "send" if sender else "recv", "seq": k + 1, "peer": peer,
                            "bytes_in": nbytes if sender else 0,
                            "bytes_out": 0 if sender else nbytes,
                            "t_start": start, "t_end": t0_ns + k * STEP_NS + DURATION_NS})
        messages.append(op_batch(rank, records, groups=_world_group(world)))
    return messages


def inflight(rank: int, op: str, seq: int, t_start: int, op_id: int = 100, world: int = 4,
             nbytes: int = 4096) -> protocol.OpBatch:
    """The record a rank sends for an op still running (t_end == -1)."""
    return op_batch(rank, [{"id": op_id, "op": op, "seq": seq, "bytes_in": nbytes,
                            "bytes_out": nbytes, "t_start": t_start, "t_end": -1}],
                    groups=_world_group(world))


def bye(rank: int, t_ns: int = T0_NS, dropped: int = 0) -> protocol.Bye:
    return protocol.Bye(rank, t_ns, dropped)


class FakeRankProcess:
    """What the app reads of a launcher.RankProcess."""

    def __init__(self, rank: int, returncode: int, error: str = "") -> None:
        self.rank, self.returncode, self._error = rank, returncode, error
        self.who = f"rank {rank}" if isinstance(rank, int) else f"the {rank}"

    def error_line(self) -> str:
        return self._error or f"exit code {self.returncode}"


class FakeRanks:
    """A launcher.Ranks stand-in: ``end(rank, code)`` scripts what the next poll() reports."""

    logs = "rank logs"

    def __init__(self, world: int = 4) -> None:
        self.world = world
        self.ended: list[FakeRankProcess] = []
        self._pending: list[FakeRankProcess] = []
        self.stopped = False

    def end(self, rank: int, returncode: int = 0, error: str = "") -> None:
        self._pending.append(FakeRankProcess(rank, returncode, error))

    def poll(self) -> list[FakeRankProcess]:
        ended, self._pending = self._pending, []
        self.ended.extend(ended)
        return ended

    def running(self) -> int:
        return 0 if self.stopped else self.world - len(self.ended)

    def failed(self) -> list[FakeRankProcess]:
        return [rp for rp in self.ended if rp.returncode]

    def stop(self) -> None:
        self.stopped = True

    def cleanup_logs(self) -> None:
        self.logs_removed = True


# ---- NVML ----------------------------------------------------------------------------------
class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 (pynvml's names)
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


def fake_nvml(gpus: int = 0, nvlinks: int = 0, levels: dict | None = None,
              driver: bool = True) -> types.ModuleType:
    """A pynvml with ``gpus`` GPUs, ``nvlinks`` NVLinks between GPUs 0 and 1, 2 and 3... (none:
    NVLink not supported), and ``levels[(a, b)]`` as their common PCIe ancestor."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = NVMLError
    nv.NVML_FEATURE_ENABLED, nv.NVML_NVLINK_MAX_LINKS = 1, 18
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    bus = [f"00000000:{0x18 + 0x10 * i:02X}:00.0" for i in range(gpus)]
    nv.counters = {138: 0, 139: 0}  # KiB moved over NVLink so far
    nv.t_us = 1_000_000

    def init() -> None:
        if not driver:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def handle(i: int) -> int:
        if not 0 <= i < gpus:
            raise NVMLError("Invalid Argument")
        return i

    def nvlink_state(h: int, link: int) -> int:
        if not nvlinks or h ^ 1 >= gpus:
            raise NVMLError_NotSupported("Not Supported")
        return 1 if link < nvlinks else 0

    def remote(h: int, link: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=bus[h ^ 1].encode())  # old pynvml: bytes

    def field_values(h: int, fields: list) -> list:
        if not nvlinks:
            raise NVMLError_NotSupported("Not Supported")
        return [types.SimpleNamespace(fieldId=f, nvmlReturn=0, timestamp=nv.t_us,
                                      value=types.SimpleNamespace(ullVal=nv.counters[f]))
                for f, _scope in fields]

    nv.nvmlInit = init
    nv.nvmlDeviceGetCount = lambda: gpus
    nv.nvmlDeviceGetHandleByIndex = handle
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: handle(int(uuid.rsplit("-", 1)[1]))
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-fake-{h}"
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=bus[h])
    nv.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: (levels or {})[(min(a, b), max(a, b))]
    nv.nvmlDeviceGetNvLinkState = nvlink_state
    nv.nvmlDeviceGetNvLinkRemotePciInfo = remote
    nv.nvmlDeviceGetFieldValues = field_values
    nv.nvmlDeviceGetPcieThroughput = lambda h, counter: 250 if counter == 0 else 500
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=87)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=1e9, total=141e9)
    nv.nvmlDeviceGetPowerUsage = lambda h: 412_000
    return nv


def topology(rank: int, host: str, nv: types.ModuleType, gpu: int) -> protocol.GpuTopology:
    """The ``topo`` message a rank on GPU ``gpu`` of ``host`` sends, read through the fake
    NVML ``nv`` and through the wire format."""
    from commviz.rank.gpu_topology import read_topology

    msg = protocol.decode(protocol.encode_topology(rank, host,
                                                   read_topology(nv, f"GPU-fake-{gpu}")))
    assert isinstance(msg, protocol.GpuTopology)
    return msg
