"""The ranks' clock round trips, passed on by the relay to the viewer's clock channel.

A ROUTER at the relay's clock address (its event port + 1) takes the ranks' requests with
their identity frame, a DEALER sends them on upstream as they are, and the answers come back
along the route their frames name (the viewer's ``ClockServer`` answers any route of up to
``clocksync.MAX_HOPS`` frames). The samples still measure the rank's clock against the
viewer's, only over a longer path: the relay's hop is inside the bound
(``commviz/wire/clocksync.py``), which it widens by the time the relay takes.

``zmq.proxy`` does the same, but with blocking sends: with the viewer gone it would wait
forever in a send and never stop. This loop sends with NOBLOCK and drops what cannot go.
"""

from __future__ import annotations

import threading

import zmq

from commviz.wire import clocksync
from commviz.wire import keys as keys_

POLL_MS = 100
SEND_HWM = 64  # round trips in flight upstream: the ranks ask twice a second each


class ClockProxy:
    """``front``: the relay's bound ROUTER (handed over to this object's thread)."""

    def __init__(self, ctx: zmq.Context, front: zmq.Socket, upstream: str,
                 client_keys: keys_.ClientKeys | None) -> None:
        self._front = front
        self._back = ctx.socket(zmq.DEALER)
        for opt, value in ((zmq.LINGER, 0), (zmq.IMMEDIATE, 1), (zmq.SNDHWM, SEND_HWM),
                           (zmq.MAXMSGSIZE, clocksync.WIRE_BYTES)):
            self._back.setsockopt(opt, value)
        if client_keys is not None:
            keys_.secure_client(self._back, client_keys)
        self._back.connect(upstream)
        self.passed = 0   # requests sent on
        self.dropped = 0  # requests that could not go (no viewer, or too many in flight)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-relay-clock",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        front, back = self._front, self._back
        poller = zmq.Poller()
        poller.register(front, zmq.POLLIN)
        poller.register(back, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(POLL_MS))
            if front in ready:
                self._pass(front, back, upstream=True)
            if back in ready:
                self._pass(back, front, upstream=False)

    def _pass(self, src: zmq.Socket, dst: zmq.Socket, upstream: bool) -> None:
        while True:
            try:
                frames = src.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if upstream and not 2 <= len(frames) <= clocksync.MAX_HOPS:
                continue  # a route the viewer would refuse anyway
            try:
                dst.send_multipart(frames, zmq.NOBLOCK)
            except zmq.ZMQError:  # upstream: none there or full; back: the rank is gone
                if upstream:
                    self.dropped += 1
                continue
            if upstream:
                self.passed += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._back.close(linger=0)
        self._front.close(linger=0)
