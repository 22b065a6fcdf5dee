"""Whether a viewer (or a relay) is at the other end of a PUSH socket, from ZeroMQ's monitor.

A rank's emitter and a relay both send with ZMQ_IMMEDIATE and NOBLOCK: a message sent before
the handshake is dropped. So what they send is held while a connection attempt is still under
way, and dropped only once the peer is known to be absent (the connection was refused) or the
attempt took too long. Stdlib and zmq only: the rank side imports this module.
"""

from __future__ import annotations

import sys
import time

import zmq
from zmq.utils.monitor import recv_monitor_message

CONNECT_WAIT_S = 2.0   # records are held, not dropped, while a first connection is under way
KEYS_HINT = "COMMVIZ_KEYS, or COMMVIZ_SERVER_KEY and COMMVIZ_CLIENT_KEY; see docs/nodes.md"
_REFUSED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class Link:
    """``who`` names the sender in the one warning a refusal prints ("this rank")."""

    def __init__(self, sock: zmq.Socket, addr: str, who: str) -> None:
        self._addr = addr
        self._who = who
        self._mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | _REFUSED
                                            | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED)
        self._sock = sock
        self.connected = False
        self.ever_connected = False
        self.handshakes = 0  # connections made: a new one may be a viewer started again
        self.refused = False  # no viewer there, or one that will not hear this sender
        self.denied = False   # a viewer there refused this sender's keys (or their absence)
        self._since = time.monotonic()

    def update(self) -> None:
        while True:
            try:
                event = recv_monitor_message(self._mon, zmq.NOBLOCK)["event"]
            except zmq.Again:
                return
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.connected, self.refused, self.ever_connected = True, False, True
                self.handshakes += 1
            elif event == zmq.EVENT_DISCONNECTED:
                self.connected, self._since = False, time.monotonic()
            elif event == zmq.EVENT_CONNECT_RETRIED and not self.connected:
                self.refused = True
            elif event & _REFUSED:
                self.refused = True
                if not self.denied:  # once: the viewer is there but will not hear us
                    self.denied = True
                    print(f"commviz: warning: the viewer at {self._addr} refused {self._who} "
                          f"(keys: {KEYS_HINT}); its records are dropped", file=sys.stderr)

    def pending(self) -> bool:
        """A connection attempt is still under way: hold records rather than drop them."""
        self.update()
        return (not self.connected and not self.refused
                and time.monotonic() - self._since < CONNECT_WAIT_S)

    def wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.pending() and time.monotonic() < deadline:
            self._mon.poll(10)

    def close(self) -> None:
        self._sock.disable_monitor()
        self._mon.close(linger=0)
