"""The viewer's end of the event channel: a bound PULL socket drained in batches.

Every message is decoded and validated here; anything malformed is counted and dropped,
so nothing a peer sends can crash the viewer or corrupt the model.
"""

from __future__ import annotations

import errno
from collections import Counter

import zmq

from .. import protocol

DEFAULT_BIND = "tcp://127.0.0.1:5555"
RECV_HWM = 100_000
MAX_WIRE_BYTES = 4 * protocol.MAX_MESSAGE_BYTES  # larger frames: libzmq drops the peer


class BindError(RuntimeError):
    """The address cannot be bound; the message says why and what to do."""


class Receiver:
    def __init__(self, bind: str = DEFAULT_BIND) -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PULL)
        self._sock.setsockopt(zmq.RCVHWM, RECV_HWM)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_WIRE_BYTES)
        self._sock.setsockopt(zmq.LINGER, 0)
        try:
            if bind.endswith(":*") or bind.endswith(":0"):
                port = self._sock.bind_to_random_port(bind.rsplit(":", 1)[0])
                bind = f"{bind.rsplit(':', 1)[0]}:{port}"
            else:
                self._sock.bind(bind)
        except zmq.ZMQError as exc:
            self.close()
            if exc.errno == errno.EADDRINUSE:
                raise BindError(f"{bind} is already in use (another commviz viewer?). "
                                "Pick another with --bind tcp://127.0.0.1:PORT, and point "
                                "the ranks at it with COMMVIZ_ADDR.") from None
            raise BindError(f"cannot bind {bind}: {exc.strerror}") from None
        self.addr = bind
        self.received = 0
        self.rejected = 0
        self.reject_reasons: Counter[str] = Counter()

    def drain(self, timeout_ms: int, max_messages: int = 20_000) -> list[protocol.Message]:
        """Wait up to ``timeout_ms`` for traffic, then take what is queued (bounded)."""
        out: list[protocol.Message] = []
        if not self._sock.poll(timeout_ms):
            return out
        recv = self._sock.recv
        for _ in range(max_messages):
            try:
                data = recv(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
            self.received += 1
            try:
                out.append(protocol.decode(data))
            except protocol.ProtocolError as exc:
                self.rejected += 1
                self.reject_reasons[str(exc).split(":")[0][:80]] += 1
        return out

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()
