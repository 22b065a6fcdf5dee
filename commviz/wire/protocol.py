"""The wire protocol between rank processes and the viewer (version 1).

Every ZeroMQ message is one msgpack map with ``v`` (the version) and ``k`` (the kind):

* ``hb``: heartbeat with the rank's identity and a telemetry sample (about 2 Hz);
* ``ops``: a columnar batch of operation records from one rank;
* ``bye``: the rank is exiting normally;
* ``ph``: compute phases the program marked with ``commviz.phase(name)``;
* ``topo``: the local GPUs of the rank's host and their links (NVLink, PCIe), from NVML;
* ``grp``: the members of the process groups an incarnation's batches name by id: sent once
  when a group is first used and again every ``GROUPS_EVERY_S``, so a late viewer learns them;
* ``gone``: sent by the node's harvester (not the rank) when a rank's process has ended: when,
  in what order among the node's ranks, how if it knows, and how many records it recovered
  from the process' shared-memory ring (``commviz/wire/ring.py``).

Every message of a rank process may carry ``inc``, the process' incarnation id (random,
fixed for its life), and its heartbeat ``job``, what the ranks of one job share (their
rendezvous): so one viewer tells apart two jobs that run at the same time with the same
rank numbers. Both are additive in version 1: without them the viewer goes by rank numbers.

Op batches are columnar (each column one little-endian byte string) so that both sides
stay cheap: the rank packs them off its hot path, the viewer decodes them with
``numpy.frombuffer`` and validates whole columns at once. Every other field is checked by
msgspec's typed decoding (the ``_Wire*`` structs below, with their constraints) in C, before
any of it reaches the viewer. ``docs/protocol.md`` is the human-readable description; this
module is the reference. Never pickle.
"""

from __future__ import annotations

import operator
import struct
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

import msgpack
import msgspec
import numpy as np
from msgspec import Meta

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
FLAG_RECOVERED = 64     # sent by the harvester from a dead process' ring, not by the rank

PHASE_NAME_MAX = 64     # characters of a phase's name
GPUS_MAX = 64           # GPUs of one host in a ``topo`` message
GpuLevel = Literal["", "INTERNAL", "PIX", "PXB", "PHB", "NODE", "SYS"]  # how two GPUs are linked
PHASE_DEPTH_MAX = 255   # nesting depth of a phase
CLOCK_SAMPLES_MAX = 16  # clock round trips in one heartbeat
INC_MAX = 1 << 63       # incarnation ids are in [1, INC_MAX); 0 stands for "not sent"
JOB_KEY_MAX = 256       # characters of a heartbeat's ``job``
GROUPS_EVERY_S = 10.0   # an incarnation repeats its ``grp`` tables this often
GROUP_MEMBERS_MAX = 1 << 20  # member entries in one ``grp`` message (about 5 MiB at most)

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
_COLUMN_AT = {name: i for i, name in enumerate(COLUMNS)}


class ProtocolError(ValueError):
    """A message that does not follow the protocol; the viewer counts and drops it."""


def pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def kind_head(kind: str) -> bytes:
    """What a message of ``kind`` holds right after its map's header, as commviz writes it
    (``v`` and ``k`` first): what ``has_head`` looks for to tell its kind without decoding."""
    return pack({"v": VERSION, "k": kind})[1:]


def has_head(data: bytes, head: bytes) -> bool:
    """Whether ``data`` is a small map (fixmap) that begins with ``head`` (``kind_head``)."""
    return data[1:len(head) + 1] == head and 0x80 <= data[0] <= 0x8f


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
               sites: list[list[Any]], inc: int = 0, n: int = 0) -> bytes:
    """Encode one batch. ``groups`` rows: [gid, name, [ranks]], none for the groups announced
    in ``grp`` messages; ``sites``: [sid, file, line]; ``inc``: the sender's incarnation id
    (0: none sent); ``n``: the batch's number among its process' batches (0: none)."""
    msg = {"v": VERSION, "k": "ops", "rank": rank, "cols": columns}
    if groups:
        msg["groups"] = groups
    msg["sites"] = sites
    if inc:
        msg["inc"] = inc
    if n:
        msg["n"] = n
    return pack(msg)


def encode_groups(rank: int, groups: list[list[Any]], inc: int = 0) -> bytes:
    """Encode a ``grp`` message: ``groups`` rows are [gid, name, [ranks]]."""
    msg = {"v": VERSION, "k": "grp", "rank": rank, "groups": groups}
    if inc:
        msg["inc"] = inc
    return pack(msg)


class Columns(Mapping[str, np.ndarray]):
    """A decoded batch's columns: the message's own bytes (``raw``, in COLUMNS order), each
    turned into a numpy array when first read. A viewer's round joins the bytes of all its
    batches and converts each column once (``join_columns``): converting them batch by batch cost
    more than the rest of decoding a batch."""

    __slots__ = ("raw", "rows", "_arrays")

    def __init__(self, raw: tuple[bytes, ...], rows: int) -> None:
        self.raw = raw
        self.rows = rows  # the batch's records, each column's items
        self._arrays: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._arrays.get(name)
        if col is None:
            col = self._arrays[name] = np.frombuffer(self.raw[_COLUMN_AT[name]],
                                                     COLUMN_DTYPES[name])
        return col

    def distinct(self, name: str) -> set[int]:
        """The values of the ``<u4`` column ``name`` (gid, site), as a set: from its bytes, as
        the few ids of a small batch are cheaper read than made into an array first."""
        raw = self.raw[_COLUMN_AT[name]]
        if _NATIVE_U4:
            return set(memoryview(raw).cast("I"))
        return set(np.frombuffer(raw, COLUMN_DTYPES[name]).tolist())

    def __iter__(self) -> Iterator[str]:
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)


def distinct(cols: Mapping[str, np.ndarray], name: str) -> set[int]:
    """The values of column ``name`` of a batch's ``cols`` (the wire's or arrays), as a set."""
    return cols.distinct(name) if type(cols) is Columns else set(cols[name].tolist())


def join_columns(columns: Sequence[Mapping[str, np.ndarray]],
                 names: Iterable[str]) -> dict[str, np.ndarray]:
    """Columns ``names`` of batches' ``columns``, one batch after another: from their bytes
    joined, when they came from the wire (one conversion for them all), else their arrays
    concatenated."""
    if len(columns) == 1:
        return {name: columns[0][name] for name in names}
    if all(type(c) is Columns for c in columns):
        # every batch's bytes by column, in one C-level pass over them all
        by_column = list(zip(*[c.raw for c in columns]))  # type: ignore[attr-defined]
        return {name: np.frombuffer(b"".join(by_column[_COLUMN_AT[name]]), COLUMN_DTYPES[name])
                for name in names}
    return {name: np.concatenate([c[name] for c in columns]) for name in names}


@dataclass(slots=True, eq=False)
class OpBatch:
    """A validated ``ops`` message: numpy columns plus its lookup tables. Not frozen, though
    nothing changes one once made: a frozen dataclass is four times as long to make, and the
    viewer makes two per message, tens of thousands a second at 1,024 ranks."""

    rank: int
    cols: Mapping[str, np.ndarray]  # by COLUMNS name: a dict, or the wire's Columns
    # the groups of its ``gid`` column: as the batch itself carried them (older ranks) or, once
    # the viewer has resolved them (viewer/groups.py), as the sender announced them in ``grp``
    groups: dict[int, tuple[str, tuple[int, ...]]]
    sites: dict[int, tuple[str, int]]
    inc: int = 0  # the sending process' incarnation id, 0 if it sent none
    # its number among the process' batches, 1, 2, ... (0: none): a dead process' harvester
    # sends its last batches again under their numbers (they may have died in its socket),
    # and the viewer keeps the first copy it gets (``viewer/batch_numbers.py``)
    n: int = 0

    def __len__(self) -> int:
        cols = self.cols
        return cols.rows if type(cols) is Columns else len(cols["id"])


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
    simulated: bool = False  # a simulator's rank (bench/fleet.py), no real job's


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


@dataclass(frozen=True)
class Groups:
    """A ``grp`` message: process groups by the ``gid`` the sender's batches name them with."""

    rank: int
    groups: dict[int, tuple[str, tuple[int, ...]]]
    inc: int = 0


@dataclass(frozen=True)
class Gone:
    """A rank's process ended, as the harvester of its node saw it (``gone``)."""

    rank: int
    pid: int
    t_ns: int        # when it ended, on the harvester's wall clock (to the millisecond)
    order: int       # 1 for the first of the node's processes to end, 2 for the next...
    code: int | None  # exit code, negative: the signal that killed it; None: not known
    recovered: int   # completed records it had not shipped, sent after its death
    running: int     # records of ops it was inside when it ended, sent after its death
    inc: int = 0


Message = OpBatch | Heartbeat | Bye | Phases | GpuTopology | Groups | Gone

TELEMETRY_KEYS = ("cpu_pct", "rss_bytes", "gpu_util_pct", "gpu_mem_used", "gpu_mem_total",
                   "gpu_power_w", "nvlink_tx_bps", "nvlink_rx_bps", "pcie_tx_bps",
                   "pcie_rx_bps")



# ---- decoding: the wire forms, checked by msgspec as they are decoded ----------------------
U63 = Annotated[int, Meta(ge=0, le=(1 << 63) - 1)]
Rank = Annotated[int, Meta(ge=0, lt=MAX_RANKS)]
Inc = Annotated[int, Meta(ge=1, le=INC_MAX - 1)]
Text = Annotated[str, Meta(max_length=1 << 16)]
Amount = Annotated[int, Meta(ge=0)] | Annotated[float, Meta(ge=0)] | None  # NaN fails ge
Id = Annotated[int, Meta(ge=0, lt=1 << 32)]  # a group's or a call site's, as the columns hold
GroupRow = tuple[Id, str, Annotated[list[Rank], Meta(min_length=1, max_length=MAX_RANKS)]]


class _Wire(msgspec.Struct, tag_field="k", kw_only=True):  # kw_only: required after optional
    v: int
    rank: Rank
    inc: Inc = 0  # defaults are not checked: 0 stands for "not sent"


class _WireCols(msgspec.Struct, forbid_unknown_fields=True):
    id: bytes
    op: bytes
    parent: bytes
    gid: bytes
    seq: bytes
    peer: bytes
    bytes_in: bytes
    bytes_out: bytes
    dtype: bytes
    flags: bytes
    t_start: bytes
    t_end: bytes
    site: bytes


_COLUMN_BYTES = operator.attrgetter(*COLUMNS)  # a batch's columns, in COLUMNS order
_ITEM_SIZES = [dt.itemsize for dt in COLUMN_DTYPES.values()]
_ROWS_OF_LENGTHS: dict[tuple[int, ...], int] = {}  # see _rows_of_lengths
# a <u4 column's bytes read as the machine's own unsigned ints (Columns.distinct)
_NATIVE_U4 = sys.byteorder == "little" and struct.calcsize("I") == 4


class _WireOps(_Wire, tag="ops"):
    cols: _WireCols
    groups: list[GroupRow] = []
    sites: list[tuple[Id, str, int]] = []
    n: U63 = 0


class _WireTelemetry(msgspec.Struct):
    cpu_pct: Amount = None
    rss_bytes: Amount = None
    gpu_util_pct: Amount = None
    gpu_mem_used: Amount = None
    gpu_mem_total: Amount = None
    gpu_power_w: Amount = None
    nvlink_tx_bps: Amount = None
    nvlink_rx_bps: Amount = None
    pcie_tx_bps: Amount = None
    pcie_rx_bps: Amount = None


class _WireHeartbeat(_Wire, tag="hb"):
    world: Annotated[int, Meta(ge=1, le=MAX_RANKS)]
    host: Text
    pid: U63
    backend: Text
    device: Text
    t_ns: U63
    dropped: U63
    tel: _WireTelemetry
    clk: Annotated[list[tuple[U63, U63, U63, U63]], Meta(max_length=CLOCK_SAMPLES_MAX)] = []
    job: Annotated[str, Meta(max_length=JOB_KEY_MAX)] = ""
    sim: bool = False


class _WireBye(_Wire, tag="bye"):
    t_ns: U63
    dropped: U63


PhaseRow = tuple[Annotated[str, Meta(min_length=1, max_length=PHASE_NAME_MAX)],
                 Annotated[int, Meta(ge=0, le=PHASE_DEPTH_MAX)], U63, U63]


class _WirePhases(_Wire, tag="ph"):
    spans: Annotated[list[PhaseRow], Meta(min_length=1, max_length=MAX_BATCH)]


Short = Annotated[str, Meta(max_length=256)]


class _WireTopology(_Wire, tag="topo"):
    host: Text
    gpu: int
    gpus: Annotated[list[tuple[Annotated[int, Meta(ge=0, lt=GPUS_MAX)], Short, Short, Short]],
                    Meta(max_length=GPUS_MAX)]
    links: list[tuple[int, int, Annotated[int, Meta(ge=0, lt=256)],
                      GpuLevel]]
    note: Short


class _WireGroups(_Wire, tag="grp"):
    groups: Annotated[list[GroupRow], Meta(min_length=1)]


class _WireGone(_Wire, tag="gone"):
    pid: U63
    t_ns: U63
    order: Annotated[int, Meta(ge=1, le=MAX_RANKS)]
    code: Annotated[int, Meta(ge=-255, le=255)] | None = None
    recovered: Annotated[int, Meta(ge=0)] = 0
    running: Annotated[int, Meta(ge=0)] = 0


_DECODER = msgspec.msgpack.Decoder(_WireOps | _WireHeartbeat | _WireBye | _WirePhases
                                   | _WireTopology | _WireGroups | _WireGone)
_VERSION_ONLY = msgspec.msgpack.Decoder(dict[str, Any])


def decode(data: bytes, columns: bool = True) -> Message:
    """Decode and validate one message, or raise ProtocolError. Never trusts the sender.
    ``columns=False``: the values of an op batch's columns are left to ``check_columns``."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        wire = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise ProtocolError(_why(data, str(exc))) from None
    except msgspec.DecodeError:
        raise ProtocolError("undecodable message") from None
    if wire.v != VERSION:
        raise ProtocolError(f"unsupported protocol version {wire.v!r}")
    if type(wire) is _WireOps:
        return _ops(wire, columns)
    return _CONVERT[type(wire)](wire)


def _why(data: bytes, error: str) -> str:
    """What a message that msgspec refused got wrong: its version first (a message of another
    version may have other fields), then its kind, then msgspec's own words."""
    try:
        msg = _VERSION_ONLY.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return "message is not a map"
    if msg.get("v") != VERSION:
        return f"unsupported protocol version {msg.get('v')!r}"
    if "`$.k`" in error or "field `k`" in error:
        return f"unknown message kind {msg.get('k')!r}"
    what, _, where = error.partition(" - at `$.")
    return f"malformed {msg.get('k')}: " + (f"field {where[:-1]!r}: {what}" if where else what)


def _groups(rows: list[GroupRow]) -> dict[int, tuple[str, tuple[int, ...]]]:
    return {gid: (name, tuple(ranks)) for gid, name, ranks in rows}


def _ops(wire: _WireOps, columns: bool = True) -> OpBatch:
    bufs = _COLUMN_BYTES(wire.cols)
    lengths = tuple(map(len, bufs))
    n = _ROWS_OF_LENGTHS.get(lengths)
    if n is None:
        n = _rows_of_lengths(lengths)
    cols = Columns(bufs, n)
    sites = {sid: (file, line) for sid, file, line in wire.sites}
    # a set of the few distinct ids: far cheaper than np.isin on a batch's small arrays
    if not cols.distinct("site") <= sites.keys():
        raise ProtocolError("op refers to a call site missing from the batch")
    if columns:
        _check_values(cols)
    groups = _groups(wire.groups) if wire.groups else {}
    # a batch carries all its groups (as older ranks send) or none (announced in ``grp``)
    if groups and not cols.distinct("gid") <= groups.keys():
        raise ProtocolError("op refers to a group missing from the batch")
    return OpBatch(wire.rank, cols, groups, sites, wire.inc, wire.n)


def _rows_of_lengths(lengths: tuple[int, ...]) -> int:
    """The records of a batch whose columns are ``lengths`` bytes long, or ProtocolError;
    valid lengths are kept in ``_ROWS_OF_LENGTHS`` (one entry per batch size: at most
    MAX_BATCH), which answers the next batch of that size in one lookup."""
    n = lengths[0] // 8  # the id column's items
    if not 0 < n <= MAX_BATCH or list(lengths) != [n * size for size in _ITEM_SIZES]:
        if not all(length % size == 0 for length, size in zip(lengths, _ITEM_SIZES)):
            raise ProtocolError("a column must be whole items of its type")
        if len({length // size for length, size in zip(lengths, _ITEM_SIZES)}) > 1:
            raise ProtocolError("columns differ in length")
        raise ProtocolError(f"batch must hold 1..{MAX_BATCH} records")
    _ROWS_OF_LENGTHS[lengths] = n
    return n


def _heartbeat(wire: _WireHeartbeat) -> Heartbeat:
    if not wire.rank < wire.world:
        raise ProtocolError("rank must be below world")
    tel = {key: getattr(wire.tel, key) for key in TELEMETRY_KEYS}
    return Heartbeat(wire.rank, wire.world, wire.host, wire.pid, wire.backend, wire.device,
                     wire.t_ns, wire.dropped, tel, tuple(wire.clk), wire.inc, wire.job,
                     wire.sim)


def _bye(wire: _WireBye) -> Bye:
    return Bye(wire.rank, wire.t_ns, wire.dropped, wire.inc)


def _phases(wire: _WirePhases) -> Phases:
    if any(t0 > t1 for _, _, t0, t1 in wire.spans):
        raise ProtocolError("each phase must have t_start <= t_end")
    return Phases(wire.rank, tuple(PhaseSpan(*row) for row in wire.spans), wire.inc)


def _topology(wire: _WireTopology) -> GpuTopology:
    n = len(wire.gpus)
    if len(wire.links) > n * (n - 1) // 2 or not all(0 <= a < b < n for a, b, _, _ in wire.links):
        raise ProtocolError("field 'links' must be [a, b, nvlinks, level] with a < b < GPUs")
    if not -1 <= wire.gpu < n:
        raise ProtocolError("field 'gpu' must be -1 or the index of one of the GPUs")
    return GpuTopology(wire.rank, wire.host, wire.gpu, tuple(wire.gpus), tuple(wire.links),
                       wire.note, wire.inc)


def _groups_message(wire: _WireGroups) -> Groups:
    if sum(len(ranks) for _, _, ranks in wire.groups) > GROUP_MEMBERS_MAX:
        raise ProtocolError(f"a 'grp' message may list at most {GROUP_MEMBERS_MAX} members")
    return Groups(wire.rank, _groups(wire.groups), wire.inc)


def _gone(wire: _WireGone) -> Gone:
    return Gone(wire.rank, wire.pid, wire.t_ns, wire.order, wire.code, wire.recovered,
                wire.running, wire.inc)


_CONVERT = {_WireHeartbeat: _heartbeat, _WireBye: _bye, _WirePhases: _phases,
            _WireTopology: _topology, _WireGroups: _groups_message, _WireGone: _gone}


def check_columns(batches: list[OpBatch]) -> dict[int, str]:
    """The batches (by index in ``batches``) holding a column value out of range, and why.

    ``decode(..., columns=False)`` leaves this to be done for a whole drain at once: at a
    thousand ranks a drain holds hundreds of small batches, and a check costs about the same
    for 50 values as for 50,000. Only when something is wrong are they checked one by one.
    """
    if not batches:
        return {}
    try:
        _check_values(join_columns([b.cols for b in batches], _CHECKED))
        return {}
    except ProtocolError:
        pass
    bad = {}
    for i, batch in enumerate(batches):
        try:
            _check_values(batch.cols)
        except ProtocolError as exc:
            bad[i] = str(exc)
    return bad


_CHECKED = ("op", "parent", "dtype", "seq", "peer", "bytes_in", "bytes_out", "t_start", "t_end")


def _check_values(cols: dict[str, np.ndarray]) -> None:
    """The columns' values, whole columns at a time (the group ids are checked where they are
    resolved: they may name groups announced earlier, see viewer/groups.py)."""
    if (cols["op"] >= len(OPS)).any():
        raise ProtocolError("unknown op code")
    parent = cols["parent"]
    if ((parent >= len(OPS)) & (parent != NO_CODE)).any():
        raise ProtocolError("unknown parent op code")
    dtype = cols["dtype"]
    if ((dtype >= len(DTYPES)) & (dtype != NO_CODE)).any():
        raise ProtocolError("unknown dtype code")
    if ((cols["seq"] < 0) | (cols["peer"] < -1) | (cols["bytes_in"] < 0)
            | (cols["bytes_out"] < 0) | (cols["t_start"] < 0)).any():
        raise ProtocolError("negative seq, peer, byte count or time")
    t_end = cols["t_end"]
    if ((t_end != -1) & (t_end < cols["t_start"])).any():
        raise ProtocolError("op ends before it starts")


def encode_heartbeat(rank: int, *, world: int, host: str, pid: int, backend: str, device: str,
                     t_ns: int, dropped: int, tel: dict[str, Any], inc: int, job: str,
                     clk: list[list[int]] | None = None, simulated: bool = False) -> bytes:
    """Encode a heartbeat: who the rank is, its clock and drops, its telemetry (``tel``:
    TELEMETRY_KEYS), its job key (cut to JOB_KEY_MAX) and the clock round trips measured since
    the last one (``clk``: [t1, t2, t3, t4] rows; none: left out); ``simulated``: sent by a
    simulator (bench/fleet.py), which every screen then says."""
    msg = {"v": VERSION, "k": "hb", "rank": rank, "world": world, "host": host, "pid": pid,
           "backend": backend, "device": device, "t_ns": t_ns, "dropped": dropped, "tel": tel,
           "inc": inc, "job": job[:JOB_KEY_MAX]}
    if clk:
        msg["clk"] = clk
    if simulated:
        msg["sim"] = True
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


def encode_topology(rank: int, host: str, topo: dict[str, Any], inc: int = 0) -> bytes:
    """Encode what rank/gpu_topology.read_topology (or no_gpu) returned."""
    msg = {"v": VERSION, "k": "topo", "rank": rank, "host": host, **topo}
    if inc:
        msg["inc"] = inc
    return pack(msg)


def encode_gone(rank: int, inc: int, pid: int, t_ns: int, order: int, code: int | None,
                recovered: int, running: int) -> bytes:
    """Encode the harvester's notice that a rank's process ended (``code`` None: unknown)."""
    msg = {"v": VERSION, "k": "gone", "rank": rank, "pid": pid, "t_ns": t_ns, "order": order,
           "recovered": recovered, "running": running}
    if inc:
        msg["inc"] = inc
    if code is not None:
        msg["code"] = code
    return pack(msg)
