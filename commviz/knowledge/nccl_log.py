"""What NCCL says about itself when a job runs with ``NCCL_DEBUG=INFO``: read from its lines.

NCCL prints, per process, ``host:pid:tid [cudaDev] NCCL INFO <message>`` (docs/nccl.md lists
the messages read here, with the NCCL source that prints them). At init: its version, each
communicator (``comm 0x.. rank r nranks n ... - Init START/COMPLETE``), the rings of each
channel, the trees, the transport of every connection (``Channel 00/0 : 0[0] -> 1[1] via
P2P/IPC``); per op with ``NCCL_DEBUG_SUBSYS`` including COLL and TUNING, the call
(``AllReduce: opCount ...``) and, on each communicator's rank 0, the algorithm and protocol
it chose (``AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE ...``).

Only facts NCCL printed are kept: an op whose choice was not printed has no algorithm here,
never a guessed one. Lines that are not NCCL's, or that do not parse, are ignored. Pure (no
Textual, no torch); thread-safe, since the job's stdout and stderr are read on two threads.
"""

from __future__ import annotations

import collections
import re
import threading
from dataclasses import dataclass, field

UNKNOWN_NO_LOG = "algorithm unknown (run with NCCL_DEBUG=INFO to see NCCL's choice)"
UNKNOWN_NO_TUNING = ("algorithm unknown (NCCL printed no choice for it: add "
                     "NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING)")
OPS_KEPT = 1000

_PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                     r"NCCL INFO (?P<msg>.*?)\s*$")
_VERSION = re.compile(r"(?:^|[\s:])NCCL version (\d+\.\d+\.\d+\S*)")
_COMM = re.compile(r"(?:^|\s)comm (0x[0-9a-fA-F]+) rank (\d+) n[Rr]anks (\d+)\b(.*)$")
_COMM_FIELD = re.compile(r"\b(cudaDev|busId|commId|nNodes|localRanks|localRank) (\S+)")
_CONN = re.compile(r"^(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)\[[0-9a-fA-F]+\] -> "
                   r"(\d+)\[[0-9a-fA-F]+\](?: \[(send|receive)\])? via (\S.*)$")
_RING_ORDER = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)$")
_RING_HOP = re.compile(r"^Ring (\d+) : (-?\d+) -> (\d+) -> (-?\d+)$")
_TREE = re.compile(r"\[(\d+)\] (-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)")
_CHANNELS = re.compile(r"(\d+) coll channels, (?:(\d+) collnet channels, )?"
                       r"(?:(\d+) nvls channels, )?(\d+) p2p channels")
_NETWORK = re.compile(r"^Using network (\S+)")
# the NICs a process uses: ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ...``
# (a port's link layer: RoCE and InfiniBand share NCCL's IB transport, only this tells them
# apart), ``NET/Socket : Using [0]eth0:10.1.2.7<0>``
_NET_USING = re.compile(r"^NET/(IB|Socket) : Using (.*?)(?:;|$)")
_IB_NIC = re.compile(r"\[\d+\]([\w.-]+):\d+/(IB|RoCE)\b")
_SOCKET_NIC = re.compile(r"\[\d+\]([\w.-]+):")
_GDR_HCA = re.compile(r"^NET/IB : GPU Direct RDMA Enabled for HCA \d+ '([^']+)'")
# a network connection's text after ``via``: ``NET/IB/0/GDRDMA``; ``NET/IB/0(5)/...``: sent
# through rank 5 of the node, PXN (src/transport/net.cc)
_NET_VIA = re.compile(r"^NET/\w+/\d+(\(\d+\))?(/GDRDMA)?")
_COLL = re.compile(r"^(\w+): opCount ([0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ count (\d+) "
                   r"datatype (\d+) op (\d+) root (-?\d+) comm (\S+) \[nranks=(\d+)")
_TUNING = re.compile(r"^(?:(\w+): )?(\d+) Bytes -> Algo (\w+) proto (\w+)"
                     r"(?: channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\})?(?:.* comm (0x[0-9a-fA-F]+))?")

# NCCL's own names (ncclAlgoToString, ncclProtoToString) as its NCCL_ALGO/NCCL_PROTO spell them
ALGORITHMS = {"TREE": "Tree", "RING": "Ring", "COLLNET_DIRECT": "CollnetDirect",
              "COLLNET_CHAIN": "CollnetChain", "NVLS": "NVLS", "NVLS_TREE": "NVLSTree",
              "PAT": "PAT"}
PROTOCOLS = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}
# older NCCL printed the numbers (NCCL_ALGO_TREE 0, _RING 1; NCCL_PROTO_LL 0, _LL128 1, _SIMPLE 2)
_ALGO_NUMBERS = {"0": "Tree", "1": "Ring"}
_PROTO_NUMBERS = {"0": "LL", "1": "LL128", "2": "Simple"}
# ncclDataType_t and ncclRedOp_t, as the COLL line prints them
DATATYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
             "float64", "bfloat16", "float8_e4m3", "float8_e5m2")
REDOPS = ("sum", "prod", "max", "min", "avg")
# torch.distributed op -> the NCCL function that runs it, and whether NCCL's byte count is
# nccl-tests' S divided by the group size (all_gather: S is the whole output)
NCCL_FUNCTION: dict[str, tuple[str, bool]] = {
    "all_reduce": ("AllReduce", False), "broadcast": ("Broadcast", False),
    "reduce": ("Reduce", False),
    "all_gather": ("AllGather", True), "all_gather_into_tensor": ("AllGather", True),
    "all_gather_single": ("AllGather", True),
    "reduce_scatter": ("ReduceScatter", True), "reduce_scatter_tensor": ("ReduceScatter", True),
    "reduce_scatter_single": ("ReduceScatter", True),
    "send": ("Send", False), "isend": ("Send", False),
    "recv": ("Recv", False), "irecv": ("Recv", False),
}

Proc = tuple[str, int]  # (host, pid): a process, as heartbeats name it too


def transport_kind(via: str) -> str:
    """The wire of a connection, from NCCL's ``via`` text: ``P2P/IPC/read`` -> ``P2P/IPC``,
    ``NET/IB/0/GDRDMA`` -> ``NET/IB``, ``SHM/direct/direct`` -> ``SHM``."""
    parts = via.split("/")
    if parts[0] in ("P2P", "NET") and len(parts) > 1:
        return f"{parts[0]}/{parts[1].split()[0]}"
    return parts[0].split()[0]


@dataclass
class Comm:
    """One NCCL communicator as one process sees it."""

    ptr: str
    rank: int
    nranks: int
    comm_id: str | None = None
    cuda_dev: int | None = None
    bus_id: str | None = None
    nodes: int | None = None
    local_ranks: int | None = None
    complete: bool = False
    coll_channels: int | None = None
    nvls_channels: int | None = None
    rings: dict[int, tuple[int, ...]] = field(default_factory=dict)  # channel -> rank order
    # channel -> (previous, next) of this rank in that channel's ring (``Ring 00 : 3 -> 0 -> 1``)
    neighbours: dict[int, tuple[int, int]] = field(default_factory=dict)
    # channel -> (parent, children): NCCL's double binary trees (-1: none)
    trees: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    # (rank, peer rank) -> {transport detail: channels}; the wire this process connected
    links: dict[tuple[int, int], dict[str, set[int]]] = field(default_factory=dict)


@dataclass
class ProcFacts:
    host: str
    pid: int
    cuda_dev: int | None = None
    network: str | None = None
    nics: dict[str, str] = field(default_factory=dict)  # NIC -> IB, RoCE or Socket
    gdr_hcas: set[str] = field(default_factory=set)     # HCAs it said GPUDirect RDMA is on for
    comms: dict[str, Comm] = field(default_factory=dict)  # by pointer
    current: dict[int, str] = field(default_factory=dict)  # thread -> comm it initialises
    # thread -> what it printed before naming its communicator (old NCCL names it last)
    pending: dict[int, Comm] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """The algorithm and protocol NCCL printed for one op (a TUNING line)."""

    function: str           # NCCL's name: AllReduce, AllGather...
    nbytes: int             # NCCL's byte count (count x type size, per rank)
    algorithm: str          # Ring, Tree, NVLS...
    protocol: str           # LL, LL128, Simple
    nranks: int | None      # of the communicator, when the log says
    channels: tuple[int, int] | None = None
    count: int | None = None
    datatype: str | None = None

    def label(self) -> str:
        return f"{self.algorithm}/{self.protocol}"


@dataclass(frozen=True)
class Link:
    """How two ranks of a communicator are connected, as NCCL printed it at init."""

    kind: str               # P2P/IPC, P2P/CUMEM, SHM, NET/IB, NET/Socket...
    detail: str             # NCCL's text: P2P/IPC/read, NET/IB/0/GDRDMA...
    channels: int           # channels using this connection


@dataclass(frozen=True)
class Fabric:
    """The job's wires as NCCL named them (``NcclLog.fabric``): the transports within a node
    (P2P/CUMEM, P2P/IPC, SHM) and between nodes (NET/IB, NET/Socket), each NIC with its link
    layer (IB, RoCE, Socket), whether GPUDirect RDMA is on (a ``/GDRDMA`` connection, or an
    HCA NCCL said it is enabled for), and whether PXN relays a connection through a node-mate
    (a ``NET/IB/0(5)`` connection)."""

    intra: tuple[str, ...]
    inter: tuple[str, ...]
    nics: tuple[tuple[str, str], ...]
    gdr: bool
    pxn: bool

    def layers(self) -> dict[str, list[str]]:
        """The NICs by link layer: {"RoCE": ["mlx5_0", "mlx5_1"]}."""
        out: dict[str, list[str]] = {}
        for nic, layer in self.nics:
            out.setdefault(layer, []).append(nic)
        return out


class NcclLog:
    """Facts gathered from NCCL's lines; ``feed`` every line of the job's output."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.version: str | None = None
        self.lines = 0  # NCCL INFO lines recognised
        self._fabric: tuple[int, Fabric | None] = (0, None)  # (lines, fabric()) when made
        self.procs: dict[Proc, ProcFacts] = {}
        self.choices: dict[tuple[str, int, int | None], Choice] = {}
        self.ops: collections.deque[Choice] = collections.deque(maxlen=OPS_KEPT)
        self._last_call: dict[tuple[str, int, int], tuple] = {}  # thread -> its last COLL line

    # ---- reading ------------------------------------------------------------------------
    def feed(self, line: str) -> bool:
        """Take one line of output; True if it was one of NCCL's. Never raises on bad input."""
        try:
            return self._feed(line)
        except (ValueError, IndexError, KeyError):
            return False

    def _feed(self, line: str) -> bool:
        if "NCCL" not in line:
            return False
        m = _PREFIX.search(line)
        if m is None:
            v = _VERSION.search(line)  # rank 0 may print it bare (NCCL_DEBUG=VERSION, or INFO)
            if v is not None and "NCCL WARN" not in line:
                with self._lock:
                    self.version = v.group(1)
                return True
            return False
        host, pid, tid = m.group("host"), int(m.group("pid")), int(m.group("tid"))
        msg = m.group("msg")
        with self._lock:
            proc = self.procs.get((host, pid))
            if proc is None:
                proc = self.procs[(host, pid)] = ProcFacts(host, pid)
            proc.cuda_dev = int(m.group("dev"))
            self.lines += 1
            self._message(proc, tid, msg)
        return True

    def _message(self, proc: ProcFacts, tid: int, msg: str) -> None:
        if (m := _CONN.match(msg)) is not None:
            comm = self._comm_of(proc, tid)
            key = (int(m.group(2)), int(m.group(3)))
            comm.links.setdefault(key, {}).setdefault(m.group(5), set()).add(int(m.group(1)))
        elif (m := _TUNING.match(msg)) is not None:
            self._tuning(proc, tid, m)
        elif (m := _COLL.match(msg)) is not None:
            self._last_call[(proc.host, proc.pid, tid)] = (
                m.group(1), int(m.group(3)), int(m.group(4)), m.group(7), int(m.group(8)))
        elif (m := _COMM.search(msg)) is not None:
            self._comm_line(proc, tid, m)
        elif (m := _RING_ORDER.match(msg)) is not None:
            self._comm_of(proc, tid).rings[int(m.group(1))] = tuple(
                int(r) for r in m.group(3).split())
        elif (m := _RING_HOP.match(msg)) is not None:
            self._comm_of(proc, tid).neighbours[int(m.group(1))] = (int(m.group(2)),
                                                                     int(m.group(4)))
        elif msg.startswith("Trees"):
            comm = self._comm_of(proc, tid)
            for t in _TREE.finditer(msg):
                ch, *down, _me, up = (int(g) for g in t.groups())
                comm.trees[ch] = (up, tuple(d for d in down if d >= 0))
        elif (m := _CHANNELS.search(msg)) is not None:
            comm = self._comm_of(proc, tid)
            comm.coll_channels = int(m.group(1))
            comm.nvls_channels = int(m.group(3)) if m.group(3) else comm.nvls_channels
        elif (m := _NETWORK.match(msg)) is not None:
            proc.network = m.group(1)
        elif (m := _NET_USING.match(msg)) is not None:
            if m.group(1) == "IB":
                proc.nics.update(_IB_NIC.findall(m.group(2)))
            else:
                proc.nics.update((nic, "Socket") for nic in _SOCKET_NIC.findall(m.group(2)))
        elif (m := _GDR_HCA.match(msg)) is not None:
            proc.gdr_hcas.add(m.group(1))
        elif (m := _VERSION.search(msg)) is not None:
            self.version = m.group(1)

    def _comm_line(self, proc: ProcFacts, tid: int, m: re.Match) -> None:
        ptr, rank, nranks, rest = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        comm = proc.comms.get(ptr)
        if comm is None or comm.rank != rank or comm.nranks != nranks:
            comm = proc.comms[ptr] = Comm(ptr, rank, nranks)
            early = proc.pending.pop(tid, None)
            if early is not None:
                comm.rings, comm.trees, comm.links = early.rings, early.trees, early.links
                comm.neighbours = early.neighbours
                comm.coll_channels, comm.nvls_channels = early.coll_channels, early.nvls_channels
        for key, value in _COMM_FIELD.findall(rest):
            if key == "commId":
                comm.comm_id = value
            elif key == "busId":
                comm.bus_id = value
            elif key == "cudaDev":
                comm.cuda_dev = int(value)
            elif key == "nNodes":
                comm.nodes = int(value)
            elif key == "localRanks":
                comm.local_ranks = int(value)
        if "Init COMPLETE" in rest:
            comm.complete = True
        proc.current[tid] = ptr

    def _comm_of(self, proc: ProcFacts, tid: int) -> Comm:
        """The communicator an init line of this thread is about: the one it announced last,
        else the process's latest, else one this thread will name later."""
        ptr = proc.current.get(tid)
        if ptr is None and proc.comms:
            ptr = next(reversed(proc.comms))
        if ptr is None:
            return proc.pending.setdefault(tid, Comm("?", -1, 0))
        return proc.comms[ptr]

    def _tuning(self, proc: ProcFacts, tid: int, m: re.Match) -> None:
        function, nbytes, algo, proto = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        algorithm = ALGORITHMS.get(algo.upper()) or _ALGO_NUMBERS.get(algo) or f"algo {algo}"
        protocol = PROTOCOLS.get(proto.upper()) or _PROTO_NUMBERS.get(proto) or f"proto {proto}"
        call = self._last_call.pop((proc.host, proc.pid, tid), None)
        nranks = count = datatype = None
        if call is not None and (function is None or call[0] == function):
            function = call[0]
            count, nranks = call[1], call[4]
            datatype = DATATYPES[call[2]] if 0 <= call[2] < len(DATATYPES) else None
        if m.group(7) is not None and nranks is None:
            comm = proc.comms.get(m.group(7))
            nranks = comm.nranks if comm is not None else None
        if function is None:  # an old NCCL's line with no name, and no call to pair it with
            return
        channels = (int(m.group(5)), int(m.group(6))) if m.group(5) is not None else None
        choice = Choice(function, nbytes, algorithm, protocol, nranks, channels, count, datatype)
        self.choices[(function, nbytes, nranks)] = choice
        self.ops.append(choice)

    # ---- what the views ask ---------------------------------------------------------------
    def seen(self) -> bool:
        """NCCL printed something at INFO level."""
        return self.lines > 0 or self.version is not None

    def choice(self, op: str, size: int, n: int) -> Choice | None:
        """NCCL's printed choice for a torch.distributed ``op`` of nccl-tests size ``size``
        (``Instance.size``) over ``n`` ranks: the latest TUNING line of the same NCCL
        function and byte count, from a communicator of ``n`` ranks (or of unknown size).
        None when NCCL printed none."""
        function, per_rank = NCCL_FUNCTION.get(op, (None, False))
        if function is None or n <= 0:
            return None
        nbytes = size // n if per_rank else size
        with self._lock:
            return (self.choices.get((function, nbytes, n))
                    or self.choices.get((function, nbytes, None)))

    def algorithm_text(self, op: str, size: int, n: int) -> str:
        """One line for an op: ``algorithm: Ring/LL128 (from NCCL's log)``, or why unknown."""
        choice = self.choice(op, size, n)
        if choice is not None:
            return f"algorithm: {choice.label()} (from NCCL's log)"
        if not self.seen():
            return UNKNOWN_NO_LOG
        if op not in NCCL_FUNCTION:
            return "algorithm unknown (NCCL prints no choice for this op)"
        return UNKNOWN_NO_TUNING

    def links(self, ranks: dict[Proc, int]) -> dict[tuple[int, int], Link]:
        """The transport between ranks, in global ranks: ``ranks`` maps each rank's (host,
        pid) (from its heartbeats) to its global rank. A communicator's ranks are placed by
        the processes that printed its ``commId``; one without a commId (old NCCL) only when
        it spans the whole world, where NCCL's ranks are the global ones."""
        with self._lock:
            placed: dict[str, dict[int, int]] = collections.defaultdict(dict)
            for key, proc in self.procs.items():
                if key in ranks:
                    for comm in proc.comms.values():
                        if comm.comm_id is not None:
                            placed[comm.comm_id][comm.rank] = ranks[key]
            world = len(ranks)
            out: dict[tuple[int, int], Link] = {}
            for proc in self.procs.values():
                for comm in proc.comms.values():
                    if comm.comm_id is not None:
                        where = placed[comm.comm_id]
                    elif comm.nranks == world:
                        where = {r: r for r in range(world)}
                    else:
                        continue
                    for (a, b), vias in comm.links.items():
                        if a in where and b in where:
                            detail = max(vias, key=lambda v: len(vias[v]))
                            out[(where[a], where[b])] = Link(
                                transport_kind(detail), detail, len(set().union(*vias.values())))
            return out

    def comms(self) -> list[Comm]:
        """One Comm per communicator (by commId, else per process), largest first."""
        with self._lock:
            seen: dict[str, Comm] = {}
            for key, proc in self.procs.items():
                for comm in proc.comms.values():
                    seen.setdefault(comm.comm_id or f"{key}:{comm.ptr}", comm)
            return sorted(seen.values(), key=lambda c: -c.nranks)

    def fabric(self) -> Fabric | None:
        """The wires NCCL said it uses, over every communicator and process; None when it
        printed no connection and no NIC (no log, or a log without INIT lines). Made again
        only after a new line of NCCL's: the inside panel asks at every redraw."""
        with self._lock:
            if self._fabric[0] == self.lines:
                return self._fabric[1]
            vias = [via for proc in self.procs.values()
                    for comm in (*proc.comms.values(), *proc.pending.values())
                    for linked in comm.links.values() for via in linked]
            nics = {nic: layer for proc in self.procs.values() for nic, layer in proc.nics.items()}
            gdr_hcas = {h for proc in self.procs.values() for h in proc.gdr_hcas}
            fabric = None
            if vias or nics:
                kinds = {transport_kind(v) for v in vias}
                nets = [m for m in map(_NET_VIA.match, vias) if m is not None]
                fabric = Fabric(intra=tuple(sorted(k for k in kinds if not k.startswith("NET/"))),
                                inter=tuple(sorted(k for k in kinds if k.startswith("NET/"))),
                                nics=tuple(sorted(nics.items())),
                                gdr=any(m.group(2) for m in nets) or bool(gdr_hcas),
                                pxn=any(m.group(1) for m in nets))
            self._fabric = (self.lines, fabric)
            return fabric

    def init_summary(self, final: bool = False) -> str | None:
        """One line on what NCCL reported at init, once a communicator has completed its init
        on all its ranks (None before); ``final``: whatever was printed, None if nothing."""
        with self._lock:
            by_id: dict[str, list[Comm]] = collections.defaultdict(list)
            for key, proc in self.procs.items():
                for comm in proc.comms.values():
                    by_id[comm.comm_id or f"{key}:{comm.ptr}"].append(comm)
            done = [cs for cs in by_id.values()
                    if final or all(c.complete for c in cs) and len(cs) >= cs[0].nranks]
            if not done:
                return f"NCCL {self.version}: no communicator reported" if (
                    final and self.version) else None
            comms = max(done, key=lambda cs: cs[0].nranks)
            kinds = collections.Counter(
                transport_kind(via) for c in comms for vias in c.links.values() for via in vias)
            rings = next((c.rings for c in comms if c.rings), {})
            channels = next((c.coll_channels for c in comms if c.coll_channels), None)
            nodes = next((c.nodes for c in comms if c.nodes), None)
            networks = sorted({p.network for p in self.procs.values() if p.network})
        parts = [f"NCCL {self.version}" if self.version else "NCCL",
                 f"{comms[0].nranks} ranks" + (f" on {nodes} node(s)" if nodes else "")]
        if channels is not None:
            parts.append(f"{channels} channels")
        elif rings:
            parts.append(f"{len(rings)} channels")
        if rings:
            first = min(rings)
            parts.append(f"ring {' > '.join(map(str, rings[first]))}")
        parts.append("transports " + (", ".join(sorted(kinds)) if kinds else "none printed"))
        if networks:
            parts.append(f"network {'/'.join(networks)}")
        return "; ".join(parts)
