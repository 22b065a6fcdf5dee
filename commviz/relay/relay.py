"""One node's relay: a local PULL for the node's ranks, one PUSH to the viewer.

Every ``TICK_S`` the messages that arrived are sent on as one ``fwd`` envelope
(``commviz/wire/relayed.py``), each rank's messages whole and in the order they came. It
keeps a rank's emitter's guarantees (``commviz/rank/emitter.py``): sends are NOBLOCK on a
bounded queue, and when the viewer is absent, slow or gone, envelopes are dropped and their
records counted, never queued without bound; while it cannot send, it stops reading, and the
ranks' own emitters then drop and count. What it holds is one tick: a relay that dies loses
its node's last tick and no more. Asked to (``keep_unforwarded``: ``commviz run --no-viewer``,
whose node keeps a black box), it keeps the last KEPT_BYTES of what it dropped, for
``unforwarded`` to hand on at close. It keeps its ranks' ``grp`` messages (bounded) and sends
them again after every new connection upstream: a viewer started again learns the node's
groups at once, not at their next repeat (10 s).

The ranks' clock round trips go through ``ClockProxy`` to the viewer, so every sample still
measures the node's clock against the viewer's (docs/nodes.md says why not an offset of the
relay's own). Locally no keys are needed (loopback or ipc://); upstream, off-host, the relay
authenticates with the ranks' client keys. A relay bound where other hosts reach it (the
upper level of a tree) is a CURVE server, as a viewer is.
"""

from __future__ import annotations

import collections
import errno
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import zmq

from commviz.relay.clockproxy import ClockProxy
from commviz.wire import clocksync, nodes, protocol, relayed
from commviz.wire import keys as keys_
from commviz.wire.link import Link

TICK_S = 0.05          # as a rank's emitter: one envelope a tick
RECV_HWM = 20_000      # messages queued from the ranks before their emitters drop
# envelopes queued to the viewer before dropping: a tick each, 50 s, as long as a rank's
# emitter holds its messages (its SEND_HWM); 100 dropped 29% of a 1,024-rank fleet's records
# on a machine where the viewer ran 5x behind (docs/scale.md)
SEND_HWM = 1000
EXIT_LINGER_MS = 1000  # bounded wait at exit for the last envelope to reach a live viewer
QUIET_S = 0.2          # at close: what the ranks still send is taken until this long quiet
CLOSE_WAIT_S = 2.0     # ... and no longer than this
DRAIN_MAX = 10_000     # messages read in one go, so a flood cannot delay a tick's sending
KEPT_BYTES = 32 << 20  # the last of what it could not send, kept when asked (``unforwarded``)
DEFAULT_ADDR = "tcp://127.0.0.1:5555"  # where instrument() reports when COMMVIZ_ADDR is unset
GROUPS_KEPT = 64       # ``grp`` messages kept per process, told again to a viewer met anew
PROCESSES_KEPT = 256   # processes whose ``grp`` messages are kept (a node's ranks, their forks)
_GROUPS_HEAD = protocol.kind_head("grp")  # rank emitters write v and k first
_ADDRESS = re.compile(r"tcp://\S+:(\d+|\*)|ipc://\S+")


class RelayError(ValueError):
    """A relay that cannot start; the message says why and what to do."""


class Relay:
    """Started by the constructor (on threads of its own); ``close()`` ends it.

    ``to``: the viewer's (or an upper relay's) address; ``bind``: where the ranks connect
    (a free port with ``:*``); ``keys``: a folder from ``commviz keys`` (else the ranks'
    variables, COMMVIZ_KEYS...), needed for an off-host ``to`` and to bind off-host.
    """

    def __init__(self, to: str, bind: str = DEFAULT_ADDR, keys: str | Path | None = None,
                 tick_s: float = TICK_S, environ: Mapping[str, str] = os.environ,
                 keep_unforwarded: bool = False) -> None:
        _check_addresses(to, bind)
        client, server = _keys(to, bind, keys, environ)
        self.to = to
        self.node = nodes.hostname(environ)
        self.tick_s = tick_s
        self.forwarded = 0   # messages sent on
        self.envelopes = 0
        self.dropped = 0     # op records dropped
        self.lost = 0        # messages dropped, of every kind
        self.ever_connected = False
        # the last messages dropped, oldest first (None: not kept)
        self._unforwarded: collections.deque[bytes] | None = \
            collections.deque() if keep_unforwarded else None
        self._unforwarded_bytes = 0
        # each process' ``grp`` messages, sent again after a new connection upstream: a
        # viewer started again learns the node's groups at once, not at their next repeat
        self._groups: dict[tuple[int, int], list[bytes]] = {}
        self._ctx = zmq.Context()
        self._auth = keys_.authenticator(self._ctx, server) if server else None
        self._pull = self._ctx.socket(zmq.PULL)
        self._front = self._ctx.socket(zmq.ROUTER)
        for sock in (self._pull, self._front):
            sock.setsockopt(zmq.LINGER, 0)
            if server is not None:
                keys_.secure_server(sock, server)
        self._pull.setsockopt(zmq.RCVHWM, RECV_HWM)
        self._pull.setsockopt(zmq.MAXMSGSIZE, relayed.MAX_INNER_BYTES)
        self._front.setsockopt(zmq.MAXMSGSIZE, clocksync.WIRE_BYTES)
        try:
            self.addr = self._bind(bind)
        except zmq.ZMQError as exc:
            self._close_sockets()
            if exc.errno == errno.EADDRINUSE:
                raise RelayError(f"{bind} (or its port + 1, the clock channel) is already in "
                                 "use (another relay or viewer?): pick another with --bind"
                                 ) from None
            raise RelayError(f"cannot bind {bind}: {exc.strerror}") from None
        self._push = self._ctx.socket(zmq.PUSH)
        for opt, value in ((zmq.SNDHWM, SEND_HWM), (zmq.LINGER, 0), (zmq.IMMEDIATE, 1)):
            self._push.setsockopt(opt, value)
        if client is not None:
            keys_.secure_client(self._push, client)
        self._link = Link(self._push, to, "this relay")  # before connect: it sees the handshake
        self._push.connect(to)
        upstream_clock = clocksync.clock_addr(to)
        self._clock = (None if upstream_clock is None
                       else ClockProxy(self._ctx, self._front, upstream_clock, client))
        if self._clock is None:
            self._front.close(linger=0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-relay", daemon=True)
        self._thread.start()

    def _bind(self, bind: str) -> str:
        """The ranks' events at ``bind``, their clock channel beside it (clock_addr)."""
        if not bind.startswith("tcp://") or not bind.endswith((":*", ":0")):
            self._pull.bind(bind)
            self._front.bind(clocksync.clock_addr(bind) or "")
            return bind
        return clocksync.bind_beside_clock(
            self._pull, bind.rsplit(":", 1)[0],
            lambda addr: self._front.bind(clocksync.clock_addr(addr) or ""))

    # ---- the relay's thread ----------------------------------------------------------------
    def _run(self) -> None:
        link = self._link
        packer = relayed.Packer()
        next_tick = time.monotonic() + self.tick_s
        last_sent = 0.0
        handshakes = 0
        try:
            while not self._stop.is_set():
                if link.pending():  # hold: the ranks' messages wait in their queues
                    self._stop.wait(self.tick_s)
                    continue
                if link.handshakes != handshakes:  # connected again: perhaps a new viewer
                    if handshakes:
                        for kept in self._groups.values():
                            for data in kept:
                                packer.add(data)
                    handshakes = link.handshakes
                wait_ms = max(0, int((next_tick - time.monotonic()) * 1000))
                if self._pull.poll(wait_ms):
                    self._drain(packer)
                now = time.monotonic()
                if now >= next_tick:
                    if self._flush(packer, now - last_sent >= protocol.HEARTBEAT_S):
                        last_sent = now
                    next_tick = max(next_tick + self.tick_s, now)
            self._last(link, packer)
        finally:
            link.update()
            self.ever_connected = link.ever_connected
            link.close()

    def _drain(self, packer: relayed.Packer) -> None:
        recv, add = self._pull.recv, packer.add
        for _ in range(DRAIN_MAX):
            try:
                data = recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            if protocol.has_head(data, _GROUPS_HEAD):
                self._keep_groups(data)
            add(data)

    def _keep_groups(self, data: bytes) -> None:
        """Keep a process' ``grp`` message (bounded) to tell a viewer met anew."""
        try:
            msg = protocol.decode(data)
        except protocol.ProtocolError:
            return  # sent on all the same: the viewer rejects and counts it
        who = (msg.rank, msg.inc)
        kept = self._groups.pop(who, [])  # popped and put back: the dict stays by recency
        kept.append(data)
        self._groups[who] = kept[-GROUPS_KEPT:]
        if len(self._groups) > PROCESSES_KEPT:
            del self._groups[next(iter(self._groups))]

    def _flush(self, packer: relayed.Packer, beat: bool) -> bool:
        """Send the tick's envelopes (an empty one when ``beat``: the counts go up)."""
        sent = False
        for msgs in packer.take():
            if not msgs and not beat:
                continue
            data = relayed.encode(self.node, msgs, self.dropped, self.lost)
            try:
                self._push.send(data, zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self.lost += len(msgs)
                self.dropped += sum(relayed.records_in(m) for m in msgs)
                self._keep(msgs)
                continue
            self.forwarded += len(msgs)
            self.envelopes += 1
            sent = True
        return sent

    def _keep(self, msgs: list[bytes]) -> None:
        kept = self._unforwarded
        if kept is None:
            return
        kept.extend(msgs)
        self._unforwarded_bytes += sum(map(len, msgs))
        while self._unforwarded_bytes > KEPT_BYTES and len(kept) > 1:
            self._unforwarded_bytes -= len(kept.popleft())

    def unforwarded(self) -> list[bytes]:
        """The last messages it could not send (after ``close``; KEPT_BYTES at most), oldest
        first, if asked to keep them."""
        return list(self._unforwarded or ())

    def _last(self, link: Link, packer: relayed.Packer) -> None:
        """At close: take what the ranks still send (their goodbyes) and send it on."""
        link.wait(0.5)
        deadline = time.monotonic() + CLOSE_WAIT_S
        while time.monotonic() < deadline and self._pull.poll(int(QUIET_S * 1000)):
            self._drain(packer)
        self._flush(packer, beat=True)

    def close(self) -> None:
        """Send on what arrived, stop, release the sockets; returns within about 3 s."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=CLOSE_WAIT_S + 2)
        self._close_sockets()

    def _close_sockets(self) -> None:
        if getattr(self, "_clock", None) is not None:
            self._clock.close()
        else:
            self._front.close(linger=0)
        self._pull.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        if hasattr(self, "_push"):
            self._push.close(linger=EXIT_LINGER_MS)
        self._ctx.term()

    def end_line(self) -> str | None:
        """What to say at exit when records were lost here, else None."""
        if not self.lost:
            return None
        if not self.ever_connected:
            return (f"commviz: relay: no viewer ever answered at {self.to}: {self.lost} "
                    f"messages of this node's ranks ({self.dropped} op records) were dropped")
        return (f"commviz: relay: {self.lost} messages ({self.dropped} op records) of this "
                f"node's ranks were dropped: the viewer at {self.to} did not take them in time")


def _check_addresses(to: str, bind: str) -> None:
    if not _ADDRESS.fullmatch(to) or to.endswith(":*"):
        raise RelayError(f"{to!r} is not an address to forward to: it must look like "
                         "tcp://HOST:PORT (the viewer's, as its banner says) or ipc://PATH")
    if not _ADDRESS.fullmatch(bind):
        raise RelayError(f"{bind!r} is not an address to listen on: it must look like "
                         "tcp://127.0.0.1:PORT (or :* for a free port) or ipc://PATH")
    port = bind.rsplit(":", 1)[1]
    if bind.startswith("tcp://") and port.isdigit() and int(port) > clocksync.MAX_PORT:
        raise RelayError(f"{bind}: the port must be at most {clocksync.MAX_PORT}, since the clock "
                         "channel takes the port after it")
    if to == bind:
        raise RelayError(f"the relay would forward to itself ({to}): --to is the viewer's "
                         "address, --bind the ranks'")


def _keys(to: str, bind: str, folder: str | Path | None, environ: Mapping[str, str]
          ) -> tuple[keys_.ClientKeys | None, keys_.ServerKeys | None]:
    """The client keys to reach ``to`` and, bound off-host, the server keys to be reached."""
    try:
        client = keys_.client_keys({keys_.ENV_KEYS: str(folder)} if folder else environ)
        server = None
        if not nodes.is_loopback(bind):
            if folder is None:
                raise RelayError(f"{bind} can be reached from other hosts, so the relay "
                                 f"needs keys there: --keys DIR ({keys_.HOW_TO}); or bind "
                                 "tcp://127.0.0.1:PORT")
            server = keys_.server_keys(folder)
    except keys_.KeysError as exc:
        raise RelayError(str(exc)) from None
    if client is None and not nodes.is_loopback(to):
        raise RelayError(f"{to} is on another host: the relay needs the ranks' keys to reach "
                         f"it (--keys DIR, or {keys_.ENV_KEYS}=DIR; see docs/nodes.md)")
    return client, server
