"""Clock alignment between hosts: NTP-style round trips on a channel beside the events.

The event channel only goes rank -> viewer, and a one-way message bounds a clock offset on
one side only. So the viewer also binds a ROUTER socket at its event port + 1 (the *clock
channel*), and every rank's ``ClockClient`` (a DEALER) sends ``{"v": 1, "k": "tq", "t1"}``
every ``PERIOD_S``; the viewer answers at once with ``{"v": 1, "k": "tr", "t1", "t2", "t3"}``
(t2: when it read the request, t3: when it answers, both on its wall clock); the rank notes
t4 when the answer arrives. Ranks send these samples ``[t1, t2, t3, t4]`` to the viewer in
their heartbeats (``clk``), where ``estimate`` turns them into an offset.

With θ = rank clock - viewer clock, and d1, d2 >= 0 the two one-way delays,
``t1 - t2 = θ - d1`` and ``t4 - t3 = θ + d2``: θ lies in ``[t1 - t2, t4 - t3]`` for certain,
whatever the delays, an interval as wide as the round trip minus the viewer's own time
(``delay``). The estimate is the middle of the narrowest interval among the last ``WINDOW``
samples, ± half its width. What this cannot see: drift between the sample and now
(clocks disciplined by NTP drift by a few µs per second, free-running ones by up to 50 µs),
and asymmetric delays beyond the bound (they are inside it by construction).

A relay between a node's ranks and the viewer passes the round trips on
(``commviz/relay/clockproxy.py``): the viewer's ROUTER then reads one identity frame per hop
before the request, and answers along that route (up to ``MAX_HOPS``).

No Textual, Rich or torch: the rank side imports this module.
"""

from __future__ import annotations

import collections
import errno
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

import zmq

from commviz.wire import keys as keys_
from commviz.wire import protocol
from commviz.wire.nodes import split_tcp

RANDOM_PORT_TRIES = 20  # a free event port whose port + 1 is taken: pick another
MAX_PORT = 65534  # the highest an event port may be: its clock channel takes the next one

VERSION = protocol.VERSION
PERIOD_S = 0.5
RETRY_S = 0.005       # first wait before asking again while not connected; doubles to PERIOD_S
REPLY_WAIT_MS = 200   # a round trip longer than this is useless: stop waiting
WINDOW = 20           # samples an estimate is taken from (10 s at PERIOD_S)
MAX_BYTES = 128
WIRE_BYTES = 1024     # the sockets' limit: CURVE's handshake commands are larger than MAX_BYTES
SAMPLES_PER_HEARTBEAT = 16  # protocol.CLOCK_SAMPLES_MAX
POLL_MS = 100
MAX_HOPS = 8          # ROUTER identities before a request: the rank's, then one a relay


class Sample(NamedTuple):
    """One round trip: t1, t4 on the rank's clock, t2, t3 on the viewer's (ns)."""

    t1: int
    t2: int
    t3: int
    t4: int

    @property
    def delay(self) -> int:
        return (self.t4 - self.t1) - (self.t3 - self.t2)


class Offset(NamedTuple):
    """A host's clock minus the viewer's, ± an uncertainty that bounds the true offset."""

    offset_ns: int
    uncertainty_ns: int
    samples: int


def estimate(samples: Iterable[Sample]) -> Offset | None:
    """The middle of the narrowest bound among ``samples``; None without a valid one."""
    # one pass, each delay once: the viewer estimates at every heartbeat (at 1,024 ranks,
    # 2,000 a second), and `commviz stats` at every one a recording holds
    best, least, valid = None, 0, 0
    for s in samples:
        t1, t2, t3, t4 = s
        delay = (t4 - t1) - (t3 - t2)
        if delay >= 0 and t4 >= t1:
            valid += 1
            if best is None or delay < least:  # the first of the narrowest, as min() picks
                best, least = s, delay
    if best is None:
        return None
    lo, hi = best.t1 - best.t2, best.t4 - best.t3
    return Offset((lo + hi) // 2, (hi - lo + 1) // 2, valid)


def _delay(s: Sample) -> int:
    return (s[3] - s[0]) - (s[2] - s[1])


def _valid(s: Sample) -> bool:
    """Whether a round trip bounds the offset (as ``estimate`` counts it)."""
    return s[3] - s[0] >= s[2] - s[1] and s[3] >= s[0]


class Window:
    """The last ``WINDOW`` samples of a host and their ``estimate``, kept as samples come:
    the viewer estimates at every heartbeat with round trips (at 1,024 ranks, 2,000 a
    second; ``commviz stats`` at every one a recording holds), and a new sample changes the
    narrowest bound only if it is narrower, or if it pushes the narrowest out."""

    def __init__(self, size: int = WINDOW) -> None:
        self.samples: collections.deque[Sample] = collections.deque(maxlen=size)
        self._best: Sample | None = None  # the first of the narrowest valid samples
        self._least = 0  # its delay
        self._valid = 0
        self._offset: Offset | None = None  # the estimate, kept until best or valid change
        self._offset_of: Sample | None = None  # the best it was made of

    def add(self, sample: Sample) -> None:
        samples = self.samples
        gone = samples[0] if len(samples) == samples.maxlen else None
        samples.append(sample)
        if gone is not None and _valid(gone):
            self._valid -= 1
        t1, t2, t3, t4 = sample
        delay = (t4 - t1) - (t3 - t2)
        valid = delay >= 0 and t4 >= t1  # as estimate counts it
        self._valid += valid
        if gone is not None and gone is self._best:  # the narrowest left: the next narrowest
            self._best = None
            for s in samples:
                if _valid(s) and (self._best is None or _delay(s) < self._least):
                    self._best, self._least = s, _delay(s)
        elif valid and (self._best is None or delay < self._least):
            self._best, self._least = sample, delay
        if self._offset is not None and (self._best is not self._offset_of
                                         or self._valid != self._offset.samples):
            self._offset = None  # made again when asked

    def estimate(self) -> Offset | None:
        """``estimate(self.samples)``."""
        best = self._best
        if best is None:
            return None
        if self._offset is None:
            lo, hi = best.t1 - best.t2, best.t4 - best.t3
            self._offset = Offset((lo + hi) // 2, (hi - lo + 1) // 2, self._valid)
            self._offset_of = best
        return self._offset


def clock_addr(events_addr: str) -> str | None:
    """The clock channel of a viewer (or a relay) whose events go to ``events_addr``: port + 1
    on tcp, the path with ``.clock`` added on ipc (a relay's ranks may connect there)."""
    if events_addr.startswith("ipc://"):
        return events_addr + ".clock"
    parts = split_tcp(events_addr)
    if parts is None:
        return None
    host, port = parts
    host = f"[{host}]" if ":" in host else host
    return f"tcp://{host}:{port + 1}"


def bind_beside_clock(sock: zmq.Socket, host: str, bind_clock: Callable[[str], None]) -> str:
    """Bind ``sock`` (events) to a free port of ``host`` (``tcp://HOST``) whose clock channel,
    the port + 1, ``bind_clock(addr)`` binds too; a port whose next one is taken is let go and
    another tried. Returns the events' address."""
    for _ in range(RANDOM_PORT_TRIES):
        addr = f"{host}:{sock.bind_to_random_port(host, max_port=MAX_PORT)}"
        try:
            bind_clock(addr)
            return addr
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            sock.unbind(addr)
    raise zmq.ZMQError(errno.EADDRINUSE)


def _unpack(data: bytes) -> dict | None:
    return protocol.unpack_small(data, MAX_BYTES, max_str_len=8)


def _time(value: object) -> bool:
    return type(value) is int and 0 <= value < 1 << 63


def encode_request(t1: int) -> bytes:
    """A rank's request: ``t1`` is its clock when it sends it."""
    return protocol.pack({"v": VERSION, "k": "tq", "t1": t1})


def decode_request(data: bytes) -> int | None:
    msg = _unpack(data)
    if msg is None or msg.get("k") != "tq" or not _time(msg.get("t1")):
        return None
    return msg["t1"]


def decode_reply(data: bytes) -> tuple[int, int, int] | None:
    msg = _unpack(data)
    if msg is None or msg.get("k") != "tr" or not all(_time(msg.get(k)) for k in
                                                      ("t1", "t2", "t3")):
        return None
    return msg["t1"], msg["t2"], msg["t3"]


class ClockServer:
    """The viewer's end: answers every request at once, on a thread of its own, so that the
    viewer's drain rounds do not widen the rank's bound."""

    def __init__(self, ctx: zmq.Context, addr: str, server_keys: keys_.ServerKeys | None,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        self._sock = ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, WIRE_BYTES)
        if server_keys is not None:
            keys_.secure_server(self._sock, server_keys)
        try:
            self._sock.bind(addr)
        except zmq.ZMQError:
            self._sock.close(linger=0)
            raise
        self.addr = addr
        self._wall_ns = wall_ns
        self.answered = 0
        self.rejected = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-clock", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock, wall_ns = self._sock, self._wall_ns
        while not self._stop.is_set():
            if not sock.poll(POLL_MS):
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                t2 = wall_ns()
                t1 = decode_request(frames[-1]) if 2 <= len(frames) <= MAX_HOPS + 1 else None
                if t1 is None:
                    self.rejected += 1
                    continue
                reply = {"v": VERSION, "k": "tr", "t1": t1, "t2": t2, "t3": 0}
                reply["t3"] = wall_ns()
                try:  # back along the route the request took (relays add a frame each)
                    sock.send_multipart([*frames[:-1], protocol.pack(reply)], zmq.NOBLOCK)
                    self.answered += 1
                except zmq.ZMQError:  # the peer is gone
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close(linger=0)


class ClockClient:
    """The rank's end: a daemon thread measuring round trips; ``take()`` hands the samples
    to the next heartbeat. ``shift_ns`` is the test-only shift of the rank's clock."""

    def __init__(self, ctx: zmq.Context, addr: str, client_keys: keys_.ClientKeys | None,
                 shift_ns: int = 0) -> None:
        self._sock = ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.IMMEDIATE, 1)
        self._sock.setsockopt(zmq.SNDHWM, 4)
        self._sock.setsockopt(zmq.MAXMSGSIZE, WIRE_BYTES)
        if client_keys is not None:
            keys_.secure_client(self._sock, client_keys)
        self._sock.connect(addr)
        self._shift = shift_ns
        self.samples: collections.deque[Sample] = collections.deque(maxlen=SAMPLES_PER_HEARTBEAT)
        self.first = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-clock", daemon=True)
        self._thread.start()

    def take(self) -> list[list[int]]:
        pop, out = self.samples.popleft, []
        for _ in range(len(self.samples)):  # only the emitter thread pops
            out.append(list(pop()))
        return out

    def _run(self) -> None:
        sock, shift = self._sock, self._shift
        retry = RETRY_S
        while True:
            t1 = time.time_ns() + shift
            try:
                sock.send(encode_request(t1), zmq.NOBLOCK)
            except zmq.Again:  # not connected yet (the handshake takes a few ms): soon again
                wait, retry = retry, min(2 * retry, PERIOD_S)
            else:
                self._answer(sock, t1, shift)
                wait, retry = PERIOD_S, RETRY_S
            if self._stop.wait(wait):
                return

    def _answer(self, sock: zmq.Socket, t1: int, shift: int) -> None:
        deadline = time.monotonic() + REPLY_WAIT_MS / 1000
        while (left := deadline - time.monotonic()) > 0 and sock.poll(int(left * 1000) + 1):
            data = sock.recv()
            t4 = time.time_ns() + shift
            reply = decode_reply(data)
            if reply is not None and reply[0] == t1:  # a late answer to an older request: skip
                self.samples.append(Sample(t1, reply[1], reply[2], t4))
                self.first.set()
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        self._sock.close(linger=0)
