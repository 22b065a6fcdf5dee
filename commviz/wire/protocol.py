"""The wire protocol between rank processes and the viewer (version 1).

Every ZeroMQ message is one msgpack map with ``v`` (the version) and ``k`` (the kind):

* ``hb``: heartbeat with the rank's identity and a telemetry sample (about 2 Hz);
* ``ops``: a columnar batch of operation records from one rank;
* ``bye``: the rank is exiting normally;
* ``ph``: compute phases the program marked with ``commviz.phase(name)``;
* ``topo``: the local GPUs of the rank's host and their links (NVLink, PCIe), from NVML.

Every message of a rank process may carry ``inc``, the process' incarnation id (random,
fixed for its life), and its heartbeat ``job``, what the ranks of one job share (their
rendezvous): so one viewer tells apart two jobs that run at the same time with the same
rank numbers. Both are additive in version 1: without them the viewer goes by rank numbers.

Op batches are columnar (each column one little-endian byte string) so that both sides
stay cheap: the rank packs them off its hot path, the viewer decodes them with
``numpy.frombuffer`` and validates whole columns at once. ``docs/protocol.md`` is the
human-readable description; this module is the reference. Never pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack
import numpy as np

VERSION = 1
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_BATCH = 8192
MAX_RANKS = 1 << 20
HEARTBEAT_S = 0.5  # a rank's emitter sends a heartbeat this often: silence is counted in them
ANNOUNCE_S = 0.02  # an op that has run this long is announced as in flight

# Operation names, in wire-code order. Append only: codes are part of the protocol.
OPS: tuple[str, ...] = (
    "send", "recv", "isend", "irecv",
    "broadcast", "all_reduce", "reduce",
    "all_gather", "all_gather_into_tensor", "all_gather_single",
    "gather", "scatter",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
    "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier",
    "all_gather_object", "broadcast_object_list", "gather_object",
    "scatter_object_list", "send_object_list", "recv_object_list",
    "batch_isend_irecv",
)
OP_CODE = {name: code for code, name in enumerate(OPS)}
NO_CODE = 255  # "none" for the parent and dtype columns

DTYPES: tuple[str, ...] = (
    "float32", "float64", "float16", "bfloat16", "uint8", "int8", "int16", "int32",
    "int64", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "other",
)
DTYPE_CODE = {name: code for code, name in enumerate(DTYPES)}

SENDS = frozenset({"send", "isend", "send_object_list"})
RECVS = frozenset({"recv", "irecv", "recv_object_list"})
P2P = SENDS | RECVS
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter", "broadcast_object_list",
                    "gather_object", "scatter_object_list"})
OBJECT_OPS = frozenset({"all_gather_object", "broadcast_object_list", "gather_object",
                        "scatter_object_list", "send_object_list", "recv_object_list"})

# Flag bits of the ``flags`` column.
FLAG_ASYNC = 1          # called with async_op=True, or isend/irecv
FLAG_UNWAITED = 2       # async work dropped unobserved: t_end is when it was dropped
FLAG_CUDA = 4           # CUDA tensors: host times of the call, not of the GPU work (but see 32)
FLAG_FAILED = 8         # the call raised, or its work completed with an error
FLAG_DDP = 16           # issued by DistributedDataParallel (its gradient buckets, its broadcasts)
FLAG_GPU_TIME = 32      # CUDA tensors through NCCL: t_end is when a CUDA event after the op ran

PHASE_NAME_MAX = 64     # characters of a phase's name
GPUS_MAX = 64           # GPUs of one host in a ``topo`` message
GPU_LEVELS = frozenset({"", "INTERNAL", "PIX", "PXB", "PHB", "NODE", "SYS"})
PHASE_DEPTH_MAX = 255   # nesting depth of a phase
CLOCK_SAMPLES_MAX = 16  # clock round trips in one heartbeat
INC_MAX = 1 << 63       # incarnation ids are in [1, INC_MAX); 0 stands for "not sent"
JOB_KEY_MAX = 256       # characters of a heartbeat's ``job``

# Columns of an ``ops`` batch: name -> numpy dtype. t_end == -1 marks an op still in flight
# (sent when an op has run longer than one emitter tick; its completed record follows
# with the same id).
COLUMNS: dict[str, str] = {
    "id": "<i8",        # per-rank operation id, increasing
    "op": "u1",         # OPS code
    "parent": "u1",     # OPS code of the logical op this transfer belongs to, or NO_CODE
    "gid": "<u4",       # index into the batch's ``groups`` table
    "seq": "<i8",       # collective: per-group sequence; p2p: per (src, dst) sequence
    "peer": "<i4",      # global rank: dst of a send, src of a recv, root; -1 if none
    "bytes_in": "<i8",  # bytes of the tensors the call reads on this rank
    "bytes_out": "<i8", # bytes of the tensors the call writes on this rank
    "dtype": "u1",      # DTYPES code or NO_CODE
    "flags": "u1",
    "t_start": "<i8",   # wall-clock ns (time.time_ns) when the call began
    "t_end": "<i8",     # wall-clock ns when it completed, or -1 while in flight
    "site": "<u4",      # index into the batch's ``sites`` table
}
COLUMN_DTYPES = {name: np.dtype(dt) for name, dt in COLUMNS.items()}


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the viewer counts and drops it."""


def pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack_small(data: bytes, max_bytes: int, max_str_len: int) -> dict | None:
    """A small flat msgpack map of this version (the control and clock channels' messages),
    or None for anything else: sizes are bounded before anything is allocated."""
    if len(data) > max_bytes:
        return None
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=True, max_str_len=max_str_len,
                              max_bin_len=0, max_array_len=0, max_map_len=8, max_ext_len=0)
    except Exception:  # msgpack raises many types on garbage
        return None
    if not isinstance(msg, dict) or msg.get("v") != VERSION:
        return None
    return msg


def encode_ops(rank: int, columns: dict[str, bytes], groups: list[list[Any]],
               sites: list[list[Any]], inc: int = 0) -> bytes:
    """Encode one batch. ``groups`` rows: [gid, name, [ranks]]; ``sites``: [sid, file, line];
    ``inc``: the sender's incarnation id (0: none sent)."""
    msg = {"v": VERSION, "k": "ops", "rank": rank, "cols": columns, "groups": groups,
           "sites": sites}
    if inc:
        msg["inc"] = inc
    return pack(msg)


@dataclass(frozen=True)
class OpBatch:
    """A validated ``ops`` message: numpy columns plus its lookup tables."""

    rank: int
    cols: dict[str, np.ndarray]
    groups: dict[int, tuple[str, tuple[int, ...]]]
    sites: dict[int, tuple[str, int]]
    inc: int = 0  # the sending process' incarnation id, 0 if it sent none

    def __len__(self) -> int:
        return len(self.cols["id"])


@dataclass(frozen=True)
class Heartbeat:
    rank: int
    world: int
    host: str
    pid: int
    backend: str
    device: str
    t_ns: int
    dropped: int
    telemetry: dict[str, float | None]
    # round trips of the clock channel since the last heartbeat: (t1, t2, t3, t4) rows
    clock: tuple[tuple[int, int, int, int], ...] = ()
    inc: int = 0   # the process' incarnation id, 0 if it sent none
    job: str = ""  # what the ranks of its job share (their rendezvous), "" if unknown


@dataclass(frozen=True)
class Bye:
    rank: int
    t_ns: int
    dropped: int
    inc: int = 0


class PhaseSpan(NamedTuple):
    """One completed compute phase on a rank: ``depth`` 0 is outermost on its thread."""

    name: str
    depth: int
    t_start: int
    t_end: int


@dataclass(frozen=True)
class Phases:
    rank: int
    spans: tuple[PhaseSpan, ...]
    inc: int = 0


@dataclass(frozen=True)
class GpuTopology:
    """The local GPUs of a rank's host as NVML sees them, and which one the rank uses."""

    rank: int
    host: str
    gpu: int                                  # index (NVML's) of the rank's GPU, -1: none
    gpus: tuple[tuple[int, str, str, str], ...]  # (index, uuid, name, PCI bus id)
    links: tuple[tuple[int, int, int, str], ...]  # (a, b, NVLinks, PCIe level), a < b
    note: str                                 # "no GPU: why", or ""
    inc: int = 0


Message = OpBatch | Heartbeat | Bye | Phases | GpuTopology

TELEMETRY_KEYS = ("cpu_pct", "rss_bytes", "gpu_util_pct", "gpu_mem_used", "gpu_mem_total",
                   "gpu_power_w", "nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps",
                   "pcie_rx_bps")


def decode(data: bytes) -> Message:
    """Decode and validate one message, or raise ProtocolError. Never trusts the sender."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_MESSAGE_BYTES,
                              max_str_len=1 << 16, max_array_len=MAX_BATCH * 4,
                              max_map_len=64)
    except Exception as exc:  # msgpack raises many types on garbage
        raise ProtocolError(f"undecodable message: {type(exc).__name__}") from None
    if not isinstance(msg, dict):
        raise ProtocolError("message is not a map")
    if msg.get("v") != VERSION:
        raise ProtocolError(f"unsupported protocol version {msg.get('v')!r}")
    kind = msg.get("k")
    if kind == "ops":
        return _decode_ops(msg)
    if kind == "hb":
        return _decode_heartbeat(msg)
    if kind == "bye":
        return Bye(_rank(msg), _int(msg, "t_ns"), _int(msg, "dropped"), _inc(msg))
    if kind == "ph":
        return _decode_phases(msg)
    if kind == "topo":
        return _decode_topology(msg)
    raise ProtocolError(f"unknown message kind {kind!r}")


def _int(msg: dict, key: str, lo: int = 0, hi: int = 1 << 63) -> int:
    value = msg.get(key)
    if type(value) is not int or not lo <= value < hi:
        raise ProtocolError(f"field {key!r} must be an int in [{lo}, {hi})")
    return value


def _str(msg: dict, key: str) -> str:
    value = msg.get(key)
    if not isinstance(value, str):
        raise ProtocolError(f"field {key!r} must be a string")
    return value


def _rank(msg: dict) -> int:
    return _int(msg, "rank", 0, MAX_RANKS)


def _inc(msg: dict) -> int:
    """The optional incarnation id (additive in version 1): 0 when absent."""
    return _int(msg, "inc", 1, INC_MAX) if "inc" in msg else 0


def _job(msg: dict) -> str:
    """A heartbeat's optional ``job`` (additive in version 1): "" when absent."""
    if "job" not in msg:
        return ""
    job = _str(msg, "job")
    if len(job) > JOB_KEY_MAX:
        raise ProtocolError(f"field 'job' is longer than {JOB_KEY_MAX} characters")
    return job


def _decode_heartbeat(msg: dict) -> Heartbeat:
    tel = msg.get("tel")
    if not isinstance(tel, dict):
        raise ProtocolError("field 'tel' must be a map")
    telemetry: dict[str, float | None] = {}
    for key in TELEMETRY_KEYS:
        value = tel.get(key)
        if value is not None and (type(value) not in (int, float) or value != value or value < 0):
            raise ProtocolError(f"telemetry {key!r} must be a non-negative number or nil")
        telemetry[key] = value
    rank = _rank(msg)
    world = _int(msg, "world", 1, MAX_RANKS + 1)
    if rank >= world:
        raise ProtocolError("rank must be below world")
    return Heartbeat(rank, world, _str(msg, "host"), _int(msg, "pid"), _str(msg, "backend"),
                     _str(msg, "device"), _int(msg, "t_ns"), _int(msg, "dropped"), telemetry,
                     _clock_samples(msg.get("clk", [])), _inc(msg), _job(msg))


def _clock_samples(rows: Any) -> tuple[tuple[int, int, int, int], ...]:
    """The optional ``clk`` field of a heartbeat (additive in version 1)."""
    if not isinstance(rows, list) or len(rows) > CLOCK_SAMPLES_MAX or not all(
            isinstance(row, list) and len(row) == 4
            and all(type(t) is int and 0 <= t < 1 << 63 for t in row) for row in rows):
        raise ProtocolError(f"field 'clk' must be a list of at most {CLOCK_SAMPLES_MAX} "
                            "[t1, t2, t3, t4] rows of non-negative ints")
    return tuple(tuple(row) for row in rows)


def encode_heartbeat(rank: int, *, world: int, host: str, pid: int, backend: str, device: str,
                     t_ns: int, dropped: int, tel: dict[str, Any], inc: int, job: str,
                     clk: list[list[int]] | None = None) -> bytes:
    """Encode a heartbeat: who the rank is, its clock and drops, its telemetry (``tel``:
    TELEMETRY_KEYS), its job key (cut to JOB_KEY_MAX) and the clock round trips measured since
    the last one (``clk``: [t1, t2, t3, t4] rows; none: left out)."""
    msg = {"v": VERSION, "k": "hb", "rank": rank, "world": world, "host": host, "pid": pid,
           "backend": backend, "device": device, "t_ns": t_ns, "dropped": dropped, "tel": tel,
           "inc": inc, "job": job[:JOB_KEY_MAX]}
    if clk:
        msg["clk"] = clk
    return pack(msg)


def encode_bye(rank: int, inc: int, t_ns: int, dropped: int) -> bytes:
    """Encode a rank's goodbye: it has flushed what it had and stops (``dropped``: in all)."""
    return pack({"v": VERSION, "k": "bye", "rank": rank, "inc": inc, "t_ns": t_ns,
                 "dropped": dropped})


def encode_phases(rank: int, spans: list[tuple[str, int, int, int]], inc: int = 0) -> bytes:
    """Encode completed phases as ``[name, depth, t_start, t_end]`` rows."""
    msg = {"v": VERSION, "k": "ph", "rank": rank, "spans": spans}
    if inc:
        msg["inc"] = inc
    return pack(msg)


def _decode_phases(msg: dict) -> Phases:
    rows = msg.get("spans")
    if not isinstance(rows, list) or not 0 < len(rows) <= MAX_BATCH:
        raise ProtocolError(f"field 'spans' must be a list of 1..{MAX_BATCH} phases")
    spans = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                and 0 < len(row[0]) <= PHASE_NAME_MAX
                and all(type(v) is int for v in row[1:])
                and 0 <= row[1] <= PHASE_DEPTH_MAX and 0 <= row[2] <= row[3] < 1 << 63):
            raise ProtocolError("each phase must be [name, depth, t_start, t_end], "
                                "0 <= t_start <= t_end")
        spans.append(PhaseSpan(*row))
    return Phases(_rank(msg), tuple(spans), _inc(msg))


def encode_topology(rank: int, host: str, topo: dict[str, Any], inc: int = 0) -> bytes:
    """Encode what rank/gpu_topology.read_topology (or no_gpu) returned."""
    msg = {"v": VERSION, "k": "topo", "rank": rank, "host": host, **topo}
    if inc:
        msg["inc"] = inc
    return pack(msg)


def _decode_topology(msg: dict) -> GpuTopology:
    gpus, links, note = msg.get("gpus"), msg.get("links"), _str(msg, "note")
    if not isinstance(gpus, list) or len(gpus) > GPUS_MAX or not all(
            isinstance(g, list) and len(g) == 4 and type(g[0]) is int and 0 <= g[0] < GPUS_MAX
            and all(isinstance(v, str) and len(v) <= 256 for v in g[1:]) for g in gpus):
        raise ProtocolError(f"field 'gpus' must be up to {GPUS_MAX} [index, uuid, name, bus]")
    n = len(gpus)
    if not isinstance(links, list) or len(links) > n * (n - 1) // 2 or not all(
            isinstance(li, list) and len(li) == 4 and all(type(v) is int for v in li[:3])
            and 0 <= li[0] < li[1] < n and 0 <= li[2] < 256 and li[3] in GPU_LEVELS
            for li in links):
        raise ProtocolError("field 'links' must be [a, b, nvlinks, level] with a < b < GPUs")
    if len(note) > 256:
        raise ProtocolError("field 'note' is too long")
    return GpuTopology(_rank(msg), _str(msg, "host"), _int(msg, "gpu", -1, n),
                       tuple(tuple(g) for g in gpus), tuple(tuple(li) for li in links), note,
                       _inc(msg))


def _decode_ops(msg: dict) -> OpBatch:
    rank = _rank(msg)
    raw = msg.get("cols")
    if not isinstance(raw, dict) or set(raw) != COLUMNS.keys():
        raise ProtocolError("field 'cols' must hold exactly the protocol's columns")
    cols: dict[str, np.ndarray] = {}
    n = None
    for name, dtype in COLUMN_DTYPES.items():
        buf = raw[name]
        if not isinstance(buf, bytes) or len(buf) % dtype.itemsize:
            raise ProtocolError(f"column {name!r} must be bytes of {dtype} items")
        col = np.frombuffer(buf, dtype=dtype)
        if n is None:
            n = len(col)
        elif len(col) != n:
            raise ProtocolError("columns differ in length")
        cols[name] = col
    if not n or n > MAX_BATCH:
        raise ProtocolError(f"batch must hold 1..{MAX_BATCH} records")
    groups = _decode_groups(msg.get("groups"))
    sites = _decode_sites(msg.get("sites"))
    _check_columns(cols, groups, sites)
    return OpBatch(rank, cols, groups, sites, _inc(msg))


def _decode_groups(rows: Any) -> dict[int, tuple[str, tuple[int, ...]]]:
    if not isinstance(rows, list) or not rows:
        raise ProtocolError("field 'groups' must be a non-empty list")
    groups = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is int
                and isinstance(row[1], str) and isinstance(row[2], list) and row[2]
                and all(type(r) is int and 0 <= r < MAX_RANKS for r in row[2])):
            raise ProtocolError("each group must be [gid, name, [ranks...]]")
        groups[row[0]] = (row[1], tuple(row[2]))
    return groups


def _decode_sites(rows: Any) -> dict[int, tuple[str, int]]:
    if not isinstance(rows, list):
        raise ProtocolError("field 'sites' must be a list")
    sites = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is int
                and isinstance(row[1], str) and type(row[2]) is int):
            raise ProtocolError("each site must be [sid, file, line]")
        sites[row[0]] = (row[1], row[2])
    return sites


def _check_columns(cols: dict[str, np.ndarray], groups: dict, sites: dict) -> None:
    if (cols["op"] >= len(OPS)).any():
        raise ProtocolError("unknown op code")
    parent = cols["parent"]
    if ((parent >= len(OPS)) & (parent != NO_CODE)).any():
        raise ProtocolError("unknown parent op code")
    dtype = cols["dtype"]
    if ((dtype >= len(DTYPES)) & (dtype != NO_CODE)).any():
        raise ProtocolError("unknown dtype code")
    # a set of the few distinct ids: far cheaper than np.isin on a batch's small arrays
    if not set(cols["gid"].tolist()) <= groups.keys():
        raise ProtocolError("op refers to a group missing from the batch")
    if not set(cols["site"].tolist()) <= sites.keys():
        raise ProtocolError("op refers to a call site missing from the batch")
    if ((cols["seq"] < 0) | (cols["peer"] < -1) | (cols["bytes_in"] < 0)
            | (cols["bytes_out"] < 0) | (cols["t_start"] < 0)).any():
        raise ProtocolError("negative seq, peer, byte count or time")
    t_end = cols["t_end"]
    if ((t_end != -1) & (t_end < cols["t_start"])).any():
        raise ProtocolError("op ends before it starts")
