"""Play / pause / single step: the Controller and the ranks' StepGate on real loopback sockets,
then two real gloo ranks held at the gate. Every wait is bounded; no thread or process stays."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable

import msgpack
import pytest
import zmq

from commviz.launch.launcher import free_port
from commviz.launch.runner import DemoContext
from commviz.viewer import recording
from commviz.viewer.transport import Receiver
from commviz.wire import control, protocol
from commviz.wire.control import Controller, ControlState, StepGate

BLOCKED_S = 0.6  # how long a held gate must stay held to count as blocked


def eventually(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Waiter:
    """``gate.wait(step)`` on a thread, so that the test can see whether it is held."""

    def __init__(self, gate: StepGate, step: int) -> None:
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gate, step), daemon=True)
        self.thread.start()

    def _run(self, gate: StepGate, step: int) -> None:
        gate.wait(step)
        self.done.set()

    def held(self) -> bool:
        return not self.done.wait(BLOCKED_S)

    def released(self, timeout: float = 3.0) -> bool:
        return self.done.wait(timeout)


@pytest.fixture
def make():
    """Controllers and gates that are closed at the end, whatever the test did."""
    made: list[Controller | StepGate] = []

    def factory(kind, *args, **kwargs):
        obj = kind(*args, **kwargs)
        made.append(obj)
        return obj

    yield factory
    for obj in reversed(made):
        obj.close()


def gate_for(make, ctl: Controller, rank: int = 0, silence_s: float = control.SILENCE_S):
    return make(StepGate, ctl.addr, ctl.report_addr, rank, silence_s=silence_s)


# ---- messages -------------------------------------------------------------------------

def test_messages_round_trip():
    data = control.encode_control("step", 3, 7)
    assert msgpack.unpackb(data) == {"v": 1, "k": "ctl", "mode": "step", "allow": 3, "epoch": 7}
    assert control.decode_control(data) == ControlState("step", 3, 7)
    assert control.decode_report(control.encode_report(2, 5)) == (2, 5)


@pytest.mark.parametrize("msg", [
    b"", b"\xc1", b"garbage", msgpack.packb([1, 2]), msgpack.packb("ctl"),
    msgpack.packb({"v": 2, "k": "ctl", "mode": "play", "allow": 0, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "hb", "mode": "play", "allow": 0, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "fast", "allow": 0, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": "9", "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": True, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": -2, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": 1 << 63, "epoch": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": 0}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": 0, "epoch": 0, "x": b"1"}),
    msgpack.packb({"v": 1, "k": "ctl", "mode": "step", "allow": 0, "epoch": 0, "x": "y" * 300}),
    msgpack.packb({1: 1}),
])
def test_malformed_control_messages_are_dropped(msg):
    assert control.decode_control(msg) is None
    assert control.decode_report(msg) is None


# ---- the gate alone -------------------------------------------------------------------

def test_gate_without_env_is_a_no_op():
    gate = StepGate.from_env(0, {})
    assert not gate.active
    start = time.monotonic()
    ctx = DemoContext(0, 1, "cpu", 64, 1000, 0.0, gate)
    assert list(ctx.iterations()) == list(range(1, 1001))
    assert time.monotonic() - start < 0.5
    gate.close()


@pytest.mark.integration
def test_gate_ignores_malformed_messages_and_obeys_valid_ones(make):
    zctx = zmq.Context()
    pub = zctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    try:
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        gate = make(StepGate, f"tcp://127.0.0.1:{port}")
        waiter = Waiter(gate, 0)
        bad = [b"\x00garbage", msgpack.packb({"v": 1, "k": "ctl", "mode": "play"}),
               msgpack.packb({"v": 1, "k": "ctl", "mode": "go", "allow": 9, "epoch": 1}),
               b"x" * 10_000]
        valid_step = control.encode_control("step", -1, 0)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # repeat: the first ones precede the connection
            for msg in [*bad, valid_step]:
                pub.send(msg)
            time.sleep(0.05)
        assert waiter.held()
        assert gate.rejected > 0 and gate.state == ControlState("step", -1, 0)
        for _ in range(50):
            pub.send(control.encode_control("step", 0, 1))
            if waiter.released(0.05):
                break
        assert waiter.released()
    finally:
        pub.close()
        zctx.term()


# ---- controller and gates -------------------------------------------------------------

@pytest.mark.integration
def test_in_step_mode_a_gate_waits_for_each_step(make):
    ctl = make(Controller, paused=True)
    gate = gate_for(make, ctl)
    first = Waiter(gate, 0)
    assert first.held(), "step 0 started before step() was called"
    ctl.step()
    assert first.released()
    assert eventually(lambda: ctl.state.reached == 0)
    second = Waiter(gate, 1)
    assert second.held()
    ctl.step()
    assert second.released()
    assert eventually(lambda: ctl.state == ControlState("step", 1, 2, 1))


@pytest.mark.integration
def test_after_restart_new_ranks_wait_at_their_first_step_again(make):
    ctl = make(Controller, paused=True)
    old = gate_for(make, ctl)
    for step in range(2):
        ctl.step()
        assert Waiter(old, step).released()
    assert eventually(lambda: ctl.state.reached == 1)
    ctl.restart()
    assert ctl.state.allow == -1 and ctl.state.reached == -1 and ctl.paused
    new = gate_for(make, ctl, rank=1)
    first = Waiter(new, 0)
    assert first.held(), "a restarted demo's first step ran without a step()"
    ctl.step()
    assert first.released()


@pytest.mark.integration
def test_play_releases_every_waiting_gate(make):
    ctl = make(Controller, paused=True)
    waiters = [Waiter(gate_for(make, ctl, rank), 0) for rank in range(3)]
    assert all(w.held() for w in waiters)
    ctl.play()
    assert all(w.released() for w in waiters)
    assert eventually(lambda: ctl.state.reached == 0)


@pytest.mark.integration
def test_pause_holds_the_ranks_after_the_step_in_progress(make):
    ctl = make(Controller)
    gate = gate_for(make, ctl)
    for step in range(3):
        assert Waiter(gate, step).released(), "a playing controller held a step"
    assert eventually(lambda: ctl.state.reached == 2)
    ctl.pause()
    assert ctl.paused and ctl.state.allow == 2
    time.sleep(0.2)  # the pause reaches the rank while it runs step 2 (else see the next test)
    held = Waiter(gate, 3)
    assert held.held()
    ctl.toggle()
    assert held.released()


@pytest.mark.integration
def test_a_hold_stops_playing_ranks_after_their_step_until_it_is_lifted(make):
    ctl = make(Controller)
    gate = gate_for(make, ctl)
    assert Waiter(gate, 0).released()
    assert eventually(lambda: ctl.state.reached == 0)
    ctl.hold(True)
    assert ctl.state.held and not ctl.paused and ctl.state.allow == 0
    time.sleep(0.2)  # the hold reaches the rank while it runs step 0
    held = Waiter(gate, 1)
    assert held.held()
    ctl.hold(False)
    assert held.released() and ctl.state.told == "play"


@pytest.mark.integration
def test_lifting_a_hold_leaves_a_paused_demo_paused(make):
    ctl = make(Controller, paused=True)
    gate = gate_for(make, ctl)
    ctl.hold(True)
    ctl.play()  # space while the replay catches up: still held
    waiter = Waiter(gate, 0)
    assert waiter.held()
    ctl.pause()
    ctl.hold(False)
    assert ctl.paused and waiter.held()
    ctl.step()
    assert waiter.released()


@pytest.mark.integration
def test_a_step_started_before_pause_was_heard_is_granted_to_every_rank(make):
    """Rank 1 started step 4 while playing; the pause said allow=-1: rank 0 may start step 4
    too (else rank 1 would wait in step 4's collective for a rank held at the gate)."""
    ctl = make(Controller, paused=True)
    gate = gate_for(make, ctl, 0)
    held = Waiter(gate, 4)
    assert held.held()
    zctx = zmq.Context()
    push = zctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        push.connect(ctl.report_addr)
        push.send(b"\x93not a report")
        push.send(control.encode_report(1, 4))
        assert held.released()
        assert ctl.state.allow == 4 and ctl.state.reached == 4
        assert eventually(lambda: ctl.rejected == 1)
        last = Waiter(gate, 5)
        assert last.held()
        ctl.play()
        assert last.released()  # no thread left using the gate when it closes
    finally:
        push.close()
        zctx.term()


@pytest.mark.integration
def test_a_gate_plays_on_when_the_controller_is_gone(make):
    ctl = make(Controller, paused=True)
    gate = gate_for(make, ctl, silence_s=0.8)
    waiter = Waiter(gate, 0)
    assert waiter.held()
    start = time.monotonic()
    ctl.close()
    assert waiter.released(5.0), "a gate waited forever for a vanished viewer"
    assert 0.5 < time.monotonic() - start < 3.0
    assert Waiter(gate, 1).released(0.5)


@pytest.mark.integration
def test_before_any_message_a_gate_waits_then_plays_after_the_silence():
    gate = StepGate(f"tcp://127.0.0.1:{free_port()}", silence_s=0.5)  # nobody there
    try:
        start = time.monotonic()
        gate.wait(0)
        assert 0.4 < time.monotonic() - start < 2.0
    finally:
        gate.close()


@pytest.mark.integration
def test_control_imports_neither_textual_nor_rich_nor_torch():
    code = "import sys, commviz.wire.control; print(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60, check=True).stdout.split())
    assert not {"textual", "rich", "torch"} & loaded


def test_paused_needs_the_tui(capsys):
    from commviz import cli

    assert cli.main(["demo", "all_reduce", "--ranks", "2", "--headless", "--paused"]) == 2
    assert "--paused needs the TUI" in capsys.readouterr().err


# ---- real gloo ranks -------------------------------------------------------------------

class Records:
    """all_reduce records and heartbeats the viewer received, per rank."""

    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver
        self.all_reduce = 0
        self.heard: set[int] = set()

    def collect(self, seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            for msg in self.receiver.drain(20):
                if isinstance(msg, protocol.Heartbeat):
                    self.heard.add(msg.rank)
                elif isinstance(msg, protocol.OpBatch):
                    self.all_reduce += sum(r["op"] == "all_reduce"
                                           for r in recording.op_dicts(msg))


@pytest.mark.integration
def test_paused_gloo_ranks_run_exactly_one_step_per_step_call(procs, make):
    world, iters = 2, 3
    ctl = make(Controller, paused=True)
    receiver = Receiver("tcp://127.0.0.1:*")
    try:
        port = free_port()
        env = {**ctl.env(), "COMMVIZ_ADDR": receiver.addr}
        ranks = [procs.start("-m", "commviz.launch.runner", "all_reduce", "--rank", str(r),
                             "--world", str(world), "--backend", "gloo", "--master-port",
                             str(port), "--iters", str(iters), "--size", "64", env=env)
                 for r in range(world)]
        seen = Records(receiver)
        seen.collect(90, until=lambda: len(seen.heard) == world)  # both past init
        assert seen.heard == set(range(world)), "ranks did not start"
        seen.collect(1.5)
        assert seen.all_reduce == 0, "an all_reduce ran before the first step() call"
        for k in range(1, iters + 1):
            ctl.step()
            seen.collect(20, until=lambda k=k: seen.all_reduce >= world * k)
            seen.collect(0.8)  # and nothing more: the next step waits for the next call
            assert seen.all_reduce == world * k, f"after {k} step() calls"
        assert [rank.finish(30) for rank in ranks] == [0] * world
        assert ctl.state.reached == iters - 1
    finally:
        receiver.close()
