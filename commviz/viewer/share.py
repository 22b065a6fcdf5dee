"""A class that follows the teacher's viewer (``--share``): every wire message the teacher's
viewer takes in, republished to each student's own viewer, history first for late joiners;
or, when the teacher plays a recording (``commviz play --share``), the playback's clock, which
each student's own playback of the same file follows (``ClockFollower``).

The teacher's side is a ROUTER socket on loopback (``Republisher``), pumped by the session's
collector after each drain with the bytes as they came (``Intake.raw``). A follower's
(``Subscriber``) is a DEALER that says hello once and then only receives: it decodes and checks
every message as the teacher's receiver does, and builds its own model, so that each student
switches language, opens explanations, scrolls and zooms alone. Nothing a follower sends
reaches the ranks: the republisher reads hellos and nothing else, and only the teacher's
controller drives them (pause, `n`, speed). When the teacher's viewer closes, each follower
is told the class ended.
"""

from __future__ import annotations

import collections
import struct

import zmq

from commviz.viewer.transport import Intake

HELLO = b"\x00commviz-follow"  # a follower's one message (0x00: no message of the wire)
CLASS_ENDED = b"\x00commviz-class-ended"
HISTORY_BYTES = 16 << 20  # kept for late joiners; the oldest go first (groups and heartbeats
#                           are sent again every few seconds, so a late joiner still has them)
FOLLOWER_HWM = 100_000  # messages queued per follower; past them zmq drops its newest
END_LINGER_MS = 1_000  # how long the last words to the followers may take to leave
FOLLOWER_SAYS_MAX = 256  # bytes of a message from a follower; a larger one drops it
CLOCK = b"\x00commviz-clock"  # a playback's clock: where it is, how fast, whether it runs
_CLOCK = struct.Struct("<qdBQ")  # at_ns, speed, running, epoch (the times it played again)


def clock_frame(at_ns: int, speed: float, running: bool, epoch: int) -> bytes:
    """The teacher's playback clock as ``Republisher.pump`` sends it."""
    return CLOCK + _CLOCK.pack(at_ns, speed, running, epoch)


def read_clock(data: bytes) -> tuple[int, float, bool, int] | None:
    """(at_ns, speed, running, epoch) of a clock frame; None for anything else."""
    if not data.startswith(CLOCK) or len(data) != len(CLOCK) + _CLOCK.size:
        return None
    at_ns, speed, running, epoch = _CLOCK.unpack_from(data, len(CLOCK))
    return at_ns, speed, bool(running), epoch


class Republisher:
    """The teacher's end: binds ``addr`` (loopback, a free port), takes followers' hellos and
    sends each one the history, then every new message, never waiting on any of them."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.SNDHWM, FOLLOWER_HWM)
        # followers say hello, nothing more (at the hello's own size, libzmq refused it)
        self._sock.setsockopt(zmq.MAXMSGSIZE, FOLLOWER_SAYS_MAX)
        self._sock.setsockopt(zmq.LINGER, END_LINGER_MS)
        port = self._sock.bind_to_random_port(f"tcp://{host}")
        self.addr = f"tcp://{host}:{port}"
        self._history: collections.deque[bytes] = collections.deque()
        self._history_bytes = 0
        self.forgotten = 0  # history let go of (the oldest, past HISTORY_BYTES)
        self.followers: set[bytes] = set()
        self._state: bytes | None = None  # the last ``state`` pumped (no history: it replaces)

    def pump(self, frames: list[bytes], state: bytes | None = None) -> None:
        """Welcome the followers who said hello (the history first, then the state), then
        send ``frames``, the messages just taken in, to every follower, and ``state`` (a
        playback's clock: only the latest counts) if it changed."""
        while self._sock.poll(0):
            try:
                who, said = self._sock.recv_multipart(zmq.NOBLOCK)
            except (zmq.Again, ValueError):  # (a frame count other than hello's: ignored)
                continue
            if said == HELLO and who not in self.followers:
                self.followers.add(who)
                for data in self._history:
                    self._send(who, data)
                if self._state is not None:
                    self._send(who, self._state)
        if state is not None and state != self._state:
            self._state = state
            for who in self.followers:
                self._send(who, state)
        for data in frames:
            self._history.append(data)
            self._history_bytes += len(data)
            for who in self.followers:
                self._send(who, data)
        while self._history_bytes > HISTORY_BYTES and len(self._history) > 1:
            self._history_bytes -= len(self._history.popleft())
            self.forgotten += 1

    def _send(self, who: bytes, data: bytes) -> None:
        try:
            self._sock.send_multipart([who, data], zmq.NOBLOCK)
        except zmq.Again:  # (a follower that does not keep up loses this one)
            pass

    def close(self) -> None:
        """Tell every follower the class ended, then release the socket."""
        for who in self.followers:
            self._send(who, CLASS_ENDED)
        self._sock.close(linger=END_LINGER_MS)
        self._ctx.term()


class _Follower:
    """A follower's socket: a DEALER that says hello to the teacher's republisher once, then
    only receives; ``ended`` once the teacher's viewer closed (the class is over)."""

    def _connect(self, addr: str) -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(addr)
        self._sock.send(HELLO)
        self.addr = addr
        self.ended = False

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()


class Subscriber(_Follower, Intake):
    """A follower's end: the teacher's messages, decoded and checked as a viewer's own."""

    def __init__(self, addr: str) -> None:
        Intake.__init__(self)
        self._connect(addr)

    def _frame(self, data: bytes) -> bytes | None:
        if data == CLASS_ENDED:
            self.ended = True
            return None
        return data


class ClockFollower(_Follower):
    """A follower of a teacher's playback: the teacher's clock. Its own playback of the same
    recording goes where the teacher's goes."""

    def __init__(self, addr: str) -> None:
        self._connect(addr)

    def take(self) -> tuple[int, float, bool, int] | None:
        """The teacher's newest clock since the last call (None: no news)."""
        newest = None
        while True:
            try:
                data = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return newest
            if data == CLASS_ENDED:
                self.ended = True
            else:
                newest = read_clock(data) or newest
