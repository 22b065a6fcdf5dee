"""Teaching controls for demos: the viewer says when the ranks may start their next step.

Viewer side, a ``Controller`` binds a ZeroMQ PUB socket and publishes its whole state,
``{"v": 1, "k": "ctl", "mode": "play"|"step", "allow": N, "epoch": E}``, on every change and
every ``REPUBLISH_S`` besides: PUB/SUB drops what is sent before a subscriber has connected,
so the state is re-sent rather than events. Rank side, a ``StepGate`` (the demo runner's
``DemoContext.iterations()`` calls it) holds the rank before step ``s`` until the mode is
``play`` or ``allow >= s``. Every rank waits for the same permission, so the next
collective happens on cue.

While the TUI's replay is behind, the viewer also holds playing ranks (``hold``): they are
told ``step`` until the replay catches up, so slowing the replay down slows the demo rather
than leaving its operations unseen.

Gates report each step they start on a PUSH socket (``{"v": 1, "k": "at", "rank", "step"}``).
That is how ``pause()`` knows the step in progress, and how a step that one rank started
just before it heard ``pause`` is granted to every rank: ``allow`` never falls below a
started step, so no rank is left inside a collective waiting for a peer held at the gate.

Without ``COMMVIZ_CONTROL`` a gate does nothing and costs nothing. A gate that hears no
control message for ``SILENCE_S`` (the viewer is gone) plays on, so ranks never hang.
Only plain msgpack maps cross the wire, validated on receipt; never pickle. No Textual,
Rich or torch: the rank side imports this module.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import zmq

from commviz.wire import protocol

VERSION = protocol.VERSION
ENV_ADDR = "COMMVIZ_CONTROL"          # the Controller's PUB address
ENV_REPORT = "COMMVIZ_CONTROL_REPORT"  # the Controller's PULL address for step reports
REPUBLISH_S = 0.2
SILENCE_S = 5.0   # a gate that hears nothing for this long treats the mode as play
POLL_MS = 20      # controller: latency of a key press reaching the wire
GATE_POLL_MS = 100  # gate: bounded waits, so signals and exit still get through
MAX_BYTES = 256
MAX_STEP = 1 << 62

Mode = Literal["play", "step"]


@dataclass(frozen=True)
class ControlState:
    """What the ranks are told; ``reached``: the highest step any rank reported starting.
    ``held``: the viewer holds playing ranks while its replay catches up (they are told
    ``step``, the person's mode stays ``play``)."""

    mode: Mode
    allow: int      # the highest step ranks may start in step mode (-1: none yet)
    epoch: int      # counts changes of mode or allow; a repeat carries the same epoch
    reached: int = -1
    held: bool = False

    @property
    def told(self) -> Mode:
        """The mode the ranks are told."""
        return "step" if self.held else self.mode


def _unpack(data: bytes) -> dict | None:
    return protocol.unpack_small(data, MAX_BYTES, max_str_len=32)


def _int(value: object, lo: int, hi: int = MAX_STEP) -> bool:
    return type(value) is int and lo <= value < hi


def encode_control(mode: Mode, allow: int, epoch: int) -> bytes:
    return protocol.pack({"v": VERSION, "k": "ctl", "mode": mode, "allow": allow, "epoch": epoch})


def decode_control(data: bytes) -> ControlState | None:
    """A valid ``ctl`` message as a ControlState, or None: bad input is dropped, not raised."""
    msg = _unpack(data)
    if (msg is None or msg.get("k") != "ctl" or msg.get("mode") not in ("play", "step")
            or not _int(msg.get("allow"), -1) or not _int(msg.get("epoch"), 0)):
        return None
    return ControlState(msg["mode"], msg["allow"], msg["epoch"])


def encode_report(rank: int, step: int) -> bytes:
    return protocol.pack({"v": VERSION, "k": "at", "rank": rank, "step": step})


def decode_report(data: bytes) -> tuple[int, int] | None:
    """(rank, step) of a valid ``at`` message, or None."""
    msg = _unpack(data)
    if (msg is None or msg.get("k") != "at" or not _int(msg.get("rank"), 0, 1 << 20)
            or not _int(msg.get("step"), 0)):
        return None
    return msg["rank"], msg["step"]


def _bind(sock: zmq.Socket, addr: str) -> str:
    if addr.endswith((":*", ":0")):
        host = addr.rsplit(":", 1)[0]
        return f"{host}:{sock.bind_to_random_port(host)}"
    sock.bind(addr)
    return addr


class Controller:
    """The viewer's end: play, pause and single-step the demo ranks.

    Thread-safe: the methods only change the state under a lock; a daemon thread owns both
    sockets, publishes the state (within ``POLL_MS`` of a change, and every ``republish_s``)
    and reads the ranks' step reports.
    """

    def __init__(self, bind: str = "tcp://127.0.0.1:*", paused: bool = False,
                 republish_s: float = REPUBLISH_S) -> None:
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.MAXMSGSIZE, MAX_BYTES)  # larger: libzmq drops that peer
        for sock in (self._pub, self._pull):
            sock.setsockopt(zmq.LINGER, 0)
        try:
            self.addr = _bind(self._pub, bind)
            self.report_addr = _bind(self._pull, f"{bind.rsplit(':', 1)[0]}:*")
        except zmq.ZMQError:
            self._close_sockets()
            raise
        self._republish_s = republish_s
        self._lock = threading.Lock()
        self._state = ControlState("step" if paused else "play", -1, 0)
        self._dirty = True
        self.rejected = 0  # malformed step reports, dropped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commviz-control", daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        """The environment variables that connect a rank's StepGate to this controller."""
        return {ENV_ADDR: self.addr, ENV_REPORT: self.report_addr}

    @property
    def state(self) -> ControlState:
        with self._lock:
            return self._state

    @property
    def paused(self) -> bool:
        return self.state.mode == "step"

    def play(self) -> None:
        """Let the ranks run freely (still paced by their --interval)."""
        self._change(lambda s: ("play", s.allow))

    def pause(self) -> None:
        """Step mode: the step in progress finishes, the next one waits for ``step()``."""
        self._change(lambda s: ("step", max(s.allow, s.reached)) if s.mode == "play"
                     else (s.mode, s.allow))

    def toggle(self) -> None:
        """Pause when playing, play when paused (the space key)."""
        if self.paused:
            self.play()
        else:
            self.pause()

    def step(self) -> None:
        """Allow one more step. When playing, this only pauses (the ranks stop after the step
        in progress); presses made while a granted step is still to come add up."""
        if not self.paused:
            self.pause()
        else:
            self._change(lambda s: (s.mode, s.allow + 1))

    def hold(self, on: bool) -> None:
        """Hold the ranks after the step in progress while the replay catches up (``on``), or
        let them go on again; a paused demo stays paused either way."""
        with self._lock:
            s = self._state
            if on != s.held:
                allow = max(s.allow, s.reached) if on and s.mode == "play" else s.allow
                self._state = ControlState(s.mode, allow, s.epoch + 1, s.reached, on)
                self._dirty = True

    def restart(self) -> None:
        """New ranks count their steps from 0 again: forget what the old ones reached (a
        paused demo stays paused, waiting at its first step)."""
        with self._lock:
            s = self._state
            self._state = ControlState(s.mode, -1, s.epoch + 1, held=s.held)
            self._dirty = True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._close_sockets()

    def _change(self, new: Callable[[ControlState], tuple[Mode, int]]) -> None:
        with self._lock:
            s = self._state
            mode, allow = new(s)
            if (mode, allow) != (s.mode, s.allow):
                self._state = ControlState(mode, allow, s.epoch + 1, s.reached, s.held)
                self._dirty = True

    def _started(self, step: int) -> None:
        with self._lock:
            s = self._state
            allow, epoch = s.allow, s.epoch
            if s.told == "step" and step > allow:  # started before it heard pause: grant it
                allow, epoch, self._dirty = step, epoch + 1, True
            self._state = ControlState(s.mode, allow, epoch, max(s.reached, step), s.held)

    def _run(self) -> None:
        next_publish = 0.0
        while not self._stop.is_set():
            if self._pull.poll(POLL_MS):
                while True:
                    try:
                        report = decode_report(self._pull.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    if report is None:
                        self.rejected += 1
                    else:
                        self._started(report[1])
            now = time.monotonic()
            with self._lock:
                due, self._dirty = self._dirty or now >= next_publish, False
                s = self._state
            if due:
                try:
                    self._pub.send(encode_control(s.told, s.allow, s.epoch), zmq.NOBLOCK)
                except zmq.Again:
                    pass
                next_publish = now + self._republish_s

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        self._pull.close(linger=0)
        self._ctx.term()


class StepGate:
    """The rank's end: ``wait(step)`` returns when the viewer lets step ``step`` start.

    Inert (no socket, no cost) when ``addr`` is None. Before the first control message the
    gate waits, so ``--paused`` holds even step 0; after ``silence_s`` without one it plays.
    """

    def __init__(self, addr: str | None = None, report_addr: str | None = None, rank: int = 0,
                 silence_s: float = SILENCE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.addr, self.rank = addr, rank
        self._silence_s, self._clock = silence_s, clock
        self.state: ControlState | None = None  # the last valid message heard
        self.rejected = 0  # malformed control messages, dropped
        self._ctx: zmq.Context | None = None
        self._sub: zmq.Socket | None = None
        self._push: zmq.Socket | None = None
        self._heard = clock()
        if addr is None:
            return
        self._ctx = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._sub.connect(addr)
        if report_addr:
            self._push = self._ctx.socket(zmq.PUSH)
            self._push.setsockopt(zmq.LINGER, 0)
            self._push.setsockopt(zmq.IMMEDIATE, 1)  # no viewer: drop the report at once
            self._push.setsockopt(zmq.SNDHWM, 100)
            self._push.connect(report_addr)

    @classmethod
    def from_env(cls, rank: int = 0, environ: Mapping[str, str] = os.environ) -> StepGate:
        return cls(environ.get(ENV_ADDR) or None, environ.get(ENV_REPORT) or None, rank)

    @property
    def active(self) -> bool:
        return self._sub is not None

    def wait(self, step: int) -> None:
        if self._sub is None:
            return
        self._receive(0)
        while not self._may_start(step):
            self._receive(GATE_POLL_MS)
        if self._push is not None:
            try:
                self._push.send(encode_report(self.rank, step), zmq.NOBLOCK)
            except zmq.Again:
                pass

    def close(self) -> None:
        for sock in (self._sub, self._push):
            if sock is not None:
                sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()
        self._sub = self._push = self._ctx = None

    def _may_start(self, step: int) -> bool:
        s = self.state
        if self._clock() - self._heard > self._silence_s:
            return True  # no viewer to say otherwise: play
        return s is not None and (s.mode == "play" or s.allow >= step)

    def _receive(self, timeout_ms: int) -> None:
        assert self._sub is not None
        if not self._sub.poll(timeout_ms):
            return
        while True:
            try:
                data = self._sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            state = decode_control(data)
            if state is None:
                self.rejected += 1
            else:
                self.state, self._heard = state, self._clock()
