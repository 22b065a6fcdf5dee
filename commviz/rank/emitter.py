"""The non-blocking path from a rank's hooks to the viewer.

The hot path (``push``) only appends a record list to a deque. A daemon thread wakes every
``TICK_S``, packs finished records into columnar batches, announces records that have been
in flight for a whole tick (so a hung op is visible), and sends on a ZeroMQ PUSH socket
with NOBLOCK: when the viewer is absent, slow or gone, batches are dropped and counted,
never queued without bound and never waited for.

Each process also keeps its records in a shared-memory ring (``commviz/wire/ring.py``), which
the hooks write and this emitter creates, notes what it shipped in and removes at a clean
exit: what a process that dies had not shipped is still there for the node's harvester.
"""

from __future__ import annotations

import atexit
import collections
import multiprocessing.util
import operator
import os
import secrets
import sys
import threading
import time
import weakref
from array import array
from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any

import zmq

from commviz.rank import records
from commviz.rank.records import GID, ID, SITE, T_END, T_START
from commviz.rank.telemetry import TelemetrySampler
from commviz.wire import clocksync, nodes, protocol, ring
from commviz.wire.keys import KeysError, client_keys
from commviz.wire.link import CONNECT_WAIT_S, KEYS_HINT, Link

DEFAULT_ADDR = "tcp://127.0.0.1:5555"
# Each wake-up costs the rank CPU even when there is nothing to send (70-130 us on a
# virtualised core): every 50 ms keeps an idle emitter near 0.5% of a core, and is as often
# as the viewer draws.
TICK_S = 0.05
FIRST_TICK_S = 0.01  # until the first heartbeat is out: a rank that dies early is still seen
ANNOUNCE_AFTER_NS = int(protocol.ANNOUNCE_S * 1e9)
SEND_HWM = 1000
EXIT_LINGER_MS = 1000  # bounded wait at exit so the last batch can reach a live viewer
PHASES_HELD = 65_536   # ended phases waiting to be sent; beyond this the oldest are dropped
FIRST_CLOCK_S = 1.0    # the first heartbeat waits this long for a clock round trip
TOPOLOGY_EVERY_S = 10.0  # the GPU topology is repeated so that a late viewer learns it
_ring_refused = False  # a ring could not be made in this process: said once, not per emitter

# A record (records.py) holds its fields in protocol.COLUMNS order: its n-th is the n-th column
_ARRAY_CODES = {"<i8": "q", "u1": "B", "<u4": "I", "<i4": "i"}
_COLUMN_CODES = [(name, _ARRAY_CODES[dt]) for name, dt in protocol.COLUMNS.items()]
_REPEAT_FROM = 64  # records in a batch from which _column_bytes looks for repeated values
_GID_OF = operator.itemgetter(GID)
_ID_OF = operator.itemgetter(ID)


def encode_batch(rank: int, records: list[list], sites: Any, inc: int = 0, shift_ns: int = 0,
                 groups: Any = None, n: int = 0) -> bytes:
    """Records -> one ``ops`` message, with the rows of the sites they name.

    ``sites[sid]`` is (file, line): a dict or a list indexed by id. The batch names its groups
    by id, announced apart (``encode_groups``); ``groups`` (gid -> (name, ranks)) puts their
    rows in the batch instead, as ranks before ``grp`` did. ``shift_ns`` moves the times
    (test-only: see commviz/wire/nodes.py); ``n``: the batch's number (``OpBatch.n``). The
    records are transposed into columns in one C-level pass: this runs on the rank's GIL.
    """
    columns = list(zip(*records))
    if shift_ns:
        columns[T_START] = tuple(t + shift_ns for t in columns[T_START])
        columns[T_END] = tuple(t + shift_ns if t >= 0 else t for t in columns[T_END])
    cols = {name: _column_bytes(code, col) for (name, code), col in zip(_COLUMN_CODES, columns)}
    rows = [] if groups is None else [[gid, *groups[gid]] for gid in set(columns[GID])]
    return protocol.encode_ops(rank, cols, rows, [[sid, *sites[sid]] for sid in set(columns[SITE])],
                               inc, n)


def encode_groups(rank: int, groups: Any, gids: Iterable[int], inc: int = 0) -> list[bytes]:
    """The ``grp`` messages announcing ``gids`` (``groups[gid]`` is (name, ranks)), split so
    that none lists more than protocol.GROUP_MEMBERS_MAX members."""
    out, rows, members = [], [], 0
    for gid in gids:
        name, ranks = groups[gid]
        if rows and members + len(ranks) > protocol.GROUP_MEMBERS_MAX:
            out.append(protocol.encode_groups(rank, rows, inc))
            rows, members = [], 0
        rows.append([gid, name, list(ranks)])
        members += len(ranks)
    if rows:
        out.append(protocol.encode_groups(rank, rows, inc))
    return out


def _column_bytes(code: str, col: tuple) -> bytes:
    """One column as little-endian bytes.

    Most columns of a large batch hold one value throughout (the same op from the same place
    on the same group): those are repeated, not converted value by value, which halves the
    cost of encoding on the rank's GIL. Small batches are converted directly, which is
    cheaper than checking.
    """
    first = col[0]
    if len(col) >= _REPEAT_FROM and col.count(first) == len(col):
        return array(code, (first,)).tobytes() * len(col)
    return array(code, col).tobytes()


def _never_heard(addr: str, dropped: int, denied: bool) -> str:
    """Rank 0's line at exit when no viewer ever took its records: one line for the job (the
    same line from every rank would only repeat it), saying why and what to do."""
    if denied:  # each refused rank warned as it happened: this is the reminder at the end
        return (f"commviz: the viewer at {addr} refused rank 0: its {dropped} records were "
                f"dropped, as were those of every rank it refused (keys: {KEYS_HINT})")
    return (f"commviz: no viewer ever answered at {addr}: the job's records were dropped "
            f"({dropped} of them from rank 0; start `commviz watch` there, or check "
            "COMMVIZ_ADDR)")


class Emitter:
    """Owns the queue, the sender thread and the socket of one rank process."""

    def __init__(self, addr: str, identity: Any, job: Callable[[], str] = str) -> None:
        self.addr = addr
        self._shift = nodes.clock_shift_ns()  # test-only: see commviz/wire/nodes.py
        try:
            self._keys = client_keys()
        except KeysError as exc:  # the job must not fail for this: the viewer refuses it
            print(f"commviz: warning: {exc}; connecting without keys", file=sys.stderr)
            self._keys = None
        self._clock: clocksync.ClockClient | None = None
        self._clock_waited = False
        self._identity = identity  # callable -> (rank, world, backend, device) or None before init
        self._job = job  # callable -> what this rank's job-mates share ("" if unknown)
        self.queue: collections.deque[list] = collections.deque()
        # bounded: a program may mark phases long before (or without) joining a process group
        self.phases: collections.deque[tuple[str, int, int, int]] = collections.deque(
            maxlen=PHASES_HELD)
        self.groups: dict[int, tuple[str, list[int]]] = {}
        self.sites: dict[int, tuple[str, int]] = {}
        self.ring: ring.RingWriter | None = None
        self._ring_ident: tuple | None = None  # the identity last noted in the ring
        # heartbeats handed to the socket: the ring notes that the viewer has one (so a
        # harvester need not tell who this rank is) only at the second, since a process
        # killed a moment after handing one over takes it along, as it does its last batches
        self._beats = 0
        self.dropped = 0
        self.sent = 0
        self.batches = 0  # ops batches sent: the last one's number (OpBatch.n)
        # called on this thread before each flush (cuda_timing's GpuTimer.poll ends records)
        self.pollers: list[Callable[[], object]] = []
        self._watching: list[list] = []
        self._announced: set[int] = set()
        self._told: dict[int, Any] = {}  # gid -> the groups' entry as announced (``grp``)
        self._told_when = (0.0, 0)  # (monotonic time, link handshakes) of the last retelling
        self._topology_sent: tuple[str, float] | None = None  # (device, monotonic time)
        self._dormant = False  # a forked child's copy, until it has something to send
        self._wake_lock = threading.Lock()
        self._start()
        atexit.register(self.close)  # also runs in a forked child: close() checks the pid
        self._finalize()
        # A forked child inherits this object but neither the thread nor its ZeroMQ context
        # (which must never cross a fork): it starts its own when it first pushes a record.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (em := ref()) is not None
                            and em._after_fork())
        multiprocessing.util.register_after_fork(self, Emitter._finalize)

    def _start(self) -> None:
        self._dormant = False
        self._stop = threading.Event()
        self._pid = os.getpid()
        # this process' incarnation id, sent in every message: rank numbers alone do not say
        # which of two jobs running at once into one viewer a message comes from
        self._inc = secrets.randbits(63) or 1
        self._open_ring()
        self._thread = threading.Thread(target=self._run, name="commviz-emitter", daemon=True)
        self._thread.start()

    def _open_ring(self) -> None:
        """This process' ring, with what its records refer to so far; without one (no
        /dev/shm, a full tmpfs, COMMVIZ_RING=0) records go as before, said once."""
        global _ring_refused
        if os.environ.get(ring.ENV_OFF) == "0":
            return
        directory = ring.ring_dir()
        ring.sweep(directory)  # rings of an earlier run's dead processes go now
        try:
            self.ring = ring.RingWriter(os.environ.get(ring.ENV_TAG) or "0", self._inc,
                                        directory)
        except (ring.RingError, OSError) as exc:
            if not _ring_refused:
                _ring_refused = True
                print(f"commviz: warning: no shared-memory ring for this process ({exc}); "
                      "its records still go to the viewer, but those it has not sent when it "
                      "dies are lost", file=sys.stderr, flush=True)
            return
        for sid, (file, line) in list(self.sites.items()):
            self.ring.note_site(sid, file, line)
        for gid, (name, ranks) in list(self.groups.items()):
            self.ring.note_group(gid, name, ranks)
        self._ring_ident = None
        if records.emitter is self:
            records.use_ring(self.ring)

    def note_site(self, sid: int, key: tuple[str, int]) -> None:
        """A call site records name (any thread): sent with the batches, kept in the ring."""
        self.sites[sid] = key
        if self.ring is not None:
            self.ring.note_site(sid, *key)

    def note_group(self, gid: int, name: str, ranks: list[int]) -> None:
        """A process group records name (any thread): announced in ``grp``, kept in the ring.

        The rank's identity goes into the ring here too, on the rank's thread before the
        group's first record: a rank that dies before its sender thread ever connected (a
        short job on a busy machine) is still one a harvester can speak for."""
        self.groups[gid] = (name, ranks)
        if self.ring is not None:
            self.ring.note_group(gid, name, ranks)
            self._note_ring_identity()

    def _note_ring_identity(self) -> None:
        """What a harvester needs to speak for this rank (any thread), when it changed."""
        ident, ring_ = self._identity(), self.ring
        if ident is None or ring_ is None:
            return
        noted = (*ident, self._job())
        if noted != self._ring_ident:
            self._ring_ident = noted
            rank, world, backend, device = ident
            ring_.note_identity(rank, world, backend, device, nodes.hostname(), noted[4])

    def _finalize(self) -> None:
        # multiprocessing children (fork) leave through os._exit: atexit never runs there.
        # Their start clears the finalizers inherited from the parent, then calls this again.
        multiprocessing.util.Finalize(None, self.close, exitpriority=100)

    def _after_fork(self) -> None:
        """In a forked child: drop the parent's pending records and stay silent (no
        heartbeat, no goodbye) until push(). A child that makes no call of its own, such as
        a DataLoader worker, is then never mistaken for its parent's rank."""
        if self._stop.is_set():  # closed before the fork: stays closed
            return
        self.queue.clear()  # in place: the hooks hold its append method
        self._watching, self._announced = [], set()
        self._told, self._told_when = {}, (0.0, 0)
        self._topology_sent = None
        self.dropped = self.sent = self.batches = 0
        if self.ring is not None:  # the parent's: this process gets its own when it reports
            self.ring.forget_after_fork()
            self.ring = None
        self._wake_lock = threading.Lock()  # a new one: the parent's may have been held
        self._dormant = True

    def push(self, record: list) -> None:
        """Queue a record (the hooks append to ``queue`` directly, except in a forked child
        until its first record, which comes here to start the sender)."""
        if self._dormant:
            with self._wake_lock:
                if self._dormant:
                    self._start()
        self.queue.append(record)

    def close(self) -> None:
        """Flush what is finished, say goodbye and stop; returns within about a second."""
        if self._stop.is_set() or os.getpid() != self._pid:
            return
        self._stop.set()
        self._thread.join(timeout=EXIT_LINGER_MS / 1000 + 1)
        atexit.unregister(self.close)
        if self.ring is not None:  # a clean exit: the ring goes (what it held was sent)
            if records.ring_buf is self.ring.buf:
                records.use_ring(None)
            self.ring.remove()
            self.ring = None

    # ---- sender thread -------------------------------------------------------------
    def _run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, SEND_HWM)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # no viewer connected: drop instead of queueing
        if self._keys is not None:
            from commviz.wire.keys import secure_client

            secure_client(sock, self._keys)
        sock.connect(self.addr)
        link = Link(sock, self.addr, "this rank")
        caddr = clocksync.clock_addr(self.addr)
        self._clock = (None if caddr is None
                       else clocksync.ClockClient(ctx, caddr, self._keys, self._shift))
        self._clock_waited = False
        telemetry = TelemetrySampler()
        next_beat = 0.0
        tick = FIRST_TICK_S
        try:
            while not self._stop.wait(tick):
                if link.pending():
                    continue
                try:  # a heartbeat first: the viewer learns host and clock before the ops
                    for poll in self.pollers:
                        poll()
                    if (time.monotonic() >= next_beat
                            and self._heartbeat(sock, telemetry) is not None):
                        next_beat = time.monotonic() + protocol.HEARTBEAT_S
                        tick = TICK_S
                        self._retell_groups(sock, link)
                    self._flush(sock, final=False)
                    self._flush_phases(sock)
                except Exception:  # never let a bad record stop reporting: drop and go on
                    self.dropped += len(self._watching)
                    self._watching = []
            link.wait(CONNECT_WAIT_S / 4)
            for poll in self.pollers:
                poll()
            self._flush(sock, final=True)
            self._flush_phases(sock)
            ident = self._heartbeat(sock, telemetry)  # a short run may not have sent one yet
            if ident is not None:
                self._send(sock, protocol.encode_bye(ident[0], self._inc,
                                                     time.time_ns() + self._shift,
                                                     self.dropped), 0)
        finally:
            if self._clock is not None:
                self._clock.close()
            telemetry.close()
            link.update()
            ident = self._identity()
            if self.dropped and not link.ever_connected and ident is not None and ident[0] == 0:
                print(_never_heard(self.addr, self.dropped, link.denied), file=sys.stderr,
                      flush=True)
            link.close()
            sock.close(linger=EXIT_LINGER_MS)
            ctx.term()

    def _send(self, sock: zmq.Socket, data: bytes, records: int) -> None:
        if self._try_send(sock, data):
            self.sent += records
        else:
            self.dropped += records

    @staticmethod
    def _try_send(sock: zmq.Socket, data: bytes) -> bool:
        try:
            sock.send(data, zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _flush(self, sock: zmq.Socket, final: bool) -> None:
        """Send the records that are finished, and announce those running for a while.

        It shares the GIL with the rank's own work, so each pass over the records is one
        comprehension or one C-level call rather than Python statements per record.
        """
        queue = self.queue
        pop = queue.popleft
        self._watching += [pop() for _ in range(len(queue))]  # only this thread pops
        watching = self._watching
        if not watching:
            return
        ident = self._identity()
        if ident is None:
            return
        done = [rec[T_END] >= 0 for rec in watching]  # read once: the rank may set t_end meanwhile
        ready = list(compress(watching, done))
        completed = len(ready)  # ready[:completed] ended; snapshots of running ones follow
        if len(ready) == len(watching):
            self._watching = []
        else:
            self._watching = list(compress(watching, map(operator.not_, done)))
            if not final:
                ready += self._in_flight(self._watching)
        if self._announced:  # completed records need no more announcing
            self._announced.difference_update(rec[ID] for rec in ready if rec[T_END] >= 0)
        self._tell_groups(sock, ident[0], set(map(_GID_OF, ready)))
        ring_ = self.ring
        for i in range(0, len(ready), protocol.MAX_BATCH):
            chunk = ready[i:i + protocol.MAX_BATCH]
            n = self.batches + 1
            data = encode_batch(ident[0], chunk, self.sites, self._inc, self._shift, n=n)
            ids = list(map(_ID_OF, chunk[:completed - i])) if ring_ is not None else []
            if ids:  # before the send: a process that dies between has them sent again
                ring_.mark_shipped(ids, n)
            if self._try_send(sock, data):
                self.sent += len(chunk)
                self.batches = n
            else:
                self.dropped += len(chunk)
                if ids:
                    ring_.unmark(ids)

    def _tell_groups(self, sock: zmq.Socket, rank: int, gids: Iterable[int]) -> None:
        """Announce the groups of ``gids`` not announced yet, before the batches naming them;
        one whose announcement could not be sent is tried again with the next batch."""
        told, groups = self._told, self.groups
        new = [gid for gid in gids if told.get(gid) is not groups[gid]]
        if new and all(self._try_send(sock, data)
                       for data in encode_groups(rank, groups, new, self._inc)):
            told.update((gid, groups[gid]) for gid in new)

    def _retell_groups(self, sock: zmq.Socket, link: Link) -> None:
        """Every GROUPS_EVERY_S, and after every new connection (a viewer started again),
        the groups announced so far again: a viewer that missed them learns them."""
        when, handshakes = self._told_when
        if not self._told or (handshakes == link.handshakes
                              and time.monotonic() - when < protocol.GROUPS_EVERY_S):
            return
        ident = self._identity()
        for data in encode_groups(ident[0], self.groups, list(self._told), self._inc):
            self._try_send(sock, data)
        self._told_when = (time.monotonic(), link.handshakes)

    def _flush_phases(self, sock: zmq.Socket) -> None:
        """Send the phases that ended since the last tick (dropped, uncounted, if none listens)."""
        queue = self.phases
        if not queue:
            return
        ident = self._identity()
        if ident is None:
            return
        pop = queue.popleft
        spans = [pop() for _ in range(len(queue))]
        if self._shift:
            spans = [(name, depth, t0 + self._shift, t1 + self._shift)
                     for name, depth, t0, t1 in spans]
        for i in range(0, len(spans), protocol.MAX_BATCH):
            self._send(sock, protocol.encode_phases(ident[0], spans[i:i + protocol.MAX_BATCH],
                                                    self._inc), 0)

    def _in_flight(self, running: list[list]) -> list[list]:
        """Snapshots (t_end == -1) of the records running for a while and not yet announced."""
        before = time.time_ns() - ANNOUNCE_AFTER_NS
        new = [rec for rec in running if rec[T_START] < before and rec[ID] not in self._announced]
        self._announced.update(rec[ID] for rec in new)
        return [rec[:] for rec in new]

    def _heartbeat(self, sock: zmq.Socket, telemetry: TelemetrySampler) -> tuple | None:
        """Send identity and telemetry; returns the identity, None while it is not known."""
        ident = self._identity()
        if ident is None:
            return None
        rank, world, backend, device = ident
        tel = telemetry.sample(device)
        samples = None
        if self._clock is not None:
            if not self._clock_waited:  # the first heartbeat carries a round trip if it can
                self._clock.first.wait(FIRST_CLOCK_S)
                self._clock_waited = True
            samples = self._clock.take()
        job = self._job()
        beat = self._try_send(sock, protocol.encode_heartbeat(
            rank, world=world, host=nodes.hostname(), pid=self._pid, backend=backend,
            device=device, t_ns=time.time_ns() + self._shift, dropped=self.dropped, tel=tel,
            inc=self._inc, job=job, clk=samples))
        if self.ring is not None:
            self._note_ring_identity()  # the device may have changed since
            if beat:
                self._beats += 1
                if self._beats >= 2:
                    self.ring.note_heartbeat()
        sent = self._topology_sent
        if sent is None or sent[0] != device or time.monotonic() - sent[1] >= TOPOLOGY_EVERY_S:
            self._send(sock, protocol.encode_topology(rank, nodes.hostname(),
                                                      telemetry.topology(device), self._inc), 0)
            self._topology_sent = (device, time.monotonic())
        return ident
