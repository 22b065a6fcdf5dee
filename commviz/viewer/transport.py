"""The viewer's end of the event channel: a bound PULL socket drained in batches.

Every message is decoded and validated here, and the group ids of its batches resolved
(``groups.py``); anything malformed is counted and dropped, so nothing a peer sends can crash
the viewer or corrupt the model. Beside it, at the event
port + 1, the clock channel answers the ranks' round trips (``commviz/wire/clocksync.py``). An
address other hosts can reach is bound only with CURVE keys (``commviz/wire/keys.py``): a ZAP
authenticator then drops every peer without an accepted key before it is read.
"""

from __future__ import annotations

import errno
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import zmq

from commviz.viewer.batch_numbers import BatchNumbers
from commviz.viewer.groups import GroupTables
from commviz.viewer.shedding import shed
from commviz.wire import keys as keys_
from commviz.wire import protocol, relayed
from commviz.wire.clocksync import MAX_PORT, ClockServer, bind_beside_clock, clock_addr
from commviz.wire.nodes import is_loopback

DEFAULT_BIND = "tcp://127.0.0.1:5555"
# messages waiting per peer (a rank, or a relay) before its sends wait in its own queue, and
# then are dropped and counted there: at 1,024 peers of 20 to 30 batches a second, several
# seconds each and at most about 1 GB in all
RECV_HWM = 250
DRAIN_MAX = 20_000  # messages one round takes in; a drain that finds more: the viewer is behind
PAUSE_EVERY = 64  # messages taken in between two of a drain's ``pause`` calls (about 0.5 ms)
MAX_WIRE_BYTES = 4 * protocol.MAX_MESSAGE_BYTES  # larger frames: libzmq drops the peer
MAX_RELAYS = 65_536  # relays whose counts are kept: node names come from the peers


class BindError(RuntimeError):
    """The address cannot be bound; the message says why and what to do."""


class AddressInUse(BindError):
    """The address or its port + 1 is taken; the command adds what to do, as it differs."""


# what a viewer binds: tcp://HOST:PORT (PORT * or 0: a free one), or a local ipc:// path
_ADDRESS = re.compile(r"tcp://\S+:(\d+|\*)|ipc://\S+")


class Intake:
    """What every viewer does with the wire bytes it is given (``_sock``'s): decode and check
    them, resolve their groups, take each numbered batch once, shed when behind, and count
    what it rejected. ``raw``: with ``keep_raw``, the bytes of the last drain, as they came
    (what a shared class republishes: ``viewer/share.py``)."""

    _sock: zmq.Socket
    addr: str
    secure = False

    def __init__(self, keep_raw: bool = False) -> None:
        self.received = 0
        self.rejected = 0
        self.reject_reasons: Counter[str] = Counter()
        self.groups = GroupTables(self._reject)
        self.batch_numbers = BatchNumbers()  # a dead process' last batches, sent again
        self.shed: Counter[str] = Counter()  # what it let go of when behind (shedding.KINDS)
        self.behind_rounds = 0
        self.backlogged = False  # the last drain left messages on the socket
        # per relay (its node's name): what it dropped, op records and messages, in all
        self.relays: dict[str, tuple[int, int]] = {}
        self.raw: list[bytes] | None = [] if keep_raw else None

    def _frame(self, data: bytes) -> bytes | None:
        """The wire bytes a received frame carries; None: not a message (a subclass's own
        control frames)."""
        return data

    def drain(self, timeout_ms: int, max_messages: int = DRAIN_MAX,
              pause: Callable[[], object] | None = None) -> list[protocol.Message]:
        """Wait up to ``timeout_ms`` for traffic, then take what is queued (bounded). A drain
        that leaves messages queued sheds what shedding.py says. ``pause``: called every
        PAUSE_EVERY messages, where the caller may wait (for a frame being drawn: a drain of
        thousands of messages would otherwise share the interpreter with it)."""
        out: list[protocol.Message] = []
        self.backlogged = False
        if self.raw is not None:
            self.raw = []
        if not self._sock.poll(timeout_ms):
            return out
        recv = self._sock.recv
        taken = 0
        while taken < max_messages:
            try:
                data = self._frame(recv(zmq.NOBLOCK, copy=True))
            except zmq.Again:
                break
            if data is None:
                continue
            taken += 1
            self.received += 1
            if pause is not None and taken % PAUSE_EVERY == 0:
                pause()
            if self.raw is not None:
                self.raw.append(data)
            self._take(data, out, 0)
        batches = [i for i, msg in enumerate(out) if type(msg) is protocol.OpBatch]
        bad = protocol.check_columns([out[i] for i in batches])  # type: ignore[misc]
        if bad:
            for why in bad.values():
                self._reject(_reason(why), 1)
            drop = {batches[i] for i in bad}
            out = [msg for i, msg in enumerate(out) if i not in drop]
        self.backlogged = taken >= max_messages and bool(self._sock.poll(0))
        if self.backlogged:
            self.behind_rounds += 1
            out = shed(out, self.shed)
        return self.groups.resolve(self.batch_numbers.taken(out))

    def _reject(self, reason: str, messages: int) -> None:
        self.rejected += messages
        self.reject_reasons[reason] += messages

    def _take(self, data: bytes, out: list[protocol.Message], depth: int) -> None:
        """Decode one message, or the messages of a relay's envelope (``commviz/wire/
        relayed.py``) each as if it had come directly: a bad one is rejected alone."""
        try:
            if not relayed.is_envelope(data):
                out.append(protocol.decode(data, columns=False))  # the columns: in drain
                return
            if depth >= relayed.MAX_DEPTH:
                raise protocol.ProtocolError(f"envelopes nested more than {relayed.MAX_DEPTH} deep")
            env = relayed.decode(data)
        except protocol.ProtocolError as exc:
            self._reject(_reason(exc), 1)
            return
        if env.node in self.relays or len(self.relays) < MAX_RELAYS:
            self.relays[env.node] = (env.dropped, env.lost)
        for inner in env.msgs:
            self._take(inner, out, depth + 1)


class Receiver(Intake):
    """``keys``: a folder written by ``commviz keys``; needed to bind a non-loopback address,
    optional on loopback."""

    def __init__(self, bind: str = DEFAULT_BIND, keys: str | Path | None = None,
                 keep_raw: bool = False) -> None:
        super().__init__(keep_raw)
        if not _ADDRESS.fullmatch(bind):
            raise BindError(f"{bind!r} is not an address to listen on: it must look like "
                            "tcp://HOST:PORT, e.g. tcp://127.0.0.1:5555")
        port = bind.rsplit(":", 1)[1]
        if bind.startswith("tcp://") and port != "*" and int(port) > MAX_PORT:
            raise BindError(f"{bind}: the port must be at most {MAX_PORT}, since the clock "
                            "channel takes the port after it")
        server_keys = self._server_keys(bind, keys)
        self._ctx = zmq.Context()
        self._auth = keys_.authenticator(self._ctx, server_keys) if server_keys else None
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.RCVHWM, RECV_HWM)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_WIRE_BYTES)
        self._sock.setsockopt(zmq.LINGER, 0)
        if server_keys is not None:
            keys_.secure_server(self._sock, server_keys)
        self.clock: ClockServer | None = None
        try:
            bind = self._bind(bind, server_keys)
        except zmq.ZMQError as exc:
            self.close()
            if exc.errno == errno.EADDRINUSE:
                raise AddressInUse(f"{bind} (or its port + 1, the clock channel) is already "
                                   "in use (another commviz viewer?)") from None
            raise BindError(f"cannot bind {bind}: {exc.strerror}") from None
        self.addr = bind
        self.secure = server_keys is not None

    @staticmethod
    def _server_keys(bind: str, keys: str | Path | None) -> keys_.ServerKeys | None:
        try:
            if keys is not None:
                return keys_.server_keys(keys)
            if not is_loopback(bind):
                raise BindError(f"{bind} can be reached from other hosts, so the viewer needs "
                                f"keys: {keys_.HOW_TO}; or bind tcp://127.0.0.1:PORT")
        except keys_.KeysError as exc:
            raise BindError(str(exc)) from None
        return None

    def _bind(self, bind: str, server_keys: keys_.ServerKeys | None) -> str:
        """Bind the events at ``bind`` and the clock channel at its port + 1."""
        if not (bind.endswith(":*") or bind.endswith(":0")):
            self._sock.bind(bind)
            self._start_clock(bind, server_keys)
            return bind
        return bind_beside_clock(self._sock, bind.rsplit(":", 1)[0],
                                 lambda addr: self._start_clock(addr, server_keys))

    def _start_clock(self, addr: str, server_keys: keys_.ServerKeys | None) -> None:
        caddr = clock_addr(addr)
        if caddr is not None:
            self.clock = ClockServer(self._ctx, caddr, server_keys)

    def close(self) -> None:
        if self.clock is not None:
            self.clock.close()
        if self._auth is not None:
            self._auth.stop()
        self._sock.close(linger=0)
        self._ctx.term()


def _reason(error: Exception | str) -> str:
    """What a rejection is counted under: the message's words before any detail."""
    return str(error).split(":")[0][:80]
